"""Which orientation of each comparison a trained model implements, read from attention.

A pairwise comparison max_{s,t} x(s)^T A x(t) has two equivalent max-retrieval chains:
each token t retrieves argmax_s x(t)^T A x(s) (the task's declared chain) or argmax_s
x(s)^T A x(t) (its mirror); both end with the same number at CLS, and InfoFlow does not
say which token queries. Trained models take either, so per-sample sets predicted with
the wrong one name the wrong partner at every layer after the first retrieval.

The rule (fixed before any comparison with flow or decodability, which it never reads):
for each comparison that has a mirror and whose first stage is a retrieval in the
program, take the block b that stage runs in; for each orientation, the agreement of a
head is the share of (sample, query) pairs whose attention argmax over the T data keys
is the key that orientation retrieves (:func:`infoprobe.attention.statistics.argmax_agreement`); the
orientation's score is its best head's agreement. The mirror is chosen iff its score is
strictly higher; otherwise, and for every comparison without a mirror or without a
retrieval in the program, the declared chain stays.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from infoprobe.attention.statistics import argmax_agreement
from infoprobe.infoflow import Architecture, InfoFlowError, Retrieval, predict, retrievals
from infoprobe.tasks import Task


@dataclass(frozen=True)
class OrientationChoice:
    """The orientation chosen for one comparison and the evidence.

    ``block``: the block of the comparison's first retrieval (None: no retrieval of it in
    the program, or no mirror); ``declared`` / ``mirrored``: the best head's argmax
    agreement with each orientation's keys (None where not measured); ``chosen``:
    "declared" or "mirrored".
    """

    label: str
    block: int | None
    declared: float | None
    mirrored: float | None
    chosen: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _first_stages(found: list[Retrieval]) -> dict[int, Retrieval]:
    """Comparison index -> its first-stage retrieval (data or CLS queries)."""
    return {r.comparison: r for r in found if r.stage == 0}


def choose_orientation(
    task: Task, arch: Architecture, x: np.ndarray, patterns: Sequence[np.ndarray]
) -> tuple[OrientationChoice, ...]:
    """The orientation of every comparison of ``task`` that the model's heads implement.

    Args:
        arch: the architecture the program is derived for.
        x: task inputs ``[n, T, d]``.
        patterns: ``patterns[b]`` = ``blocks.{b}.attn.hook_pattern`` ``[n, h_b, T+1, T+1]``
            of the same n samples, for every block.
    Returns one :class:`OrientationChoice` per comparison, in the task's order.
    """
    x = np.asarray(x)
    n, T = x.shape[:2]
    if len(patterns) != arch.n_layers:
        raise InfoFlowError(
            f"choose_orientation: expected attention patterns of {arch.n_layers} blocks, "
            f"got {len(patterns)}"
        )
    structure = task.structure()
    keys = {}
    for name in ("declared", "mirrored"):  # "mirrored": every comparison that has a mirror
        program = predict(task, arch, orientation=name, search_min_heads=False).program
        keys[name] = _first_stages(retrievals(program, x))
    out = []
    for i, comparison in enumerate(structure.comparisons):
        first = keys["declared"].get(i)
        if comparison.mirror is None or first is None:
            out.append(OrientationChoice(comparison.label, None, None, None, "declared"))
            continue
        pattern = np.asarray(patterns[first.block])
        if pattern.shape[0] != n or pattern.shape[2:] != (T + 1, T + 1):
            raise InfoFlowError(
                f"choose_orientation: block {first.block} patterns have shape "
                f"{list(pattern.shape)}, expected [{n}, h, {T + 1}, {T + 1}]"
            )
        score = {
            o: float(argmax_agreement(pattern, keys[o][i].chosen, first.queries, T).max())
            for o in keys
        }
        chosen = "mirrored" if score["mirrored"] > score["declared"] else "declared"
        out.append(
            OrientationChoice(
                comparison.label, first.block, score["declared"], score["mirrored"], chosen
            )
        )
    return tuple(out)


def describe_choice(choices: Sequence[OrientationChoice]) -> str:
    """One line per comparison: the orientation and its evidence."""
    lines = []
    for c in choices:
        if c.block is None:
            lines.append(f"{c.label}: declared (no mirror, or no retrieval of it to read)")
        else:
            lines.append(
                f"{c.label}: {c.chosen} (block {c.block}, best head's argmax agreement "
                f"{c.declared:.2f} declared, {c.mirrored:.2f} mirrored)"
            )
    return "\n".join(lines)


def recorded_orientation(recorded: Any) -> str:
    """In words, the orientation a predicted-sets file records in its provenance: the
    choice read from attention (a list of :class:`OrientationChoice` dicts) or a note."""
    if isinstance(recorded, list):
        choices = [OrientationChoice(**c) for c in recorded]
        return "chosen from attention; " + "; ".join(describe_choice(choices).splitlines())
    return "declared (recorded before orientations existed)" if recorded is None else recorded
