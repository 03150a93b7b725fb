"""Threshold-free agreement: tie-aware AUROC (Mann-Whitney U), vectorised over groups."""

from __future__ import annotations

import numpy as np

from infoprobe.base.errors import CompareInputError


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, ties given their average rank.

    values: float [..., m] (compared in their own precision). Returns float64 [..., m].
    Vectorised over the leading axes: one
    argsort per row, then the first and last index of each run of equal values found with
    running maxima / minima.
    """
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.floating):
        values = values.astype(np.float64)
    m = values.shape[-1]
    if values.size == 0:
        return np.zeros(values.shape)
    order = np.argsort(values, axis=-1)  # ties are averaged below: stability is not needed
    ordered = np.take_along_axis(values, order, axis=-1)
    index = np.broadcast_to(np.arange(m), ordered.shape)
    starts = np.ones(ordered.shape, dtype=bool)  # first element of a run of ties
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends = np.ones(ordered.shape, dtype=bool)  # last element of a run of ties
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, index, m - 1), -1), axis=-1), -1)
    ranks = np.empty(ordered.shape)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=-1)
    return ranks


def auroc(scores: np.ndarray, labels: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Tie-aware AUROC of ``scores`` against boolean ``labels`` along the last axis.

    scores: float [..., m], higher = more likely positive; labels: bool [..., m]; valid: bool
    [..., m] or None, items to leave out (False) of their group.
    Returns float64 [...]: the Mann-Whitney U statistic / (n_pos · n_neg), i.e.
    P(score_pos > score_neg) + ½ P(tie); NaN where a group lacks positives or negatives.
    Matches ``sklearn.metrics.roc_auc_score(labels, scores)`` group by group.
    """
    scores = np.asarray(scores)
    if not np.issubdtype(scores.dtype, np.floating):
        scores = scores.astype(np.float64)
    labels = np.asarray(labels, dtype=bool)
    valid = np.ones(labels.shape, dtype=bool) if valid is None else np.asarray(valid, bool)
    if scores.shape != labels.shape or valid.shape != labels.shape:
        raise CompareInputError(
            f"auroc: scores {scores.shape}, labels {labels.shape} and valid {valid.shape} "
            "must have the same shape"
        )
    if not np.isfinite(scores[valid]).all():
        raise CompareInputError("auroc: scores contain NaN or Inf")
    # Left-out items go below every kept item: each positive's rank grows by n_left_out.
    ranks = average_ranks(np.where(valid, scores, -np.inf))
    positive = labels & valid
    n_pos = positive.sum(axis=-1).astype(np.float64)
    n_neg = (valid & ~labels).sum(axis=-1).astype(np.float64)
    n_left_out = labels.shape[-1] - valid.sum(axis=-1)
    rank_sum = np.where(positive, ranks, 0.0).sum(axis=-1) - n_pos * n_left_out
    u_stat = rank_sum - n_pos * (n_pos + 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), u_stat / (n_pos * n_neg), np.nan)
