"""NMSE against decoding parameters, log-log, one figure per (task, T)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from infoprobe.rates.fit import RateRecord, exclusion
from infoprobe.rates.table import RateTable


def rate_figure(table: RateTable, records: Sequence[RateRecord], task: str, T: int) -> Figure:
    """Every run at ``(task, T)`` as a point (excluded runs hollow), each architecture's
    fit as a line with its confidence band, and InfoFlow's slope -q/alpha as a dashed line
    through the fit's centre, labelled with alpha."""
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    fits = [f for f in table.fits if (f.task, f.T) == (task, T)]
    for fit in fits:
        mine = [r for r in records if r.group == (fit.task, fit.T, fit.arch)]
        kept = [r for r in mine if exclusion(r) is None]
        dropped = [r for r in mine if exclusion(r) is not None and np.isfinite(r.nmse)]
        (dots,) = ax.plot([r.n_params for r in kept], [r.nmse for r in kept], "o", ms=4)
        color = dots.get_color()
        if dropped:
            hollow = {"mfc": "none", "color": color, "ms": 5}
            ax.plot([r.n_params for r in dropped], [r.nmse for r in dropped], "o", **hollow)
        log_kept = np.log([r.n_params for r in kept])
        log_p = np.linspace(log_kept.min(), log_kept.max(), 50)
        centre, low, high = fit.line(log_p)
        p = np.exp(log_p)
        fitted = f"{fit.slope:.2f} [{fit.low:.2f}, {fit.high:.2f}]"
        ax.plot(p, np.exp(centre), color=color, label=f"{fit.arch}: fitted {fitted}")
        band = f"{fit.arch}: {round(100 * fit.level)}% band"
        ax.fill_between(p, np.exp(low), np.exp(high), color=color, alpha=0.15, lw=0, label=band)
        if fit.predicted_slope is not None:
            anchor = fit.intercept + fit.slope * fit.x_mean
            law = anchor + fit.predicted_slope * (log_p - fit.x_mean)
            label = f"{fit.arch}: InfoFlow {fit.predicted_slope:.2f} (alpha = {fit.alpha:g})"
            ax.plot(p, np.exp(law), "--", color=color, lw=1, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decoding parameters (last block's FFN + readout)")
    ax.set_ylabel("best validation NMSE")
    ax.set_title(f"Cost law: {task}, T={T}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def rate_figures(table: RateTable, records: Sequence[RateRecord]) -> dict[str, Figure]:
    """One :func:`rate_figure` per (task, T), named ``rates_<task slug>_T<T>``."""
    import re

    out = {}
    for task, T in dict.fromkeys((f.task, f.T) for f in table.fits):
        slug = re.sub(r"[^A-Za-z0-9]+", "-", task).strip("-").lower()
        out[f"rates_{slug}_T{T}"] = rate_figure(table, records, task, T)
    return out
