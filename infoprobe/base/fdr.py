"""False discovery rate: Benjamini–Hochberg over a whole grid of p-values, at a level fixed
before any comparison (the flow instrument's null rule and the critic probe's per-sample
sets both use it)."""

from __future__ import annotations

import math

import numpy as np

from infoprobe.base.errors import UserError

FDR_Q = 0.05
"""The false discovery rate every null rule uses unless told otherwise, fixed in advance."""


class FDRLevelError(UserError):
    """A false discovery rate outside (0, 1)."""


def check_fdr_level(q: object, name: str = "q") -> float:
    """``q`` as a float in the open interval (0, 1), else :class:`FDRLevelError` naming
    ``name``."""
    ok = isinstance(q, int | float | np.number) and not isinstance(q, bool)
    if not ok or not math.isfinite(q) or not 0 < q < 1:
        raise FDRLevelError(f"{name}: expected a false discovery rate in (0, 1), got {q!r}")
    return float(q)


def benjamini_hochberg(p: np.ndarray, q: float = FDR_Q) -> np.ndarray:
    """Benjamini–Hochberg at level ``q`` over every entry of ``p`` (any shape): bool, the
    same shape, True where rejected (the k smallest p-values, k the largest rank with
    p_(k) ≤ q·k/m)."""
    q = check_fdr_level(q)
    p = np.asarray(p, dtype=np.float64)
    flat = p.ravel()
    m = flat.size
    if m == 0:
        return np.zeros(p.shape, dtype=bool)
    order = np.argsort(flat, kind="stable")
    below = flat[order] <= q * np.arange(1, m + 1) / m
    keep = np.zeros(m, dtype=bool)
    if below.any():
        k = int(np.flatnonzero(below)[-1]) + 1
        keep[order[:k]] = True
    return keep.reshape(p.shape)
