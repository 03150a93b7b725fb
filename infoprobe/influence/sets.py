"""Flow sets: membership from flow scores with a threshold fixed before any comparison.

s ∈ I_flow(i, t, l) iff g(i, l, t, s) ≥ r / T with r = :data:`DEFAULT_FLOW_FRACTION` = 0.25:
a nudge of x(s) moves the state at least a quarter as much as it would if the state were an
equal linear mix of all T positions (each of which scores 1/T). It is the fraction of the
uniform share that attention rollout's sets use, so an equal mix of every position plus an
own share up to 3/4 still counts every position.
"""

from __future__ import annotations

import math

import numpy as np

from infoprobe.influence.errors import InfluenceError

DEFAULT_FLOW_FRACTION = 0.25
"""r: s is in the flow set when g ≥ r / T (a quarter of the uniform share 1/T)."""


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
