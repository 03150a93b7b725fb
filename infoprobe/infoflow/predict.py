"""predict(task, arch): the cheapest program, its exponent in T, the verdict, the sets."""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infoprobe.tasks import ORIENTATIONS, ComparisonStructure, Task, TaskError

from .arch import Architecture, as_architecture
from .cost import DEFAULT_KTH_LAW, KTH_LAWS, Exponent, KthLaw, alpha_text, rate_comparison
from .errors import InfoFlowError
from .execute import DEFAULT_CHUNK, execute
from .program import Program
from .schedule import derive_program

EFFICIENT, INEFFICIENT = "efficient", "inefficient"
MAX_HEAD_SEARCH = 20_000  # head vectors tried when looking for the minimum heads


def resolve_kth_law(kth_law: str | KthLaw) -> KthLaw:
    if callable(kth_law):
        return kth_law
    if kth_law not in KTH_LAWS:
        raise InfoFlowError(
            f"kth_law must be one of {sorted(KTH_LAWS)} or a callable, got {kth_law!r}"
        )
    return KTH_LAWS[kth_law]


def resolve_orientation(task: Task, orientation: str | Sequence[str] | None) -> tuple[str, ...]:
    """One orientation per comparison of ``task``: a sequence is taken as given; "declared"
    or "mirrored" puts every comparison that has a mirror in that orientation (the others
    stay declared); None means all declared."""
    if orientation is None or isinstance(orientation, str):
        which = orientation or "declared"
        if which not in ORIENTATIONS:
            raise InfoFlowError(
                f"orientation: expected one of {ORIENTATIONS} or one per comparison, got {which!r}"
            )
        return tuple(which if m else "declared" for m in task.structure().mirrorable)
    return tuple(orientation)


def oriented_structure(task: Task, orientation: Sequence[str]) -> ComparisonStructure:
    """The task's comparison structure, comparison i resolved as ``orientation[i]``
    ("declared" or "mirrored"); InfoFlowError naming the comparison if the engine cannot
    run it at the task's T (``ComparisonStructure.check_fits``)."""
    try:
        structure = task.structure()
        structure.check_fits(task.T)
        return structure.oriented(tuple(orientation))
    except TaskError as err:
        raise InfoFlowError(f"task {task.name}: {err}") from None


def cheapest_program(
    task: Task, arch: Architecture, kth_law: KthLaw, structure: ComparisonStructure | None = None
) -> tuple[Program, Exponent]:
    """Search the task's constructions and the generic fallbacks; return the cheapest
    (bounded exponents first, then the slowest growth, then the value at the task's T).
    ``structure``: the task's structure in some orientation (default: as declared)."""
    structure = task.structure() if structure is None else structure
    candidates = [
        derive_program(structure, arch),
        derive_program(structure, arch, use_kth=False),
        derive_program(structure, arch, use_retrieval=False),
    ]
    scored = [(p, p.exponent(arch, task.d, kth_law)) for p in candidates]
    return min(scored, key=lambda pe: pe[1].sort_key(task.T))  # min keeps the first on ties


def minimum_heads(task: Task, arch: Architecture, kth_law: KthLaw) -> tuple[int, ...] | None:
    """The smallest heads per layer (fewest in total, then the smallest max) at this depth
    and width for which the verdict is efficient; None if no head count is."""
    structure = task.structure()
    cap = sum(max(1, len(c.stages)) for c in structure.comparisons) + 1
    L = arch.n_layers
    candidates = sorted(
        itertools.islice(itertools.product(range(1, cap + 1), repeat=L), MAX_HEAD_SEARCH),
        key=lambda h: (sum(h), max(h), h),
    )
    for heads in candidates:
        _, exponent = cheapest_program(task, arch.with_heads(heads), kth_law)
        if not exponent.grows:
            return heads
    return None


def refuse_non_finite(x: np.ndarray, where: str, error: type[Exception]) -> None:
    """Raise ``error`` naming ``where`` if the inputs ``x`` [n, T, d] hold NaN or inf."""
    bad = ~np.isfinite(x)
    if bad.any():
        raise error(
            f"{where}: expected finite inputs, got {int(bad.sum())} NaN or infinite "
            f"value(s) (the first in sample {int(np.argwhere(bad)[0][0])})"
        )


