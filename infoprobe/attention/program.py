"""The observed InfoFlow program: what each attention head does, read from its patterns.

InfoFlow predicts a program (:class:`infoprobe.infoflow.Program`): for every layer and
head slot, one operation for the data-token queries and one for the CLS query (max
retrieval of a comparison's stage, global aggregation, position-specific aggregation, or
idle). This module reads cached attention patterns ``blocks.{b}.attn.hook_pattern``
``[n, h, T+1, T+1]`` (sample, head, query, key) and puts the observed program beside it:

1. per head and query group (``"data"``: queries 0..T-1, ``"cls"``: query T), four
   statistics (:func:`head_statistics`) and an observed mode from fixed rules
   (:func:`classify`, constants below);
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
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import xlogy

from infoprobe.infoflow import (
    AggregateAll,
    AggregatePositions,
    Program,
    Retrieval,
    SlotOperation,
    retrievals,
    slot_operations,
)

# ---- mode rules (fixed a priori; docs/heads.md justifies each cut) -------------------
GLOBAL_MIN_ENTROPY = 0.9
"""Normalised entropy at or above which rows count as near-uniform: global aggregation.
One-hot rows give 0, uniform rows 1, uniform over m of the T+1 keys log m / log(T+1)."""
POSITION_MIN_SPECIFICITY = 0.9
"""Position specificity at or above which a head is position-specific: for each query the
same argmax key in at least 90% of samples (a fixed-position head gives 1)."""
POSITION_MAX_CONTENT = 0.1
"""Content dependence at or below which a head is position-specific: at most 10% of the
attention mass moves between samples (a fixed pattern gives 0, a one-hot head whose key
is spread over m keys about 1 - 1/m)."""
RETRIEVAL_MIN_TOP1 = 0.5
"""Top-1 mass at or above which a content-dependent head counts as a retrieval: its
argmax key holds more mass than all other keys together (a hard max retrieval gives 1)."""

GLOBAL = "global aggregation"
POSITIONAL = "position-specific"
RETRIEVAL = "content-dependent retrieval"
DIFFUSE = "content-dependent, diffuse"
MODES = (GLOBAL, POSITIONAL, RETRIEVAL, DIFFUSE)

NO_OPERATION = "no program operation"
GROUPS = ("data", "cls")
ROW_SUM_TOLERANCE = 1e-3  # softmax rows in float32 sum to 1 within ~1e-6
STAT_CHUNK = 512  # samples per chunk in the statistics (bounds temporaries)
CHANCE_RULE = "1/T: a head whose argmax is uniform over the T data keys a retrieval chooses from"


class HeadsError(ValueError):
    """Bad input to the observed-program analysis (patterns, inputs or program)."""


# ---- statistics ------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadStatistics:
    """Per-head statistics of one block over a set of queries; every array is ``[h]``.

    top1: mean over samples and queries of max_k pattern[i, j, q, k].
    specificity: for each query, the share of samples whose argmax key is that query's most
        common argmax key, averaged over queries (1 = the same key in every sample).
    entropy: mean over samples and queries of H(row) / log(T+1) (0 one-hot, 1 uniform).
    content: mean over queries (and samples) of the total-variation distance between a
        sample's row and the mean row over samples (0 = the same pattern in every sample).
    queries: the query rows ``[Q]``; n_samples: n.
    """

    top1: np.ndarray
    specificity: np.ndarray
    entropy: np.ndarray
    content: np.ndarray
    queries: np.ndarray
    n_samples: int

    @property
    def modes(self) -> tuple[str, ...]:
        """The observed mode of each head (:func:`classify`)."""
        return tuple(
            classify(t, s, e, c)
            for t, s, e, c in zip(
                self.top1, self.specificity, self.entropy, self.content, strict=True
            )
        )


def classify(top1: float, specificity: float, entropy: float, content: float) -> str:
    """The observed mode from the four statistics, by fixed rules applied in order:

    1. ``entropy >= GLOBAL_MIN_ENTROPY`` → "global aggregation" (near-uniform rows: their
       argmax carries no meaning);
    2. ``specificity >= POSITION_MIN_SPECIFICITY`` or ``content <= POSITION_MAX_CONTENT``
       → "position-specific" (the same key, or the same pattern, in every sample);
    3. ``top1 >= RETRIEVAL_MIN_TOP1`` → "content-dependent retrieval";
    4. otherwise "content-dependent, diffuse".
    """
    if entropy >= GLOBAL_MIN_ENTROPY:
        return GLOBAL
    if specificity >= POSITION_MIN_SPECIFICITY or content <= POSITION_MAX_CONTENT:
        return POSITIONAL
    if top1 >= RETRIEVAL_MIN_TOP1:
        return RETRIEVAL
    return DIFFUSE


def _chunks(n: int, size: int = STAT_CHUNK):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _query_index(queries: Sequence[int] | np.ndarray | None, tokens: int) -> np.ndarray:
    q = np.arange(tokens) if queries is None else np.asarray(queries, dtype=np.int64).ravel()
    if q.size == 0 or q.min() < 0 or q.max() >= tokens:
        raise HeadsError(f"queries must be non-empty rows in 0..{tokens - 1}, got {q.tolist()}")
    return q


def head_statistics(
    pattern: np.ndarray, queries: Sequence[int] | np.ndarray | None = None
) -> HeadStatistics:
    """Statistics of every head of one block.

    pattern: attention pattern ``[n, h, T+1, T+1]`` (sample, head, query, key), rows
    summing to 1; queries: the query rows to use (default all T+1). Returns
    :class:`HeadStatistics` with arrays ``[h]``. Vectorised over samples, heads and
    queries, in chunks of ``STAT_CHUNK`` samples (float64 arithmetic).
    """
    p = np.asarray(pattern)
    if p.ndim != 4 or p.shape[2] != p.shape[3]:
        raise HeadsError(f"pattern: expected [n, h, T+1, T+1], got shape {list(p.shape)}")
    n, h, tokens, _ = p.shape
    if n < 2:
        raise HeadsError(f"pattern: need at least 2 samples to compare them, got {n}")
    q = _query_index(queries, tokens)
    Q = q.size
    top1 = np.zeros(h)
    entropy = np.zeros(h)
    mean_row = np.zeros((h, Q, tokens))
    counts = np.zeros(h * Q * tokens, dtype=np.int64)
    cell = (np.arange(h)[:, None] * Q + np.arange(Q)[None, :]) * tokens  # [h, Q]
    for part in _chunks(n):
        rows = p[part][:, :, q].astype(np.float64)  # [c, h, Q, T+1]
        top1 += rows.max(axis=3).sum(axis=(0, 2))
        entropy -= xlogy(rows, rows).sum(axis=(0, 2, 3))
        mean_row += rows.sum(axis=0)
        counts += np.bincount((cell + rows.argmax(axis=3)).ravel(), minlength=counts.size)
    mean_row /= n
    content = np.zeros(h)
    for part in _chunks(n):
        rows = p[part][:, :, q].astype(np.float64)
        content += 0.5 * np.abs(rows - mean_row).sum(axis=(0, 2, 3))
    total = n * Q
    specificity = counts.reshape(h, Q, tokens).max(axis=2).mean(axis=1) / n
    return HeadStatistics(
        top1=top1 / total,
        specificity=specificity,
        entropy=entropy / total / math.log(tokens),
        content=content / total,
        queries=q,
        n_samples=n,
    )


def argmax_agreement(
    pattern: np.ndarray, chosen: np.ndarray, queries: np.ndarray, n_keys: int | None = None
) -> np.ndarray:
    """Per-head share of (sample, query) pairs whose argmax key is the chosen key.

    pattern ``[n, h, T+1, T+1]``; chosen int ``[n, Q]`` (the key per sample and query);
    queries int ``[Q]`` the query rows; n_keys: the candidates are keys 0..n_keys-1 (the
    T data keys a retrieval chooses from; None: every key). Returns ``[h]`` = mean over i
    and q of [argmax_{k < n_keys} pattern[i, j, queries[q], k] == chosen[i, q]] (ties:
    the lowest key).
    """
    p = np.asarray(pattern)
    q = np.asarray(queries, dtype=np.int64)
    chosen = np.asarray(chosen)
    keys = slice(None, n_keys)
    hits = np.zeros(p.shape[1])
    for part in _chunks(p.shape[0]):
        best = p[part][:, :, q][..., keys].argmax(axis=3)
        hits += (best == chosen[part][:, None, :]).sum(axis=(0, 2))
    return hits / (p.shape[0] * q.size)


def mass_on_positions(
    pattern: np.ndarray, queries: np.ndarray, positions: Sequence[int]
) -> np.ndarray:
    """Per-head mean over samples and queries of the attention mass on the keys
    ``positions`` (P): pattern ``[n, h, T+1, T+1]``, queries int ``[Q]`` → ``[h]``."""
    p = np.asarray(pattern)
    q = np.asarray(queries, dtype=np.int64)
    keys = list(positions)
    mass = np.zeros(p.shape[1])
    for part in _chunks(p.shape[0]):
        mass += p[part][:, :, q][..., keys].astype(np.float64).sum(axis=(0, 2, 3))
    return mass / (p.shape[0] * q.size)


def fixed_key_agreement(chosen: np.ndarray, n_keys: int) -> float:
    """The best agreement a head ignoring content can reach: for each query, the share of
    samples whose chosen key is that query's most common one, averaged over queries.
    chosen int ``[n, Q]``."""
    n, Q = chosen.shape
    cell = np.arange(Q)[None, :] * n_keys + chosen
    counts = np.bincount(cell.ravel(), minlength=Q * n_keys).reshape(Q, n_keys)
    return float(counts.max(axis=1).mean() / n)


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
    attention mass on P.
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
    slots no head was matched to (more slots than heads in a block)."""

    T: int
    n_samples: int
    rows: tuple[HeadRow, ...]
    unmatched_slots: tuple[SlotOperation, ...]

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
            return {k: _clean(getattr(g, k)) for k in g.__dataclass_fields__}

        out = {
            "T": self.T,
            "n_samples": self.n_samples,
            "chance": self.chance,
            "chance_rule": CHANCE_RULE,
            "rules": rules(),
            "heads": [
                {
                    "block": r.block,
                    "layer": r.layer,
                    "head": r.head,
                    "slot": r.slot,
                    "agreement": _clean(r.agreement),
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
        json.dumps(out, allow_nan=False)  # fail here, not in the caller's writer
        return out

    def lines(self) -> list[str]:
        """A plain-text table: one line per head and query group."""
        out = [
            f"observed program: {len({r.block for r in self.rows})} block(s), T={self.T}, "
            f"{self.n_samples} samples",
            f"chance argmax agreement {self.chance:.3f} = {CHANCE_RULE}",
            "agree = share of (sample, query) whose argmax key is the engine's chosen key; "
            "fixed = best content-blind head; massP = attention mass on P",
            "slot = program head slot, 0-based (Program.describe calls it head slot+1)",
        ]
        header = (
            f"{'block':>5} {'head':>4} {'slot':>4} {'query':<5} {'mode':<28} {'top1':>5} "
            f"{'spec':>5} {'entr':>5} {'cont':>5} {'agree':>5} {'fixed':>5} {'massP':>5}  "
            "operation"
        )
        out.append(header)
        for r in self.rows:
            for g in (r.data, r.cls):
                slot = "-" if r.slot is None else str(r.slot)
                query = "CLS" if g.group == "cls" else "data"
                out.append(
                    f"{r.block:>5} {r.head:>4} {slot:>4} {query:<5} "
                    f"{g.mode:<28} {g.top1:5.2f} {g.specificity:5.2f} {g.entropy:5.2f} "
                    f"{g.content:5.2f} {_fmt(g.agreement)} {_fmt(g.fixed_key)} "
                    f"{_fmt(g.mass_on_positions)}  {g.operation}"
                )
        for s in self.unmatched_slots:
            out.append(
                f"unmatched program slot: layer {s.layer} slot {s.slot} {s.group}: {s.description}"
            )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def rules() -> dict[str, Any]:
    """The mode rules and their constants (for reports)."""
    return {
        "GLOBAL_MIN_ENTROPY": GLOBAL_MIN_ENTROPY,
        "POSITION_MIN_SPECIFICITY": POSITION_MIN_SPECIFICITY,
        "POSITION_MAX_CONTENT": POSITION_MAX_CONTENT,
        "RETRIEVAL_MIN_TOP1": RETRIEVAL_MIN_TOP1,
        "order": [
            f"entropy >= {GLOBAL_MIN_ENTROPY}: {GLOBAL}",
            f"specificity >= {POSITION_MIN_SPECIFICITY} or content <= "
            f"{POSITION_MAX_CONTENT}: {POSITIONAL}",
            f"top1 >= {RETRIEVAL_MIN_TOP1}: {RETRIEVAL}",
            f"otherwise: {DIFFUSE}",
        ],
    }


def _clean(v: Any) -> Any:
    if isinstance(v, float | np.floating):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _fmt(v: float | None) -> str:
    return f"{'-':>5}" if v is None or not math.isfinite(v) else f"{v:5.3f}"[:5]


# ---- matching --------------------------------------------------------------------------
def _check_patterns(patterns: Sequence[np.ndarray], n: int, T: int, blocks: int) -> list:
    if len(patterns) != blocks:
        raise HeadsError(
            f"patterns: expected one array per block of the program ({blocks}), got {len(patterns)}"
        )
    arrays = []
    for b, pattern in enumerate(patterns):
        name = f"patterns[{b}] (blocks.{b}.attn.hook_pattern)"
        p = np.asarray(pattern)
        if p.ndim != 4 or p.shape[0] != n or p.shape[2:] != (T + 1, T + 1):
            raise HeadsError(
                f"{name}: expected [n={n}, h, T+1={T + 1}, T+1={T + 1}], got {list(p.shape)}"
            )
        for part in _chunks(n):
            rows = p[part]
            if not np.isfinite(rows).all() or (rows < 0).any():
                raise HeadsError(f"{name}: expected finite non-negative attention weights")
            worst = float(np.abs(rows.sum(axis=-1, dtype=np.float64) - 1.0).max())
            if worst > ROW_SUM_TOLERANCE:
                raise HeadsError(
                    f"{name}: rows must sum to 1 (softmax), worst deviation {worst:.3g}; "
                    "pass hook_pattern, not hook_attn_scores"
                )
        arrays.append(p)
    return arrays


def _assign(score: np.ndarray) -> list[tuple[int, int]]:
    """One-to-one (row, column) pairs maximising the total score."""
    if score.size == 0:
        return []
    rows, cols = linear_sum_assignment(score, maximize=True)
    return list(zip(rows.tolist(), cols.tolist(), strict=True))


def observed_program(
    patterns: Sequence[np.ndarray],
    program: Program,
    x: np.ndarray,
    *,
    sample_index: np.ndarray | Sequence[int] | None = None,
) -> ObservedProgram:
    """The observed program beside InfoFlow's predicted ``program``.

    Args:
        patterns: ``patterns[b]`` = ``blocks.{b}.attn.hook_pattern`` ``[n, h_b, T+1, T+1]``
            for every block b of the program (rows summing to 1).
        program: the predicted program (``predict(task, arch).program``).
        x: task inputs ``[n_all, T, d]``; ``sample_index`` int ``[n]`` names the rows of x
            the patterns belong to (else x is ``[n, T, d]``, already aligned).

    For each block b the heads are matched one-to-one to the slots of layer b+1: first
    the slots with a retrieval, maximising the total argmax agreement with the engine's
    chosen keys (over the queries their retrievals cover); then the remaining heads to
    the remaining slots, maximising the fit (mass on P for a position-specific
    aggregation, normalised entropy for a global one, 0 for an idle slot). Heads beyond
    the slots get "no program operation".
    """
    x = np.asarray(x)
    if x.ndim != 3:
        raise HeadsError(f"x: expected [n, T, d], got shape {list(x.shape)}")
    if sample_index is not None:
        index = np.asarray(sample_index, dtype=np.int64).ravel()
        if index.size and (index.min() < -len(x) or index.max() >= len(x)):
            raise HeadsError(f"sample_index: rows must lie in 0..{len(x) - 1}")
        x = x[index]
    n, T, _ = x.shape
    arrays = _check_patterns(patterns, n, T, program.n_layers)
    chance = 1.0 / T
    queries = {"data": np.arange(T), "cls": np.array([T])}
    found: dict[tuple[int, int, str], Retrieval] = {
        (r.layer, r.slot, r.group): r for r in retrievals(program, x)
    }
    ops: dict[tuple[int, int, str], SlotOperation] = {
        (o.layer, o.slot, o.group): o for o in slot_operations(program)
    }
    rows: list[HeadRow] = []
    unmatched: list[SlotOperation] = []
    for b, pattern in enumerate(arrays):
        layer, h = b + 1, pattern.shape[1]
        n_slots = len(program.layers[b])
        stats = {g: head_statistics(pattern, queries[g]) for g in GROUPS}
        modes = {g: stats[g].modes for g in GROUPS}
        # per (group, slot): agreement [h] for retrievals, fit [h] for aggregations
        agree: dict[tuple[str, int], np.ndarray] = {}
        mass: dict[tuple[str, int], np.ndarray] = {}
        fit = np.zeros((h, n_slots))
        hits = np.zeros((h, n_slots))
        covered = np.zeros(n_slots)
        fit_weight = np.zeros(n_slots)
        for k in range(n_slots):
            for g in GROUPS:
                op = ops.get((layer, k, g))
                Q = queries[g].size
                if op is None:
                    continue
                if op.is_retrieval:
                    a = argmax_agreement(pattern, found[layer, k, g].chosen, queries[g], T)
                    agree[g, k] = a
                    hits[:, k] += a * Q
                    covered[k] += Q
                else:
                    if isinstance(op.op, AggregatePositions):
                        mass[g, k] = mass_on_positions(pattern, queries[g], op.positions)
                        f = mass[g, k]
                    else:
                        assert isinstance(op.op, AggregateAll)
                        f = stats[g].entropy
                    fit[:, k] += f * Q
                    fit_weight[k] += Q
        retrieval_slots = [k for k in range(n_slots) if covered[k] > 0]
        other_slots = [k for k in range(n_slots) if covered[k] == 0]
        agreement = hits / np.maximum(covered, 1)
        fit = fit / np.maximum(fit_weight, 1)
        match: dict[int, int] = {}  # head -> slot
        for j, c in _assign(agreement[:, retrieval_slots]):
            match[j] = retrieval_slots[c]
        free = [j for j in range(h) if j not in match]
        for j, c in _assign(fit[np.ix_(free, other_slots)]):
            match[free[j]] = other_slots[c]
        taken = set(match.values())
        for k in range(n_slots):
            if k not in taken:
                for g in GROUPS:
                    op = ops.get((layer, k, g))
                    if op is not None:
                        unmatched.append(op)
        for j in range(h):
            k = match.get(j)
            observed = {}
            for g in GROUPS:
                s = stats[g]
                base = dict(
                    group=g,
                    top1=float(s.top1[j]),
                    specificity=float(s.specificity[j]),
                    entropy=float(s.entropy[j]),
                    content=float(s.content[j]),
                    mode=modes[g][j],
                )
                op = None if k is None else ops.get((layer, k, g))
                if k is None:
                    observed[g] = GroupObservation(**base, operation=NO_OPERATION)
                elif op is None:
                    observed[g] = GroupObservation(**base, operation="idle")
                elif op.is_retrieval:
                    chosen = found[layer, k, g].chosen
                    observed[g] = GroupObservation(
                        **base,
                        operation=op.description,
                        kind=op.kind,
                        comparison=op.label,
                        agreement=float(agree[g, k][j]),
                        fixed_key=fixed_key_agreement(chosen, T + 1),
                    )
                else:
                    m = mass.get((g, k))
                    observed[g] = GroupObservation(
                        **base,
                        operation=op.description,
                        kind=op.kind,
                        mass_on_positions=None if m is None else float(m[j]),
                    )
            rows.append(
                HeadRow(
                    block=b,
                    head=j,
                    slot=k,
                    agreement=float(agreement[j, k]) if k is not None and covered[k] else None,
                    chance=chance,
                    data=observed["data"],
                    cls=observed["cls"],
                )
            )
    return ObservedProgram(T=T, n_samples=n, rows=tuple(rows), unmatched_slots=tuple(unmatched))
