"""Bootstrap intervals over samples for the comparison's AUROCs and rates.

The cells of one sample (its tokens and positions) are dependent, so the bootstrap draws
whole *samples* with replacement, never cells: a resample is a vector of multiplicities
c [n] (how often each sample was drawn), and every statistic is recomputed with each
sample's cells weighted by its multiplicity. The interval is the percentile interval of
the resampled statistics. Level, number of resamples and seed are fixed here, before any
result is seen (:data:`DEFAULT_INTERVAL`).

AUROC over weighted cells (:func:`bootstrap_auroc`): the cells are sorted once; per
resample the Mann-Whitney U is Σ_pos w_p · (W_neg below p + ½ W_neg tied with p), read
off one cumulative sum of the negatives' weights (integers, so exact), O(cells) per
resample, resamples chunked to bound memory. Rates (recall, violation rate) are ratios
of per-sample counts, sufficient statistics: c · num / c · den (:func:`bootstrap_ratio`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from einops import rearrange

from infoprobe.base.errors import CompareInputError
from infoprobe.compare.auroc import auroc

CHUNK_ELEMENTS = 1 << 23
"""Resamples × cells held at once (int32: 32 MiB per array)."""


@dataclass(frozen=True)
class IntervalSettings:
    """How the intervals are made: ``method`` "bootstrap (samples, percentile)", ``level``
    (two-sided coverage), ``n_resamples`` and the generator's ``seed``."""

    level: float = 0.95
    n_resamples: int = 1000
    seed: int = 0
    method: str = "bootstrap over samples, percentile"

    def __post_init__(self) -> None:
        if not 0.0 < self.level < 1.0:
            raise CompareInputError(f"interval level: expected in (0, 1), got {self.level}")
        if int(self.n_resamples) < 1:
            raise CompareInputError(f"n_resamples: expected >= 1, got {self.n_resamples}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_INTERVAL = IntervalSettings()
"""0.95, 1000 resamples, seed 0: fixed before looking at any result."""


def resample_index(n: int, settings: IntervalSettings = DEFAULT_INTERVAL) -> np.ndarray:
    """The resampled sample indices: int [n_resamples, n], drawn with replacement from a
    generator seeded with ``settings.seed`` (the same n gives the same resamples)."""
    rng = np.random.default_rng(settings.seed)
    return rng.integers(0, n, size=(settings.n_resamples, n))


def multiplicities(index: np.ndarray, n: int) -> np.ndarray:
    """How often each sample is drawn: index int [B, n'] → int32 [B, n]."""
    index = np.asarray(index, dtype=np.int64)
    b = index.shape[0]
    flat = (index + n * np.arange(b)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.int32)


def percentile_interval(values: np.ndarray, level: float) -> np.ndarray:
    """Percentile interval of resampled values along axis 0: [B, ...] → [..., 2] (lo, hi);
    resamples where the statistic is undefined (NaN) are left out; NaN if all are."""
    values = np.asarray(values, dtype=np.float64)
    tail = 50.0 * (1.0 - level)
    out = np.full((*values.shape[1:], 2), np.nan)
    ok = np.isfinite(values).any(axis=0)
    if ok.any():
        out[ok] = np.nanpercentile(values[:, ok], [tail, 100.0 - tail], axis=0).T
    return out


def _weighted_auroc(sample: np.ndarray, score: np.ndarray, label: np.ndarray, counts) -> np.ndarray:
    """AUROC of one group of cells, each weighted by its sample's multiplicity.

    sample int [m] (each cell's sample), score float [m], label bool [m]; counts int32
    [B, n]. Returns float64 [B] (NaN where the resample has no positive or no negative).
    """
    neg_order = np.argsort(score[~label], kind="stable")
    neg_scores, neg_sample = score[~label][neg_order], sample[~label][neg_order]
    pos_order = np.argsort(sample[label], kind="stable")  # positives grouped by sample
    pos_scores, pos_sample = score[label][pos_order], sample[label][pos_order]
    below = np.searchsorted(neg_scores, pos_scores, side="left")  # negatives strictly below
    upto = np.searchsorted(neg_scores, pos_scores, side="right")  # ... or tied
    tied = not np.array_equal(below, upto)
    n = counts.shape[1]
    w_pos = counts @ np.bincount(pos_sample, minlength=n).astype(np.float64)
    w_neg = counts @ np.bincount(neg_sample, minlength=n).astype(np.float64)
    owners, starts = np.unique(pos_sample, return_index=True)
    if pos_scores.size == 0:
        return np.full(counts.shape[0], np.nan)
    # a leading weight-0 negative (sample n): cum[:, k] is the weight of the first k negatives
    neg_sample = np.concatenate([[n], neg_sample])
    # cumulative weights reach at most 2·n·m: int32 unless that could overflow
    dtype = np.int32 if 2 * n * max(score.size, 1) < 2**31 else np.int64
    chunk = max(1, CHUNK_ELEMENTS // max(neg_scores.size + pos_scores.size, 1))
    u_stat = np.zeros(counts.shape[0])
    for start in range(0, counts.shape[0], chunk):
        c = counts[start : start + chunk]
        padded = np.zeros((c.shape[0], n + 1), dtype=dtype)
        padded[:, :n] = c
        cum = np.cumsum(np.take(padded, neg_sample, axis=1), axis=1, dtype=dtype)
        x = np.take(cum, below, axis=1)  # (tied: + upto, twice the tie-aware count)
        if tied:
            x += np.take(cum, upto, axis=1)
        per_sample = np.add.reduceat(x, starts, axis=1, dtype=np.int64)
        u_stat[start : start + chunk] = (per_sample * c[:, owners]).sum(axis=1)
    u_stat /= 2.0 if tied else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((w_pos > 0) & (w_neg > 0), u_stat / (w_pos * w_neg), np.nan)


def bootstrap_auroc(
    scores: np.ndarray, labels: np.ndarray, valid: np.ndarray | None, counts: np.ndarray
) -> np.ndarray:
    """Resampled AUROCs, resampling the sample axis.

    scores float / labels bool / valid bool (or None) [G..., n, c]: groups G..., the
    sample axis n, then a group's cells within one sample. counts: int [B, n] sample
    multiplicities (:func:`multiplicities`). Returns float64 [B, G...]; with every count 1
    it is :func:`~infoprobe.compare.auroc.auroc` over each group's n·c cells.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    valid = np.ones(labels.shape, bool) if valid is None else np.asarray(valid, bool)
    groups, (n, c) = scores.shape[:-2], scores.shape[-2:]
    if counts.shape[1] != n:
        raise CompareInputError(f"bootstrap: {counts.shape[1]} multiplicities for {n} samples")
    sample = np.broadcast_to(np.arange(n)[:, None], (n, c))
    out = np.empty((counts.shape[0], *groups))
    for g in np.ndindex(*groups):
        keep = valid[g]
        out[(slice(None), *g)] = _weighted_auroc(
            sample[keep], scores[g][keep], labels[g][keep], counts
        )
    return out


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Resampled pooled ratios Σ_i c_i num_i / Σ_i c_i den_i: num, den [n, ...] per-sample
    counts, counts int [B, n] → float64 [B, ...] (NaN where the denominator is 0)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    flat = counts.astype(np.float64)
    top = np.tensordot(flat, num, axes=(1, 0))
    bottom = np.tensordot(flat, den, axes=(1, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom > 0, top / bottom, np.nan)


def sample_scope_intervals(
    pred: np.ndarray,
    signed: np.ndarray | None,
    valid: np.ndarray,
    samples: Any,
    counts: np.ndarray,
    level: float,
) -> dict[str, np.ndarray | None]:
    """Intervals of a per-sample scope (:class:`~infoprobe.compare.scopes.SampleScope`).

    pred / signed / valid [L+1, n, T+1, T]: predicted sets, the score signed so that
    higher = more observed (or None), the scope's cells; samples: the per-sample counts
    (:class:`~infoprobe.compare.agreement.SetAgreement` [L+1, n, T+1], or None); counts
    [B, n]. Returns ``<name>_interval`` arrays [..., 2] (lo, hi), None where the part is.
    """
    out: dict[str, np.ndarray | None] = dict.fromkeys(
        ("auroc_per_layer", "auroc_per_token", "recall", "violation_rate")
    )
    if signed is not None:
        layers, n, tokens, positions = pred.shape
        flat = (layers, n, tokens * positions)
        layer = bootstrap_auroc(
            signed.reshape(flat), pred.reshape(flat), valid.reshape(flat), counts
        )
        out["auroc_per_layer"] = percentile_interval(layer, level)
        by_token = [a.transpose(0, 2, 1, 3) for a in (signed, pred, valid)]  # l t n s
        out["auroc_per_token"] = percentile_interval(bootstrap_auroc(*by_token, counts), level)
    if samples is not None:
        per_sample = [np.asarray(c).sum(axis=-1).T for c in samples._counts()]  # [n, L+1]
        agree, violations, omissions, absent = per_sample
        recall = bootstrap_ratio(agree, agree + omissions, counts)
        rate = bootstrap_ratio(violations, violations + absent, counts)
        out["recall"] = percentile_interval(recall, level)
        out["violation_rate"] = percentile_interval(rate, level)
    return {f"{k}_interval": v for k, v in out.items()}


def aggregate_source(
    per_sample: np.ndarray | None, sample_score: np.ndarray | None, score: np.ndarray | None
) -> np.ndarray | None:
    """The per-sample array [L+1, n, T+1, T] whose mean over samples is the aggregate
    ``score`` [L+1, T+1, T] (the share of samples in the per-sample sets, or the mean
    per-sample score), so a resample can recompute it; None when it is neither (e.g. a
    probe's pooled R²): the aggregate's interval is then not available."""
    if score is None:
        return None
    for found in (per_sample, sample_score):
        if found is None or found.shape[0] != score.shape[0]:
            continue
        mean = np.asarray(found, dtype=np.float64).mean(axis=1)
        if mean.shape == score.shape and np.allclose(mean, score, rtol=1e-5, atol=1e-8):
            return found
    return None


def aggregate_scope_intervals(
    pred: np.ndarray,
    source: np.ndarray | None,
    mask: np.ndarray,
    counts: np.ndarray,
    level: float,
    tau: float | None = None,
) -> dict[str, np.ndarray | None]:
    """Intervals of an aggregate scope: per resample the membership (always / never over
    the drawn samples) and the aggregate score (mean of the drawn samples' scores) are
    recomputed, then the AUROC over (token, position) cells and, with ``tau`` (the
    aggregate set is score >= tau), the per-layer recall and violation rate of that set.
    pred bool [L+1, n, T+1, T]; source: what the aggregate score is the mean of
    (:func:`aggregate_source`), None when it cannot be recomputed (the intervals are then
    None); mask [T+1, T]. Returns ``auroc_per_layer_interval`` [L+1, 2],
    ``auroc_per_token_interval`` [L+1, T+1, 2], ``recall_interval`` and
    ``violation_rate_interval`` [L+1, 2] (None without ``tau``)."""
    out = {
        "auroc_per_layer_interval": None,
        "auroc_per_token_interval": None,
        "recall_interval": None,
        "violation_rate_interval": None,
    }
    if source is None:
        return out
    layers, _, tokens, positions = pred.shape
    cells = (layers, tokens, positions)
    as_rows = "l n t s -> n (l t s)"
    pred_rows = rearrange(pred.astype(np.float64), as_rows)
    score_rows = rearrange(np.asarray(source, dtype=np.float64), as_rows)
    chunk = max(1, CHUNK_ELEMENTS // (8 * pred_rows.shape[1]))
    per_layer, per_token, recall, violation = [], [], [], []
    for start in range(0, counts.shape[0], chunk):
        c = counts[start : start + chunk].astype(np.float64)
        drawn = c.sum(axis=1)[:, None]
        hits = (c @ pred_rows).reshape(-1, *cells)
        mean = (c @ score_rows / drawn).reshape(-1, *cells)
        always = hits == drawn[:, :, None, None]
        never = (hits == 0) & mask
        definite = (always & mask) | never
        per_token.append(auroc(mean, always, definite))
        flat = (-1, layers, tokens * positions)
        per_layer.append(auroc(mean.reshape(flat), always.reshape(flat), definite.reshape(flat)))
        if tau is not None:
            observed = mean >= tau
            predicted = always & mask
            recall.append(_share(predicted & observed, predicted))
            violation.append(_share(never & observed, never))
    out["auroc_per_layer_interval"] = percentile_interval(np.concatenate(per_layer), level)
    out["auroc_per_token_interval"] = percentile_interval(np.concatenate(per_token), level)
    if tau is not None:
        out["recall_interval"] = percentile_interval(np.concatenate(recall), level)
        out["violation_rate_interval"] = percentile_interval(np.concatenate(violation), level)
    return out


def _share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """|part| / |whole| per resample and layer over (token, position) cells: [B, L+1]
    (NaN where ``whole`` is empty)."""
    num, den = part.sum(axis=(2, 3)), whole.sum(axis=(2, 3))
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)