@dataclass(frozen=True)
class Prediction:
    """InfoFlow's prediction for one task on one architecture.

    Attributes: ``program`` (the cheapest program), ``exponent`` (alpha as a function of T:
    call it, ``exponent(task.T)``), ``verdict`` ("efficient" iff alpha is bounded in T),
    ``explanation`` (words), ``min_heads`` (heads per layer making it efficient at this
    depth and width, or None), ``comparison_number`` and ``comparison_order``,
    ``orientation`` (per comparison of the task: "declared" or "mirrored", the roles of
    query and key swapped; see :meth:`infoprobe.tasks.ComparisonStructure.oriented`).
    """

    task: Task
    arch: Architecture
    program: Program
    exponent: Exponent
    verdict: str
    explanation: str
    min_heads: tuple[int, ...] | None
    comparison_number: int
    comparison_order: int
    kth_law: str
    orientation: tuple[str, ...] = ()

    @property
    def efficient(self) -> bool:
        return self.verdict == EFFICIENT

    @property
    def exponent_at_T(self) -> float:
        return self.exponent(self.task.T)

    def sets(
        self, x: np.ndarray, *, chunk: int = DEFAULT_CHUNK, progress: bool = False
    ) -> np.ndarray:
        """Predicted sets on inputs ``x`` float ``[n, T, d]``: bool ``[L+1, n, T+1, T+1]``
        (layer, sample, token, position; CLS = token/position T)."""
        x = self.task.check_inputs(x)
        refuse_non_finite(x, "sets: x", InfoFlowError)
        return execute(self.program, x, chunk=chunk, progress=progress)

    def program_text(self) -> str:
        return self.program.describe(self.arch)

    def rate_note(self) -> str:
        """α at the task's T and E in words, and for an inefficient verdict whether the law
        predicts the same rate as the minimum heads at this T: ``"α = 1 at T=16, E=32; at
        T=16 the law predicts the same rate for heads 1,2 and the minimum heads 2,2 (α = 1);
        it separates for T > 16"``."""
        T = self.task.T
        text = alpha_text(self.exponent, T, self.arch.d_model)
        if self.efficient or self.min_heads is None or self.kth_law not in KTH_LAWS:
            return text
        law = resolve_kth_law(self.kth_law)
        _, best = cheapest_program(self.task, self.arch.with_heads(self.min_heads), law)
        named = {
            f"heads {','.join(map(str, self.arch.heads))}": self.exponent,
            f"the minimum heads {','.join(map(str, self.min_heads))}": best,
        }
        return f"{text}; {rate_comparison(named, T)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the program in words)."""
        return {
            "task": self.task.to_dict(),
            "arch": self.arch.to_dict(),
            "verdict": self.verdict,
            "exponent": str(self.exponent),
            "exponent_at_T": self.exponent_at_T,
            "exponent_slope": self.exponent.slope,
            "bottleneck": self.exponent.dominant(self.task.T),
            "min_heads": None if self.min_heads is None else list(self.min_heads),
            "comparison_number": self.comparison_number,
            "comparison_order": self.comparison_order,
            "kth_law": self.kth_law,
            "orientation": {
                c.label: o
                for c, o in zip(self.program.structure.comparisons, self.orientation, strict=True)
            },
            "aggregated": [
                self.program.structure.comparisons[i].label for i in self.program.aggregated
            ],
            "program": self.program_text(),
            "explanation": self.explanation,
        }

    def describe(self) -> str:
        """Human-readable report: verdict, exponent, program, minimum heads."""
        pos = "yes" if self.arch.positions else "no"
        heads = (
            "none at this depth" if self.min_heads is None else ",".join(map(str, self.min_heads))
        )
        return "\n".join(
            [
                f"task: {self.task.name} {self.task.params()}",
                f"architecture: heads {','.join(map(str, self.arch.heads))}, "
                f"E={self.arch.d_model}, positional encoding: {pos}",
                f"verdict: {self.verdict}",
                f"exponent alpha(T) = {self.exponent} (parameters ~ eps^-alpha): "
                f"{self.rate_note()}",
                f"comparisons: {self.comparison_number} tuples of order {self.comparison_order}",
                f"minimum heads per layer for efficiency: {heads}",
                "program:",
                self.program_text(),
                f"why: {self.explanation}",
            ]
        )


