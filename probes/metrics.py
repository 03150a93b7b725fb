"""Probe metrics: pooled R², NMSE, per-sample normalised error, identification accuracy.

Definitions (the same everywhere in infoprobe):

- **R²** of a probe for x(s) is pooled over the d coordinates of x(s):
  R² = 1 − Σ_i Σ_j (x̂_ij − x_ij)² / Σ_i Σ_j (x_ij − x̄_j)², i over test samples, j over
  coordinates, x̄ the test mean. This equals sklearn's
  ``r2_score(..., multioutput="variance_weighted")``.
- **NMSE** = MSE / Var(target) = SSE / SST = 1 − R² (the paper's metric).
- **Per-sample normalised error** of sample i: e_i = ‖x̂_i − x_i‖² / (SST / n_test), so its
  mean over the test samples is the NMSE; e_i ≈ 1 means "no better than the mean".
- **Identification accuracy**: the fraction of test samples whose prediction x̂ is closer
  (Euclidean) to the true target than to any other of the T inputs x(0..T-1) of the same
  sample; chance is 1/T.
"""

from __future__ import annotations

import numpy as np
import torch

Array = np.ndarray | torch.Tensor

IDENTIFICATION_CHUNK_ELEMENTS = 1 << 24
"""Upper bound on the elements of one distance tensor in :func:`identification_hits`."""


def pooled_r2(y_true: Array, y_pred: Array) -> torch.Tensor:
    """R² pooled over samples (axis 0) and the last axis (coordinates).

    Args:
        y_true, y_pred: ``[n, ..., d]``.

    Returns:
        ``[...]`` float64; NaN where the target is constant.
    """
    yt = torch.as_tensor(y_true).double()
    yp = torch.as_tensor(y_pred).double()
    sse = ((yt - yp) ** 2).sum(dim=(0, -1))
    sst = ((yt - yt.mean(0)) ** 2).sum(dim=(0, -1))
    return 1.0 - sse / torch.where(sst > 0, sst, torch.nan)


def r2_from_sums(sse: Array, sst: Array) -> torch.Tensor:
    """R² = 1 − SSE/SST elementwise (NaN where SST is 0)."""
    sse_t = torch.as_tensor(sse).double()
    sst_t = torch.as_tensor(sst).double()
    return 1.0 - sse_t / torch.where(sst_t > 0, sst_t, torch.nan)


def nmse_from_r2(r2: Array) -> torch.Tensor:
    """NMSE = 1 − R² (same pooling as the R²)."""
    return 1.0 - torch.as_tensor(r2).double()


def per_sample_error(y_true: Array, y_pred: Array, sst_per_sample: Array) -> torch.Tensor:
    """Normalised squared error of each sample ``‖x̂_i − x_i‖² / (SST / n)``.

    Args:
        y_true, y_pred: ``[n, ..., d]``.
        sst_per_sample: SST / n of the test split, broadcastable to ``[...]``.

    Returns:
        ``[n, ...]`` float32.
    """
    yt = torch.as_tensor(y_true).float()
    yp = torch.as_tensor(y_pred).float()
    denom = torch.as_tensor(sst_per_sample).float()
    return ((yt - yp) ** 2).sum(-1) / torch.where(denom > 0, denom, torch.nan)


def identification_hits(pred: Array, inputs: Array, true_index: Array) -> torch.Tensor:
    """Whether each prediction is nearest to its true input among the sample's T inputs.

    Args:
        pred: predictions ``[n, C, S, d]`` (C cells, S targets).
        inputs: the sample's inputs ``[n, T, d]``.
        true_index: index in 0..T-1 of the true input, broadcastable to ``[n, C, S]``
            (e.g. ``arange(S)`` for position targets, partner indices for role targets).

    Returns:
        bool ``[n, C, S]``. Ties count as misses only if another input is strictly closer.
    """
    p = torch.as_tensor(pred).float()
    x = torch.as_tensor(inputs).float()
    n, c, s, _ = p.shape
    idx = torch.as_tensor(np.asarray(true_index)).long().expand(n, c, s)
    x_sq = (x**2).sum(-1)  # [n, T]
    per_sample = max(1, IDENTIFICATION_CHUNK_ELEMENTS // max(1, c * s * x.shape[1]))
    hits = []
    for start in range(0, n, per_sample):
        sl = slice(start, start + per_sample)
        # ‖p − x_t‖² up to the ‖p‖² term, which is the same for every candidate t.
        dist = x_sq[sl, None, None, :] - 2 * torch.einsum("ncsd,ntd->ncst", p[sl], x[sl])
        true_dist = dist.gather(-1, idx[sl, :, :, None]).squeeze(-1)
        hits.append((dist < true_dist[..., None]).sum(-1) == 0)
    return torch.cat(hits)
