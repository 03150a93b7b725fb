"""One multi-output ridge fit on plain arrays (X [n, E], Y [n, k]): the streaming engine
of :mod:`infoprobe.probes.ridge` with one cell, λ chosen on a validation split or by
leave-one-out; what :class:`~infoprobe.probes.estimators.RidgeProbe` calls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infoprobe.probes.ridge import DEFAULT_ALPHAS, Array, RidgeAccumulator, check_alphas
from infoprobe.probes.split import VAL
from infoprobe.probes.validate import check_finite, check_ndim, check_same_length


@dataclass
class RidgeFit:
    """One multi-output ridge fit on plain arrays (see :func:`fit_ridge`).

    Attributes:
        coef: ``[k, E]`` float64 (sklearn orientation).
        intercept: ``[k]`` float64.
        alpha: chosen λ.
        alphas: the grid searched.
        scores: validation (or leave-one-out) R² pooled over the k outputs, per λ ``[A]``.
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    alphas: np.ndarray
    scores: np.ndarray

    def predict(self, X: Array) -> np.ndarray:
        """Predictions ``[n, k]`` float64 for ``X [n, E]``."""
        x = np.asarray(X, dtype=np.float64)
        return x @ self.coef.T + self.intercept


def fit_ridge(
    X: Array,
    Y: Array,
    alphas: float | tuple[float, ...] | np.ndarray = DEFAULT_ALPHAS,
    X_val: Array | None = None,
    Y_val: Array | None = None,
) -> RidgeFit:
    """Ridge regression of ``Y [n, k]`` (or ``[n]``) on ``X [n, E]`` with λ chosen from a grid.

    Uses the same engine as the all-probes path (one cell, one group of k columns). λ is
    chosen by the pooled SSE on ``(X_val, Y_val)`` when given, else by exact leave-one-out
    on the training data (intercept included, as ``RidgeCV``'s efficient LOO). Computation
    is float64 if ``X`` is float64, else float32 products with float64 accumulators.

    Returns:
        :class:`RidgeFit` with ``coef [k, E]``, ``intercept [k]``, ``alpha``, ``predict``.
    """
    x = torch.as_tensor(np.asarray(X))
    y = torch.as_tensor(np.asarray(Y))
    y = y[:, None] if y.ndim == 1 else y
    check_ndim(x, 2, "X", "n, E")
    check_ndim(y, 2, "Y", "n, k")
    check_same_length(x, y, "X", "Y")
    check_finite(x, "X")
    check_finite(y, "Y")
    grid = check_alphas(alphas)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    acc = RidgeAccumulator(1, x.shape[1], y.shape[1], compute_dtype=dtype)
    acc.update(x[:, None, :], y, np.zeros(x.shape[0], dtype=np.int64))
    if X_val is not None and Y_val is not None:
        xv = torch.as_tensor(np.asarray(X_val))
        yv = torch.as_tensor(np.asarray(Y_val))
        yv = yv[:, None] if yv.ndim == 1 else yv
        check_same_length(xv, yv, "X_val", "Y_val")
        check_finite(xv, "X_val")
        check_finite(yv, "Y_val")
        acc.update(xv[:, None, :], yv, np.ones(xv.shape[0], dtype=np.int64))
        sol = acc.solve(grid, group_size=y.shape[1], evaluate=(VAL,))
        scores = (1.0 - sol.sse_path[VAL] / sol.sst[VAL]).reshape(-1)
    else:
        sol = acc.solve(grid[:1], group_size=y.shape[1], val=None, evaluate=())
        scores = torch.full((grid.numel(),), torch.nan, dtype=torch.float64)
        if grid.numel() > 1:
            scores = _leave_one_out_r2(x.double(), y.double(), grid)
            sol = acc.solve(
                grid[int(scores.argmax())], group_size=y.shape[1], val=None, evaluate=()
            )
    return RidgeFit(
        coef=sol.coef[0].T.numpy().copy(),
        intercept=sol.intercept[0].numpy().copy(),
        alpha=float(sol.alpha.reshape(-1)[0]),
        alphas=grid.numpy(),
        scores=scores.numpy(),
    )


def _leave_one_out_r2(x: torch.Tensor, y: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Exact leave-one-out R² (pooled over outputs) for every λ ``[A]``.

    The hat matrix of ridge with an unpenalised intercept is 11ᵀ/n + X_c(X_cᵀX_c+λ)⁻¹X_cᵀ;
    the LOO residual is r_i / (1 − h_ii).
    """
    n = x.shape[0]
    xc = x - x.mean(0)
    yc = y - y.mean(0)
    evals, evecs = torch.linalg.eigh(xc.T @ xc)
    evals = evals.clamp_min(0.0)
    z = xc @ evecs  # [n, E]
    zy = z.T @ yc  # [E, k]
    sst = (yc**2).sum()
    out = []
    for lam in grid:
        inv = 1.0 / (evals + lam)
        resid = yc - z @ (zy * inv[:, None])
        leverage = 1.0 / n + (z**2) @ inv
        loo = resid / (1.0 - leverage)[:, None].clamp_min(1e-12)
        out.append(1.0 - (loo**2).sum() / sst)
    return torch.stack(out)
