"""Attention patterns read head by head: per-head statistics and the observed mode.

Patterns are ``blocks.{b}.attn.hook_pattern`` ``[n, h, T+1, T+1]`` (sample, head, query,
key), checked by :func:`check_patterns`. Per head and set of queries, four statistics
(:func:`head_statistics`) and an observed mode from fixed rules (:func:`classify`,
constants below); the argmax agreement with a chosen key (:func:`argmax_agreement`), the
mass on fixed keys (:func:`mass_on_positions`) and the best content-blind agreement
(:func:`fixed_key_agreement`) that the matching of :mod:`infoprobe.attention.program`
scores heads by. See docs/heads.md for the definitions and why each cut sits where it does.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import xlogy

from infoprobe.base.errors import UserError

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
STAT_CHUNK = 512  # samples per chunk in the statistics (bounds temporaries)
ROW_SUM_TOLERANCE = 1e-3  # softmax rows in float32 sum to 1 within ~1e-6


class HeadsError(UserError):
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


def chunks(n: int, size: int = STAT_CHUNK):
    """Slices of ``size`` samples covering 0..n-1 (bounds the temporaries)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _query_index(queries: Sequence[int] | np.ndarray | None, tokens: int) -> np.ndarray:
    q = np.arange(tokens) if queries is None else np.asarray(queries, dtype=np.int64).ravel()
    if q.size == 0 or q.min() < 0 or q.max() >= tokens:
        raise HeadsError(f"queries must be non-empty rows in 0..{tokens - 1}, got {q.tolist()}")
    return q


def check_patterns(patterns: Sequence[np.ndarray], n: int, T: int, blocks: int) -> list:
    """The patterns of every block as arrays, refused (:class:`HeadsError`) unless there
    is one per block, each ``[n, h, T+1, T+1]`` with finite rows that sum to 1."""
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
        for part in chunks(n):
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
    for part in chunks(n):
        rows = p[part][:, :, q].astype(np.float64)  # [c, h, Q, T+1]
        top1 += rows.max(axis=3).sum(axis=(0, 2))
        entropy -= xlogy(rows, rows).sum(axis=(0, 2, 3))
        mean_row += rows.sum(axis=0)
        counts += np.bincount((cell + rows.argmax(axis=3)).ravel(), minlength=counts.size)
    mean_row /= n
    content = np.zeros(h)
    for part in chunks(n):
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
    for part in chunks(p.shape[0]):
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
    for part in chunks(p.shape[0]):
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
