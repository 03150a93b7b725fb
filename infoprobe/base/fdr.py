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


def benjamini_hochberg(p: np.ndarray, q: float = FDR_Q, axis: int | None = None) -> np.ndarray:
    """Benjamini–Hochberg at level ``q``: bool, the shape of ``p``, True where rejected (the
    k smallest p-values, k the largest rank with p_(k) ≤ q·k/m). ``axis=None``: one family
    of every entry; an int: one family per index of the other axes, along ``axis``."""
    q = check_fdr_level(q)
    p = np.asarray(p, dtype=np.float64)
    if axis is None:
        return benjamini_hochberg(p.reshape(-1), q, 0).reshape(p.shape)
    moved = np.moveaxis(p, axis, -1)
    m = moved.shape[-1]
    if m == 0:
        return np.zeros(p.shape, dtype=bool)
    ordered = np.sort(moved, axis=-1)
    below = ordered <= q * np.arange(1, m + 1) / m
    k = np.where(below.any(axis=-1), m - np.argmax(below[..., ::-1], axis=-1), 0)
    cut = np.take_along_axis(ordered, np.maximum(k - 1, 0)[..., None], axis=-1)
    keep = (moved <= cut) & (k[..., None] > 0)
    return np.moveaxis(keep, -1, axis)
