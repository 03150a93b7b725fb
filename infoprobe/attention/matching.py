"""Heads matched to the slots of InfoFlow's predicted program, one block at a time.

Each head is scored against each slot of layer b+1 (:class:`SlotScores`): a slot with a
retrieval by the per-sample argmax agreement between the head's argmax key and the key the
InfoFlow engine retrieves, a position-specific aggregation by the attention mass on its
positions, a global aggregation by the normalised entropy; :func:`match_heads` assigns
heads to slots one to one (retrievals first). Used by :mod:`infoprobe.attention.program`.
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from infoprobe.attention.reads import Reads
from infoprobe.attention.statistics import (
    HeadStatistics,
    argmax_agreement,
    mass_on_positions,
)
from infoprobe.infoflow import AggregateAll, AggregatePositions, Retrieval, SlotOperation

GROUPS = ("data", "cls")


def assign(score: np.ndarray) -> list[tuple[int, int]]:
    """One-to-one (row, column) pairs maximising the total score."""
    if score.size == 0:
        return []
    rows, cols = linear_sum_assignment(score, maximize=True)
    return list(zip(rows.tolist(), cols.tolist(), strict=True))


@dataclass(frozen=True)
class Block:
    """One block's inputs to the matching: its patterns ``[n, h, T+1, T+1]``, the query
    rows per group, every head's statistics, modes and reads per group, and the program's
    operations and the engine's retrievals (keyed (layer, slot, group)) for layer b+1
    (both empty, and ``n_slots`` 0, without a program)."""

    index: int
    pattern: np.ndarray
    queries: dict[str, np.ndarray]
    stats: dict[str, HeadStatistics]
    modes: dict[str, tuple[str, ...]]
    reads: dict[str, tuple[Reads, ...]]
    ops: dict[tuple[int, int, str], SlotOperation]
    found: dict[tuple[int, int, str], Retrieval]
    n_slots: int
    T: int

    @property
    def layer(self) -> int:
        return self.index + 1

    @property
    def heads(self) -> int:
        return self.pattern.shape[1]

    def op(self, slot: int, group: str) -> SlotOperation | None:
        """The program's operation of ``slot`` for the query ``group`` (None: idle)."""
        return self.ops.get((self.layer, slot, group))


@dataclass
class SlotScores:
    """How well each head fits each slot of one block ``[h, slots]``, summed over the
    query groups weighted by their query counts: argmax agreement with the engine's keys
    for slots with a retrieval (``hits`` over ``covered`` queries), the aggregation fit
    for the others (``fit`` over ``weight`` queries). ``agree`` and ``mass`` keep each
    (group, slot)'s per-head values ``[h]`` for the rows."""

    hits: np.ndarray
    covered: np.ndarray
    fit: np.ndarray
    weight: np.ndarray
    agree: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    mass: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    @classmethod
    def zeros(cls, heads: int, slots: int) -> "SlotScores":
        """Nothing accumulated yet: ``heads`` heads against ``slots`` slots."""
        return cls(
            np.zeros((heads, slots)), np.zeros(slots), np.zeros((heads, slots)), np.zeros(slots)
        )

    def add_retrieval(self, group: str, slot: int, agreement: np.ndarray, queries: int) -> None:
        self.agree[group, slot] = agreement
        self.hits[:, slot] += agreement * queries
        self.covered[slot] += queries

    def add_aggregation(self, slot: int, fit: np.ndarray, queries: int) -> None:
        self.fit[:, slot] += fit * queries
        self.weight[slot] += queries

    @property
    def agreement(self) -> np.ndarray:
        """Mean argmax agreement per head and slot over the covered queries ``[h, slots]``."""
        return self.hits / np.maximum(self.covered, 1)

    @property
    def mean_fit(self) -> np.ndarray:
        """Mean aggregation fit per head and slot ``[h, slots]``."""
        return self.fit / np.maximum(self.weight, 1)


def slot_scores(block: Block) -> SlotScores:
    """Every head against every slot of the block (:class:`SlotScores`): a retrieval by
    the argmax agreement with the engine's chosen keys, a position-specific aggregation
    by the mass on its positions, a global one by the normalised entropy."""
    scores = SlotScores.zeros(block.heads, block.n_slots)
    for k in range(block.n_slots):
        for g in GROUPS:
            op = block.op(k, g)
            if op is None:
                continue
            queries = block.queries[g]
            if op.is_retrieval:
                chosen = block.found[block.layer, k, g].chosen
                agreement = argmax_agreement(block.pattern, chosen, queries, block.T)
                scores.add_retrieval(g, k, agreement, queries.size)
            elif isinstance(op.op, AggregatePositions):
                mass = mass_on_positions(block.pattern, queries, op.positions)
                scores.mass[g, k] = mass
                scores.add_aggregation(k, mass, queries.size)
            else:
                assert isinstance(op.op, AggregateAll)
                scores.add_aggregation(k, block.stats[g].entropy, queries.size)
    return scores


def match_heads(scores: SlotScores) -> dict[int, int]:
    """Head → slot, one to one: the slots with a retrieval first, by agreement, then the
    remaining heads to the remaining slots, by fit."""
    heads, slots = scores.hits.shape
    retrieval_slots = [k for k in range(slots) if scores.covered[k] > 0]
    other_slots = [k for k in range(slots) if scores.covered[k] == 0]
    match: dict[int, int] = {}
    for j, c in assign(scores.agreement[:, retrieval_slots]):
        match[j] = retrieval_slots[c]
    free = [j for j in range(heads) if j not in match]
    for j, c in assign(scores.mean_fit[np.ix_(free, other_slots)]):
        match[free[j]] = other_slots[c]
    return match


def unmatched_slots(block: Block, match: dict[int, int]) -> list[SlotOperation]:
    """The operations of the block's slots no head was matched to."""
    taken = set(match.values())
    return [
        op
        for k in range(block.n_slots)
        if k not in taken
        for g in GROUPS
        if (op := block.op(k, g)) is not None
    ]
