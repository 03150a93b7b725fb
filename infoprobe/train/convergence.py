"""Has a run converged? Its best validation NMSE at half its steps against at the end.

The measure, fixed before any run that uses it (docs/model.md, "Convergence"): for a run
whose evaluations end at step N, ``ratio = best NMSE up to step N/2 / best NMSE up to
step N`` (>= 1). If the best NMSE keeps improving by the same factor per doubling of the
steps (a power law in the steps, the shape these curves have late in training), doubling
N again would divide it by ``ratio`` once more: a relative change of ``1 - 1/ratio``. The
run is **still falling** when that change would exceed 20 %, i.e. ``ratio >``
:data:`STILL_FALLING_RATIO` = 1 / (1 - 0.2) = 1.25. A run with no evaluation at or
before N/2 has no ratio (None). Nothing is excluded for it: it is reported beside the
run's NMSE and beside every rate fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

DOUBLING_CHANGE = 0.2
"""The relative change of the best NMSE from doubling the steps above which a run is
still falling."""
STILL_FALLING_RATIO = 1.0 / (1.0 - DOUBLING_CHANGE)
"""1.25: the half-to-end ratio above which a run is still falling."""


def convergence(history: Sequence[Mapping[str, Any]], key: str = "val_nmse") -> dict[str, Any]:
    """The convergence of one run from its evaluation ``history`` (entries with ``step``
    and ``key``): ``steps`` (the last evaluated step N), ``half_step`` (the last
    evaluation at or before N/2), ``best_at_half``, ``best_at_end``, ``ratio`` and
    ``still_falling`` (None where they cannot be computed)."""
    points = [
        (int(h["step"]), float(h[key]))
        for h in history
        if isinstance(h.get(key), int | float) and math.isfinite(h[key])
    ]
    empty = {"steps": None, "half_step": None, "best_at_half": None, "best_at_end": None,
             "ratio": None, "still_falling": None}  # fmt: skip
    if not points:
        return empty
    steps = points[-1][0]
    early = [(s, v) for s, v in points if s <= steps / 2]
    best_end = min(v for _, v in points)
    if not early:
        return {**empty, "steps": steps, "best_at_end": best_end}
    best_half = min(v for _, v in early)
    ratio = best_half / best_end if best_end > 0 else (1.0 if best_half == 0 else math.inf)
    return {
        "steps": steps,
        "half_step": early[-1][0],
        "best_at_half": best_half,
        "best_at_end": best_end,
        "ratio": ratio,
        "still_falling": ratio > STILL_FALLING_RATIO,
    }


def describe(conv: Mapping[str, Any] | None) -> str:
    """One phrase: ``"converged (half/end 1.04)"``, ``"still falling (half/end 3.1)"``."""
    if not conv or conv.get("ratio") is None:
        return "convergence unknown (no evaluation at half the steps)"
    state = "still falling" if conv["still_falling"] else "converged"
    return f"{state} (best NMSE at half the steps / at the end: {conv['ratio']:.3g})"
