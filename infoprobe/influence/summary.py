"""Per-layer summary of flow scores: how much of each state its own input explains vs others."""

from __future__ import annotations

import numpy as np

from infoprobe.influence.sets import DEFAULT_FLOW_FRACTION, flow_threshold


def layer_summary(
    aggregate: np.ndarray, scores: np.ndarray | None = None, fraction: float = DEFAULT_FLOW_FRACTION
) -> list[dict[str, float]]:
    """One row per layer from the aggregate g [L+1, T+1, T] (mean over samples).

    Row keys: ``layer``; ``own`` (mean g(t, t) over data tokens t); ``others`` (mean g(t, s)
    over data tokens t and positions s ≠ t); ``cls`` (mean g(CLS, s) over s); and, given the
    per-sample ``scores`` [L+1, n, T+1, T], ``set_size`` (mean flow-set size of a data
    token, own position included), ``cls_set_size``, and the medians over samples of the
    same cells, ``own_median``, ``others_median`` and ``cls_median`` (a few near-tie
    samples, whose state moves a lot under a small nudge, can carry a mean alone).
    """
    aggregate = np.asarray(aggregate, dtype=np.float64)
    T = aggregate.shape[-1]
    own = np.eye(T, dtype=bool)
    rows = []
    for layer, g in enumerate(aggregate):
        row = {
            "layer": layer,
            "own": float(g[:T][own].mean()),
            "others": float(g[:T][~own].mean()) if T > 1 else float("nan"),
            "cls": float(g[T].mean()),
        }
        if scores is not None:
            member = scores[layer] >= flow_threshold(T, fraction)  # [n, T+1, T]
            row["set_size"] = float(member[:, :T].sum(axis=-1).mean())
            row["cls_set_size"] = float(member[:, T].sum(axis=-1).mean())
            per = np.asarray(scores[layer], dtype=np.float64)  # [n, T+1, T]
            row["own_median"] = float(np.median(per[:, :T][:, own]))
            row["others_median"] = float(np.median(per[:, :T][:, ~own])) if T > 1 else float("nan")
            row["cls_median"] = float(np.median(per[:, T]))
        rows.append(row)
    return rows