def explain(task: Task, arch: Architecture, program: Program, exponent: Exponent) -> str:
    comps = program.structure.comparisons
    T = task.T
    bottleneck = exponent.dominant(T)
    if not exponent.grows:
        how = (
            "max retrieval / position-specific aggregation"
            if not program.aggregated
            else "aggregation"
        )
        return (
            f"every comparison is resolved by {how} within heads {list(arch.heads)}; the exponent "
            f"{exponent} does not depend on T (bottleneck: {bottleneck})."
        )
    reasons = []
    for i in program.aggregated:
        comp = comps[i]
        if comp.positions is not None and not arch.positions:
            why = "it selects by position and the model has no positional encoding"
        elif comp.positions is None and not comp.stages:
            why = f"an order-{comp.order} comparison has no max-retrieval chain"
        elif len(comp.stages) > arch.n_layers:
            why = f"its chain needs {len(comp.stages)} layers, the model has {arch.n_layers}"
        elif any(s.rank > 1 for s in comp.stages):
            why = "k-th retrieval would cost even more"
        else:
            why = f"no free head for its stages in heads {list(arch.heads)}"
        reasons.append(f"{comp.label} ({why})")
    text = ""
    if reasons:
        text = (
            "resolved by global aggregation at CLS, whose decode couples all T tokens "
            f"(alpha = T*d/E - 1): {'; '.join(reasons)}. "
        )
    return f"{text}The exponent {exponent} grows with T (bottleneck: {bottleneck})."


def predict(
    task: Task,
    arch: Any,
    *,
    kth_law: str | KthLaw = DEFAULT_KTH_LAW,
    search_min_heads: bool = True,
    orientation: str | Sequence[str] | None = None,
    **arch_kwargs: Any,
) -> Prediction:
    """InfoFlow prediction for ``task`` on ``arch``.

    ``arch``: an ``infoprobe.model.ModelConfig``, an :class:`Architecture`, or a sequence of
    heads per layer with keywords ``d_model``, ``d_head``, ``pos_encoding`` (see
    :func:`as_architecture`). ``kth_law``: "tail" (default, (T-k-1)/(n+1)), "rank"
    ((k-1)/n) or a callable ``(k, n) -> Affine``. ``orientation``: per comparison of the
    task, "declared" or "mirrored", or one of the two for every comparison that has a
    mirror (:func:`resolve_orientation`; None: all declared); it changes which key each
    retrieval picks, never the program's shape, cost or verdict.
    """
    if not isinstance(task, Task):
        raise TypeError(
            f"predict: task: expected a Task (infoprobe.tasks.make_task), got {type(task).__name__}"
        )
    architecture = as_architecture(arch, **arch_kwargs)
    if hasattr(arch, "n_ctx") and arch.n_ctx != task.T:
        raise InfoFlowError(
            f"architecture field 'n_ctx' is {arch.n_ctx} but the task has T={task.T}"
        )
    law = resolve_kth_law(kth_law)
    orientation = resolve_orientation(task, orientation)
    structure = oriented_structure(task, orientation)
    program, exponent = cheapest_program(task, architecture, law, structure)
    program.check(architecture)
    structure = program.structure
    return Prediction(
        task=task,
        arch=architecture,
        program=program,
        exponent=exponent,
        verdict=INEFFICIENT if exponent.grows else EFFICIENT,
        explanation=explain(task, architecture, program, exponent),
        min_heads=minimum_heads(task, architecture, law) if search_min_heads else None,
        comparison_number=structure.number,
        comparison_order=structure.order,
        kth_law=kth_law if isinstance(kth_law, str) else getattr(kth_law, "__name__", "custom"),
        orientation=orientation,
    )
