"""Every fit of a set of records, the slope ratios, and their printed table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infoprobe.base.texttable import format_table
from infoprobe.rates.fit import (
    NMSE_POWER,
    RateError,
    RateRecord,
    SlopeFit,
    SlopeRatio,
    fit_slope,
    slope_ratio,
)
from infoprobe.train.convergence import STILL_FALLING_RATIO


@dataclass(frozen=True)
class RateTable:
    """The fits per (task, T, arch), in the records' order, and for each (task, T) with
    several architectures each one's slope ratio against the reference: the architecture
    with the smallest alpha there (the first of them on ties)."""

    fits: tuple[SlopeFit, ...]
    ratios: tuple[SlopeRatio, ...]
    q: float

    def fit(self, task: str, T: int, arch: str) -> SlopeFit:
        for f in self.fits:
            if (f.task, f.T, f.arch) == (task, T, arch):
                return f
        raise RateError(f"no fit for {task} T={T} {arch}")

    def to_dict(self) -> dict:
        return {
            "nmse_power": self.q,
            "fits": [f.to_dict() for f in self.fits],
            "ratios": [r.to_dict() for r in self.ratios],
        }


def fit_rates(
    records: Sequence[RateRecord],
    *,
    level: float = 0.95,
    interval: str = "t",
    q: float = NMSE_POWER,
    seed: int = 0,
) -> RateTable:
    """Fit every (task, T, arch) of ``records`` (:func:`~infoprobe.rates.fit.fit_slope`)
    and the slope ratios within each (task, T). ``q``: NMSE ~ eps^q."""
    if not records:
        raise RateError("no records to fit")
    if not q > 0:
        raise RateError(f"q (NMSE ~ eps^q): expected > 0, got {q!r}")
    groups: dict[tuple[str, int, str], list[RateRecord]] = {}
    for r in records:
        groups.setdefault(r.group, []).append(r)
    fits = tuple(
        fit_slope(rs, level=level, interval=interval, q=q, seed=seed) for rs in groups.values()
    )
    ratios = []
    by_size: dict[tuple[str, int], list[SlopeFit]] = {}
    for f in fits:
        by_size.setdefault((f.task, f.T), []).append(f)
    for members in by_size.values():
        if len(members) < 2:
            continue
        reference = min(members, key=lambda f: (f.alpha is None, f.alpha or 0.0))
        ratios += [slope_ratio(f, reference) for f in members if f is not reference]
    return RateTable(fits, tuple(ratios), q)


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _excluded(fit: SlopeFit) -> str:
    return ", ".join(f"{n} {why}" for why, n in fit.excluded.items()) or "0"


def _falling(fit) -> str:
    """``"2/6 (median 1.4)"``: fitted runs still falling of those whose convergence is
    known, and their median half/end ratio; ``-`` when none is known."""
    if not fit.convergence:
        return "-"
    median = float(np.median(fit.convergence))
    return f"{fit.still_falling}/{len(fit.convergence)} (median {median:.3g})"


def format_rates(table: RateTable) -> str:
    """The fits and ratios as two aligned plain-text tables with a legend."""
    level = f"{round(100 * table.fits[0].level)}%"
    fits = [
        {
            "task": f.task,
            "T": str(f.T),
            "arch": f.arch,
            "alpha": _g(f.alpha),
            f"predicted slope -{table.q:g}/alpha": _g(f.predicted_slope),
            f"fitted slope [{level}]": f"{f.slope:.3g} [{f.low:.3g}, {f.high:.3g}]",
            "runs": str(f.n_runs),
            "excluded": _excluded(f),
            "still falling": _falling(f),
            "widths": ",".join(map(str, f.widths)),
        }
        for f in table.fits
    ]
    lines = [
        "slope of log(best validation NMSE) against log(decoding parameters), one point "
        f"per run; interval: {table.fits[0].method}; still falling: runs whose best NMSE at "
        f"half their steps is > {STILL_FALLING_RATIO:g}x that at the end (reported, not "
        "excluded)",
        format_table(fits),
    ]
    if table.ratios:
        ratios = [
            {
                "task": r.task,
                "T": str(r.T),
                "slope ratio": f"{r.arch} / {r.reference}",
                f"fitted [{level}]": f"{r.ratio:.3g} [{r.low:.3g}, {r.high:.3g}]",
                "InfoFlow (alpha ratio)": _g(r.predicted),
                "within interval": "-"
                if r.predicted is None
                else ("yes" if r.low <= r.predicted <= r.high else "no"),
            }
            for r in table.ratios
        ]
        lines += ["", "slope ratios (independent of how NMSE relates to eps)", format_table(ratios)]
    return "\n".join(lines)
