"""Flow sets: membership from flow scores with a threshold fixed before any comparison.

s ∈ I_flow(i, t, l) iff g(i, l, t, s) ≥ r / T with r = :data:`DEFAULT_FLOW_FRACTION` = 0.25:
a nudge of x(s) moves the state at least a quarter as much as it would if the state were an
equal linear mix of all T positions (each of which scores 1/T). It is the fraction of the
uniform share that attention rollout's sets use, so an equal mix of every position plus an
own share up to 3/4 still counts every position.

The aggregate flow score of (t, l, s) is the **membership share**: the fraction of samples
in which s is in the per-sample flow set (:func:`membership_share`), bounded in [0, 1] and
invariant to the scale of g. The mean of g over samples is not used as a score: g is a ratio
whose denominator (how far the state moves across samples) can be tiny next to its numerator
on a near-tie query of a max-retrieval head, so a handful of samples with g ~ 1e5 decide the
mean (docs/influence.md, *The aggregate score*). The aggregate flow set holds s when the share
is at least :data:`AGGREGATE_SHARE_LEVEL` (s is carried in at least half of the samples).
"""

from __future__ import annotations

import math

import numpy as np

from infoprobe.influence.errors import InfluenceError

DEFAULT_FLOW_FRACTION = 0.25
"""r: s is in the flow set when g ≥ r / T (a quarter of the uniform share 1/T)."""


AGGREGATE_SHARE_LEVEL = 0.5
"""s is in the aggregate flow set of (t, l) when it is in the per-sample flow set of at least
this share of the samples."""


def flow_threshold(T: int, fraction: float = DEFAULT_FLOW_FRACTION) -> float:
    """The membership threshold r / T on the flow score g."""
    if int(T) < 1:
        raise InfluenceError(f"flow_threshold: T must be >= 1, got {T}")
    if not (math.isfinite(fraction) and fraction > 0):
        raise InfluenceError(f"flow_threshold: fraction must be finite and > 0, got {fraction}")
    return float(fraction) / int(T)


def flow_sets(scores: np.ndarray, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
    """Flow sets from per-sample scores.

    Args:
        scores: g, float [L+1, n, T+1, T] (layer, sample, token, position).
        fraction: r, the fraction of the uniform share 1/T a position must reach.

    Returns:
        bool [L+1, n, T+1, T+1]: the scores' shape with the CLS column (position T)
        appended, always False (CLS has no input vector to nudge).
    """
    scores = np.asarray(scores)
    if scores.ndim != 4 or scores.shape[-2] != scores.shape[-1] + 1:
        raise InfluenceError(
            "flow_sets: scores: expected per-sample scores [L+1, n, T+1, T], got shape "
            f"{list(scores.shape)}"
        )
    member = scores >= flow_threshold(scores.shape[-1], fraction)
    pad = np.zeros((*member.shape[:-1], 1), dtype=bool)
    return np.concatenate([member, pad], axis=-1)


def membership_share(scores: np.ndarray, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
    """The aggregate flow score: the share of samples in which s ∈ I_flow(i, t, l).

    Args:
        scores: g, float [L+1, n, T+1, T] (layer, sample, token, position).
        fraction: r, the per-sample membership g ≥ r / T (:func:`flow_threshold`).

    Returns:
        float64 [L+1, T+1, T] in [0, 1] (layer, token, position); NaN when n = 0.
    """
    scores = np.asarray(scores)
    if scores.ndim != 4 or scores.shape[-2] != scores.shape[-1] + 1:
        raise InfluenceError(
            "membership_share: scores: expected per-sample scores [L+1, n, T+1, T], got shape "
            f"{list(scores.shape)}"
        )
    layers, n, tokens, positions = scores.shape
    if n == 0:
        return np.full((layers, tokens, positions), np.nan)
    member = scores >= flow_threshold(positions, fraction)
    return member.sum(axis=1, dtype=np.int64) / n
