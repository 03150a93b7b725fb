"""A linear-Gaussian reference for judging a trained probe's fit on validation data.

Ridge regression from each cell's standardised state to every queried position's
standardised target, fitted on the training rows: a trained probe whose family contains
linear read-outs should do at least as well where this reference clearly reads x(s)
(:mod:`infoprobe.probes.refits`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "LINEAR_LEVEL",
    "LINEAR_MARGIN",
    "REGRESSION_STATISTICS",
    "RIDGE",
    "judge_regression",
    "r2_of",
    "regression_statistics",
    "ridge_reference",
]

RIDGE = 1e-3
"""Ridge per training sample (the states are standardised: the Gram's diagonal is about n)."""
REGRESSION_STATISTICS = ("r2", "linear_r2")
"""The names of :func:`regression_statistics`' statistics."""
LINEAR_LEVEL = 0.5
"""Validation R² of the reference from which on a state is known to hold x(s)."""
LINEAR_MARGIN = 0.1
"""R² an MLP or query probe may fall below the reference there before its fit failed."""


def ridge_reference(
    x_train: torch.Tensor, z_train: torch.Tensor, x_val: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(predictions ``[c, b, S, k]`` for ``x_val [c, b, E]``, residual variance per cell and
    position on the training rows ``[c, S]``), float64, of ridge fits from ``x_train [c,
    n, E]`` to ``z_train [n, S, k]`` (standardised: no intercept)."""
    c, n, E = x_train.shape
    S, k = z_train.shape[1:]
    X, Z = x_train.double(), z_train.double().reshape(n, S * k)
    gram = X.transpose(1, 2) @ X + RIDGE * n * torch.eye(E, dtype=torch.float64, device=X.device)
    W = torch.linalg.solve(gram, X.transpose(1, 2) @ Z)  # [c, E, S k]
    var = (Z - X @ W).view(c, n, S, k).square().mean(dim=(1, 3))
    return (x_val.double() @ W).view(c, -1, S, k), var


def r2_of(pred: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """R² per cell and position ``[c, S]`` of predictions ``[c, n, S, k]`` of ``z [n, S,
    k]``, pooled over the k coordinates, against z's own mean."""
    z = z.double()
    sst = (z - z.mean(0)).square().sum(dim=(0, 2))
    return 1.0 - (pred - z).square().sum(dim=(1, 3)) / sst


def regression_statistics(
    module: torch.nn.Module,
    x_train: torch.Tensor,
    z_train: torch.Tensor,
    x_val: torch.Tensor,
    z_val: torch.Tensor,
) -> np.ndarray:
    """``[c, 2, S]``: validation R² of a fitted MLP or query probe ``module`` (its output
    ``[c, S, k, b]``) and of :func:`ridge_reference`, per cell and position."""
    parts = [module(x_val[:, s : s + 1024]) for s in range(0, x_val.shape[1], 1024)]
    pred = torch.cat(parts, dim=3).permute(0, 3, 1, 2).double()  # [c, n, S, k]
    linear, _ = ridge_reference(x_train, z_train, x_val)
    return torch.stack([r2_of(pred, z_val), r2_of(linear, z_val)], dim=1).cpu().numpy()


def judge_regression(stats: np.ndarray) -> np.ndarray:
    """Failure bits ``[C, S]`` (``below_linear``, :data:`~infoprobe.probes.refits.FAILURES`)
    of validation statistics ``[C, 2, S]``: where the reference reads x(s) with R² at least
    :data:`LINEAR_LEVEL`, a probe more than :data:`LINEAR_MARGIN` below it failed."""
    ours, linear = stats[:, 0], stats[:, 1]
    return ((linear >= LINEAR_LEVEL) & (ours < linear - LINEAR_MARGIN)).astype(np.uint8) << 2
