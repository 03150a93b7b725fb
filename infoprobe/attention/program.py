"""The observed InfoFlow program: what each attention head does, read from its patterns.

InfoFlow predicts a program (:class:`infoprobe.infoflow.Program`): for every layer and
head slot, one operation for the data-token queries and one for the CLS query (max
retrieval of a comparison's stage, global aggregation, position-specific aggregation, or
idle). This module reads cached attention patterns ``blocks.{b}.attn.hook_pattern``
``[n, h, T+1, T+1]`` (sample, head, query, key) and puts the observed program beside it:

1. per head and query group (``"data"``: queries 0..T-1, ``"cls"``: query T), four
   statistics and an observed mode from fixed rules (:mod:`infoprobe.attention.statistics`);
2. per block, every observed head is matched to a program slot of layer b+1
   (:func:`observed_program`): slots with a retrieval by the per-sample agreement between
   the head's argmax key and the key the InfoFlow engine retrieves
   (:func:`infoprobe.infoflow.retrievals`), maximised over one-to-one assignments; then the
   remaining heads to the aggregation and idle slots by how well they fit them.

An argmax shows where a head looks, not what it moves: flow and decodability measure
that. See docs/heads.md for the definitions and why each cut sits where it does.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from infoprobe.attention.matching import (
    GROUPS,
    Block,
    SlotScores,
    match_heads,
    slot_scores,
    unmatched_slots,
)
from infoprobe.attention.reads import READ_MASS, READ_RULE, head_reads
from infoprobe.attention.statistics import (
    HeadsError,
    check_patterns,
    fixed_key_agreement,
    head_statistics,
    rules,
)
from infoprobe.base.jsonable import jsonable
from infoprobe.infoflow import (
    AggregatePositions,
    Program,
    SlotOperation,
    retrievals,
    slot_operations,
)

NO_OPERATION = "no program operation"
NO_PROGRAM = "no predicted program"
CHANCE_RULE = "1/T: a head whose argmax is uniform over the T data keys a retrieval chooses from"


# ---- result ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupObservation:
    """One head at one query group: statistics, observed mode and the matched operation.

    ``operation`` is ``program.describe_op`` of the matched slot's op for this group ("idle"
    if that slot does nothing here, "no program operation" if the head is unmatched);
    ``kind`` the op's kind (None when idle or unmatched); ``comparison`` the comparison
    label of a retrieval. ``agreement`` (retrievals): share of (sample, query) pairs whose
    argmax key is the engine's chosen key; ``fixed_key`` (retrievals): the agreement of the
    best content-blind head; ``mass_on_positions`` (position-specific aggregation): mean
    attention mass on P. ``reads``, ``keys``, ``offset``: what the head reads, from its
    attention alone (:class:`infoprobe.attention.reads.Reads`; with or without a program).
    """

    group: str
    top1: float
    specificity: float
    entropy: float
    content: float
    mode: str
    operation: str
    kind: str | None = None
    comparison: str | None = None
    agreement: float | None = None
    fixed_key: float | None = None
    mass_on_positions: float | None = None
    reads: str = ""
    keys: tuple[int, ...] | None = None
    offset: int | None = None


@dataclass(frozen=True)
class HeadRow:
    """One observed head (``block``, ``head``: 0-based as in TransformerLens) and the
    program slot it is matched to (``slot``: 0-based index into ``program.layers[block]``,
    None if unmatched). ``agreement`` = argmax agreement over all queries the slot's
    retrievals cover (None if the slot has no retrieval); ``chance`` = 1/T."""

    block: int
    head: int
    slot: int | None
    agreement: float | None
    chance: float
    data: GroupObservation
    cls: GroupObservation

    @property
    def layer(self) -> int:
        return self.block + 1

    def group(self, name: str) -> GroupObservation:
        return self.data if name == "data" else self.cls


@dataclass(frozen=True)
class ObservedProgram:
    """The observed program: one :class:`HeadRow` per head of every block, and the program
    slots no head was matched to (more slots than heads in a block); ``predicted`` False
    when there was no program to match the heads to (a model with no task)."""

    T: int
    n_samples: int
    rows: tuple[HeadRow, ...]
    unmatched_slots: tuple[SlotOperation, ...]
    predicted: bool = True

    @property
    def chance(self) -> float:
        """Chance argmax agreement (see CHANCE_RULE)."""
        return 1.0 / self.T

    def row(self, block: int, head: int) -> HeadRow:
        for r in self.rows:
            if (r.block, r.head) == (block, head):
                return r
        raise KeyError(f"no observed head {head} in block {block}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN → None)."""

        def group(g: GroupObservation) -> dict[str, Any]:
            return {f.name: getattr(g, f.name) for f in fields(g)}

        out = jsonable(
            {
                "T": self.T,
                "n_samples": self.n_samples,
                "chance": self.chance,
                "chance_rule": CHANCE_RULE,
                "predicted": self.predicted,
                "rules": {**rules(), "READ_MASS": READ_MASS, "read_rule": READ_RULE},
                "heads": [
                    {
                        "block": r.block,
                        "layer": r.layer,
                        "head": r.head,
                        "slot": r.slot,
                        "agreement": r.agreement,
                        "chance": r.chance,
                        "data": group(r.data),
                        "cls": group(r.cls),
                    }
                    for r in self.rows
                ],
                "unmatched_slots": [
                    {"layer": s.layer, "slot": s.slot, "group": s.group, "operation": s.description}
                    for s in self.unmatched_slots
                ],
            }
        )
        json.dumps(out, allow_nan=False)  # fail here, not in the caller's writer
        return out

    def lines(self) -> list[str]:
        """A plain-text table: one line per head and query group (without a predicted
        program, only the statistics, the mode and what each head reads)."""
        out = [
            f"observed program: {len({r.block for r in self.rows})} block(s), T={self.T}, "
            f"{self.n_samples} samples" + ("" if self.predicted else ", no predicted program"),
        ]
        if self.predicted:
            out += [
                f"chance argmax agreement {self.chance:.3f} = {CHANCE_RULE}",
                "agree = share of (sample, query) whose argmax key is the engine's chosen "
                "key; fixed = best content-blind head; massP = attention mass on P",
                "slot = program head slot, 0-based (Program.describe calls it head slot+1)",
            ]
        out.append(f"reads = the keys each head reads, from its attention alone ({READ_RULE})")
        matched = f"{'agree':>5} {'fixed':>5} {'massP':>5}  operation | " if self.predicted else ""
        out.append(
            f"{'block':>5} {'head':>4} {'slot':>4} {'query':<5} {'mode':<28} {'top1':>5} "
            f"{'spec':>5} {'entr':>5} {'cont':>5} {matched}reads"
        )
        for r in self.rows:
            for g in (r.data, r.cls):
                slot = "-" if r.slot is None else str(r.slot)
                query = "CLS" if g.group == "cls" else "data"
                matched = (
                    f"{_fmt(g.agreement)} {_fmt(g.fixed_key)} {_fmt(g.mass_on_positions)}  "
                    f"{g.operation} | "
                )
                out.append(
                    f"{r.block:>5} {r.head:>4} {slot:>4} {query:<5} "
                    f"{g.mode:<28} {g.top1:5.2f} {g.specificity:5.2f} {g.entropy:5.2f} "
                    f"{g.content:5.2f} {matched if self.predicted else ''}{g.reads}"
                )
        for s in self.unmatched_slots:
            out.append(
                f"unmatched program slot: layer {s.layer} slot {s.slot} {s.group}: {s.description}"
            )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _fmt(v: float | None) -> str:
    return f"{'-':>5}" if v is None or not math.isfinite(v) else f"{v:5.3f}"[:5]


