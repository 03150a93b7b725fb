"""How a task declares its comparison structure: plain data the InfoFlow engine reads.

The engine (``infoprobe.infoflow``) never looks at a task's name; it schedules what the
task declares here onto an architecture's heads. Vocabulary (see docs/infoflow.md):

* A :class:`Comparison` is one content comparison the target needs, e.g. "max over pairs
  (s, t) of x(s)^T A_1 x(t)". Its ``order`` is the tuple size (1: each token against a
  fixed query, 2: pairs, 3: triples).
* A comparison is resolved by a chain of :class:`Stage` s, each one max-position (or
  k-th) retrieval performed by one query group (``"data"`` tokens or ``"cls"``) at a
  later layer than the previous stage. The last stage runs at CLS.
* A *chain* is the list of input positions a token has gathered for one comparison:
  a data token t starts with ``[t]``, CLS starts empty; when a query retrieves key s its
  chain becomes ``query_chain + key_chain(s)``.
* A score function is a vectorised callable ``score(q, k) -> [n, Q, K]`` (higher wins)
  receiving only the first ``reads_query`` entries of each query's chain, ``q`` float
  ``[n, Q, reads_query, d]`` (None when ``reads_query == 0``), and the first ``reads_key``
  entries of each key's chain, ``k`` float ``[n, K, reads_key, d]``. This is how a score
  declares what it reads; the engine checks that every position it hands over lies in the
  query's or key's information set at that layer.
* A comparison with ``positions`` selects by position instead: the fixed set P is
  coupled at CLS (position-specific aggregation, needs positional encoding).
* A comparison with neither stages nor positions (e.g. order 3) has no max-retrieval
  decomposition; only aggregation can resolve it.
* A comparison may declare its ``mirror``: the same comparison resolved with the roles of
  query and key swapped (for max_{s,t} x(s)^T A x(t): t retrieves argmax_s x(t)^T A x(s),
  or argmax_s x(s)^T A x(t)). Both chains compute the same number and InfoFlow does not
  say which token queries; a trained model picks one, so the engine can follow either
  (:meth:`ComparisonStructure.oriented`).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .errors import TaskError

QueryGroup = Literal["data", "cls"]
QUERY_GROUPS: tuple[str, ...] = ("data", "cls")
ORIENTATIONS: tuple[str, ...] = ("declared", "mirrored")
"""A comparison is resolved as declared or by its mirror (roles of query and key swapped)."""
ScoreFunction = Callable[[np.ndarray | None, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Stage:
    """One retrieval step of a comparison.

    Args:
        group: which queries perform it, ``"data"`` (every data token) or ``"cls"``.
        score: ``score(q, k) -> [n, Q, K]`` float, higher is better (see module doc).
        reads_query: how many entries of the query's chain the score reads (0 for CLS at
            the first stage: CLS carries no input).
        reads_key: how many entries of each key's chain the score reads (>= 1).
        rank: 1 = argmax retrieval; k >= 2 = retrieve the key with the k-th largest score.
        exclude_self: a data query never selects itself as key.
        description: the stage in words, e.g. "each token t retrieves argmax_s <x(t), x(s)>".
    """

    group: QueryGroup
    score: ScoreFunction
    reads_query: int = 0
    reads_key: int = 1
    rank: int = 1
    exclude_self: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.group not in QUERY_GROUPS:
            raise TaskError(f"Stage.group must be one of {QUERY_GROUPS}, got {self.group!r}")
        if not callable(self.score):
            raise TaskError(
                f"Stage.score must be a callable score(q, k) -> [n, Q, K], got {self.score!r}"
            )
        counts = (self.reads_query, self.reads_key, self.rank)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in counts):
            raise TaskError(
                "Stage reads_query, reads_key and rank must be integers, got "
                f"reads_query={self.reads_query!r}, reads_key={self.reads_key!r}, "
                f"rank={self.rank!r}"
            )
        if self.reads_key < 1 or self.reads_query < 0 or self.rank < 1:
            raise TaskError(
                "Stage needs reads_key >= 1, reads_query >= 0 and rank >= 1, got "
                f"reads_key={self.reads_key}, reads_query={self.reads_query}, rank={self.rank}"
            )


@dataclass(frozen=True)
class Comparison:
    """One comparison the target needs (see module doc).

    Args:
        label: short name, e.g. ``"pair-max[A_1]"``.
        order: tuple size of the comparison (1, 2, 3, ...), or |P| for a positional one.
        stages: the retrieval chain resolving it (empty: no retrieval decomposition).
        positions: fixed 0-based positions coupled at CLS (a positional comparison).
        tuples: number of token tuples compared (the comparison number's share).
        description: the comparison in words.
        mirror: the same comparison with the roles of query and key swapped (same label,
            order and tuples; None: there is no other orientation, or it is identical).
    """

    label: str
    order: int
    stages: tuple[Stage, ...] = ()
    positions: tuple[int, ...] | None = None
    tuples: int = 1
    description: str = ""
    mirror: "Comparison | None" = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise TaskError(f"Comparison.label must be a non-empty string, got {self.label!r}")
        for field, value in (("order", self.order), ("tuples", self.tuples)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TaskError(
                    f"Comparison {self.label!r}: {field} must be an integer >= 1, got {value!r}"
                )
        stages = self.stages
        if not isinstance(stages, tuple | list) or not all(isinstance(s, Stage) for s in stages):
            raise TaskError(
                f"Comparison {self.label!r}: stages must be a tuple of Stage, got {stages!r}"
            )
        object.__setattr__(self, "stages", tuple(stages))
        if self.positions is not None:
            self._check_positions()
        if self.positions is not None and self.stages:
            raise TaskError(
                f"Comparison {self.label!r}: declare either stages or positions, not both"
            )
        if self.stages and self.stages[-1].group != "cls":
            raise TaskError(
                f"Comparison {self.label!r}: the last stage must run at 'cls' (the readout), "
                f"got {self.stages[-1].group!r}"
            )
        m = self.mirror
        if m is not None and (
            (m.label, m.order, m.tuples) != (self.label, self.order, self.tuples)
            or [(st.group, st.reads_query, st.reads_key, st.rank) for st in m.stages]
            != [(st.group, st.reads_query, st.reads_key, st.rank) for st in self.stages]
        ):
            raise TaskError(
                f"Comparison {self.label!r}: its mirror must have the same label, order, "
                "tuples and stage shapes (groups, reads, ranks); only the scores differ"
            )

    def _check_positions(self) -> None:
        raw = self.positions
        if (
            not isinstance(raw, tuple | list)
            or not raw
            or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in raw)
        ):
            raise TaskError(
                f"Comparison {self.label!r}: positions must be a non-empty tuple of integers "
                f">= 0, got {raw!r}"
            )
        if len(set(raw)) != len(raw):
            raise TaskError(f"Comparison {self.label!r}: positions must be distinct, got {raw!r}")
        object.__setattr__(self, "positions", tuple(raw))

    def _check_reads(self) -> None:
        """Every stage reads at most what its query's and its keys' chains hold when it
        runs: a data token's chain starts as [t], CLS's empty; a data stage doubles the
        data chains, a CLS stage appends a key's data chain to CLS's."""
        held = {"data": 1, "cls": 0}
        for j, stage in enumerate(self.stages, 1):
            for side, reads, chain in (
                ("query", stage.reads_query, held[stage.group]),
                ("key", stage.reads_key, held["data"]),
            ):
                if reads > chain:
                    raise TaskError(
                        f"Comparison {self.label!r}: stage {j} ({stage.group}) reads {reads} "
                        f"input(s) of each {side} but the {side}'s chain holds {chain} when "
                        "it runs (a data chain starts as [t], CLS's empty; each stage appends "
                        "the retrieved key's data chain to its query's): lower "
                        f"reads_{side} or add the stage that gathers them first"
                    )
            held[stage.group] += held["data"]

    def check_fits(self, T: int) -> None:
        """Raise TaskError unless the engine can run this comparison on T data tokens:
        every stage reads at most what its chains hold (see :meth:`_check_reads`),
        positions < T, and a rank-k stage has at least k keys (T, or T-1 with
        ``exclude_self``)."""
        self._check_reads()
        if self.positions is not None and max(self.positions) >= T:
            raise TaskError(
                f"Comparison {self.label!r}: positions must be 0-based data positions < T={T}, "
                f"got {list(self.positions)}"
            )
        for j, stage in enumerate(self.stages, 1):
            keys = T - 1 if stage.exclude_self and stage.group == "data" else T
            if stage.rank > keys:
                raise TaskError(
                    f"Comparison {self.label!r}: stage {j} retrieves the key of rank "
                    f"{stage.rank} but has only {keys} key(s) at T={T}"
                )

    @property
    def selects_by_position(self) -> bool:
        return self.positions is not None


@dataclass(frozen=True)
class ComparisonStructure:
    """Everything a task's target needs: its comparisons and how CLS combines them."""

    comparisons: tuple[Comparison, ...]
    combine: str = ""

    def __post_init__(self) -> None:
        comps = self.comparisons
        if (
            not isinstance(comps, tuple | list)
            or not comps
            or not all(isinstance(c, Comparison) for c in comps)
        ):
            raise TaskError(
                "ComparisonStructure.comparisons must be a non-empty tuple of Comparison, "
                f"got {comps!r}"
            )
        object.__setattr__(self, "comparisons", tuple(comps))

    def check_fits(self, T: int) -> None:
        """Raise TaskError naming the first comparison that cannot run on T data tokens
        (:meth:`Comparison.check_fits`; a mirror is checked with its comparison)."""
        for c in self.comparisons:
            c.check_fits(T)
            if c.mirror is not None:
                c.mirror.check_fits(T)

    @property
    def order(self) -> int:
        """The comparison order: the largest tuple size among content comparisons."""
        content = [c.order for c in self.comparisons if not c.selects_by_position]
        return max(content, default=1)

    @property
    def mirrorable(self) -> tuple[bool, ...]:
        """Per comparison: whether it declares a mirror."""
        return tuple(c.mirror is not None for c in self.comparisons)

    def oriented(self, orientation: Sequence[str]) -> "ComparisonStructure":
        """The structure with comparison i resolved as ``orientation[i]`` ("declared" or
        "mirrored"); the program's shape and cost do not change, only which key each
        retrieval picks."""
        if len(orientation) != len(self.comparisons):
            raise TaskError(
                f"orientation: expected one entry per comparison ({len(self.comparisons)}: "
                f"{[c.label for c in self.comparisons]}), got {len(orientation)}"
            )
        comparisons = []
        for c, o in zip(self.comparisons, orientation, strict=True):
            if o not in ORIENTATIONS:
                raise TaskError(
                    f"orientation of {c.label!r}: expected one of {ORIENTATIONS}, got {o!r}"
                )
            if o == "mirrored" and c.mirror is None:
                raise TaskError(f"orientation of {c.label!r}: this comparison has no mirror")
            comparisons.append(c.mirror if o == "mirrored" else c)
        return ComparisonStructure(comparisons=tuple(comparisons), combine=self.combine)

    @property
    def number(self) -> int:
        """The comparison number: how many token tuples are compared in total."""
        return sum(c.tuples for c in self.comparisons)