def _aligned_inputs(x: np.ndarray, sample_index: np.ndarray | Sequence[int] | None) -> np.ndarray:
    """The task inputs ``[n, T, d]`` of the patterns' samples (rows ``sample_index``)."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise HeadsError(f"x: expected [n, T, d], got shape {list(x.shape)}")
    if sample_index is None:
        return x
    index = np.asarray(sample_index, dtype=np.int64).ravel()
    if index.size and (index.min() < -len(x) or index.max() >= len(x)):
        raise HeadsError(f"sample_index: rows must lie in 0..{len(x) - 1}")
    return x[index]


def _group_observation(
    block: Block, scores: SlotScores, head: int, slot: int | None, group: str
) -> GroupObservation:
    """Head ``head`` at query ``group``: its statistics and mode, and the operation of the
    slot it is matched to (``slot``; None: unmatched)."""
    s = block.stats[group]
    op = None if slot is None else block.op(slot, group)
    reads = block.reads[group][head]
    if op is not None and isinstance(op.op, AggregatePositions):
        reads = reads.subset_of(op.positions)
    base = dict(
        group=group,
        top1=float(s.top1[head]),
        specificity=float(s.specificity[head]),
        entropy=float(s.entropy[head]),
        content=float(s.content[head]),
        mode=block.modes[group][head],
        reads=reads.text,
        keys=reads.keys,
        offset=reads.offset,
    )
    if slot is None:
        return GroupObservation(**base, operation=NO_OPERATION if block.n_slots else NO_PROGRAM)
    if op is None:
        return GroupObservation(**base, operation="idle")
    if op.is_retrieval:
        chosen = block.found[block.layer, slot, group].chosen
        return GroupObservation(
            **base,
            operation=op.description,
            kind=op.kind,
            comparison=op.label,
            agreement=float(scores.agree[group, slot][head]),
            fixed_key=fixed_key_agreement(chosen, block.T + 1),
        )
    mass = scores.mass.get((group, slot))
    return GroupObservation(
        **base,
        operation=op.description,
        kind=op.kind,
        mass_on_positions=None if mass is None else float(mass[head]),
    )


def _head_row(block: Block, scores: SlotScores, head: int, slot: int | None) -> HeadRow:
    """The row of head ``head`` matched to ``slot`` (None: unmatched)."""
    retrieves = slot is not None and scores.covered[slot]
    return HeadRow(
        block=block.index,
        head=head,
        slot=slot,
        agreement=float(scores.agreement[head, slot]) if retrieves else None,
        chance=1.0 / block.T,
        data=_group_observation(block, scores, head, slot, "data"),
        cls=_group_observation(block, scores, head, slot, "cls"),
    )


def observed_program(
    patterns: Sequence[np.ndarray],
    program: Program | None,
    x: np.ndarray | None = None,
    *,
    sample_index: np.ndarray | Sequence[int] | None = None,
) -> ObservedProgram:
    """The observed program beside InfoFlow's predicted ``program``.

    Args:
        patterns: ``patterns[b]`` = ``blocks.{b}.attn.hook_pattern`` ``[n, h_b, T+1, T+1]``
            for every block b of the program (rows summing to 1).
        program: the predicted program (``predict(task, arch).program``), or None for a
            model with no task: every head then gets its mode and what it reads from its
            attention alone (operation "no predicted program").
        x: task inputs ``[n_all, T, d]`` (needed with a program); ``sample_index`` int
            ``[n]`` names the rows of x the patterns belong to (else x is ``[n, T, d]``).

    For each block b the heads are matched one-to-one to the slots of layer b+1: first
    the slots with a retrieval, maximising the total argmax agreement with the engine's
    chosen keys (over the queries their retrievals cover); then the remaining heads to
    the remaining slots, maximising the fit (mass on P for a position-specific
    aggregation, normalised entropy for a global one, 0 for an idle slot). Heads beyond
    the slots get "no program operation".
    """
    if program is None:
        first = np.asarray(patterns[0]) if len(patterns) else np.zeros((0, 0, 1, 1))
        n, T = first.shape[0], first.shape[-1] - 1
        arrays = check_patterns(patterns, n, T, len(patterns))
        found, ops = {}, {}
    else:
        if x is None:
            raise HeadsError("x: the task inputs [n, T, d] are needed beside a program")
        x = _aligned_inputs(x, sample_index)
        n, T, _ = x.shape
        arrays = check_patterns(patterns, n, T, program.n_layers)
        found = {(r.layer, r.slot, r.group): r for r in retrievals(program, x)}
        ops = {(o.layer, o.slot, o.group): o for o in slot_operations(program)}
    queries = {"data": np.arange(T), "cls": np.array([T])}
    rows: list[HeadRow] = []
    unmatched: list[SlotOperation] = []
    for b, pattern in enumerate(arrays):
        stats = {g: head_statistics(pattern, queries[g]) for g in GROUPS}
        modes = {g: stats[g].modes for g in GROUPS}
        reads = {g: head_reads(pattern, queries[g], modes[g], T) for g in GROUPS}
        slots = 0 if program is None else len(program.layers[b])
        block = Block(b, pattern, queries, stats, modes, reads, ops, found, slots, T)
        scores = slot_scores(block)
        match = match_heads(scores)
        unmatched += unmatched_slots(block, match)
        rows += [_head_row(block, scores, j, match.get(j)) for j in range(block.heads)]
    return ObservedProgram(T, n, tuple(rows), tuple(unmatched), predicted=program is not None)
