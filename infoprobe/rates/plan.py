"""Sizing a capacity sweep from its pilot: how many seeds and widths a slope ratio needs.

The rule (docs/reproduction.md, "The separation sweep at T = 32"), applied to the pilot's
runs of two architectures at the same widths:

- σ: the pooled within-point standard deviation of log NMSE (every (arch, width) point
  with two or more included runs; degrees of freedom Σ (n_point − 1));
- b_ref, b_arch: each architecture's OLS slope of log NMSE on log P over the pilot;
  r = b_arch / b_ref;
- for n seeds at the widths W of a candidate design, each slope's standard error is
  se = σ / sqrt(n · Σ_{w ∈ W} (log P_w − mean)²), and the ratio's predicted interval
  width is 2 · t(1 − (1 − level)/2, n·|W| − 2) · sqrt(se_arch² + r² se_ref²) / |b_ref|
  (the delta method for a ratio of independent slopes);
- the design chosen is the one with the fewest runs (both architectures) whose predicted
  width is at most ``target``, ties to more widths; when none fits in ``max_runs``, the
  narrowest design that does.

A pilot whose reference slope interval contains 0 gives the ratio no denominator: the
plan says so instead of sizing anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from infoprobe.rates.fit import RateError, RateRecord, _ols, exclusion


@dataclass(frozen=True)
class Design:
    """One candidate: ``seeds`` per point at ``widths``, ``runs`` over both architectures,
    and the ratio interval's predicted ``width``."""

    seeds: int
    widths: tuple[int, ...]
    runs: int
    width: float

    def to_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "widths": list(self.widths), "runs": self.runs,
                "predicted_interval_width": self.width}  # fmt: skip


@dataclass(frozen=True)
class SweepPlan:
    """The rule's inputs read from the pilot and the design it picks (None: no denominator,
    ``reason`` says why)."""

    sigma: float
    sigma_df: int
    slope_ref: float
    slope_ref_interval: tuple[float, float]
    slope_arch: float
    ratio: float
    chosen: Design | None
    reason: str
    candidates: tuple[Design, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "sigma_log_nmse": self.sigma,
            "sigma_df": self.sigma_df,
            "slope_ref": self.slope_ref,
            "slope_ref_interval": list(self.slope_ref_interval),
            "slope_arch": self.slope_arch,
            "ratio": self.ratio,
            "chosen": None if self.chosen is None else self.chosen.to_dict(),
            "reason": self.reason,
            "candidates": [d.to_dict() for d in self.candidates],
        }


def pooled_sigma(records: Sequence[RateRecord]) -> tuple[float, int]:
    """(σ, degrees of freedom): the pooled within-point standard deviation of log NMSE over
    the (arch, width) points of ``records`` (excluded runs left out)."""
    points: dict[tuple[str, int], list[float]] = {}
    for rec in records:
        if exclusion(rec) is None:
            points.setdefault((rec.arch, rec.width), []).append(float(np.log(rec.nmse)))
    squares = sum(float(((np.array(v) - np.mean(v)) ** 2).sum()) for v in points.values())
    df = sum(len(v) - 1 for v in points.values())
    if df < 1:
        raise RateError("pooled_sigma: no point has two included runs (seeds) to compare")
    return float(np.sqrt(squares / df)), df


def predicted_width(
    sigma: float, slope_ref: float, ratio: float, log_params: Sequence[float], seeds: int,
    level: float = 0.95,
) -> float:  # fmt: skip
    """The ratio interval's predicted width for ``seeds`` runs at each of the widths whose
    log decoding-parameter counts are ``log_params`` (module doc)."""
    x = np.asarray(log_params, dtype=np.float64)
    sxx = seeds * float(((x - x.mean()) ** 2).sum())
    se = sigma / np.sqrt(sxx)
    df = seeds * len(x) - 2
    t = stats.t.ppf(1.0 - (1.0 - level) / 2.0, df)
    return float(2.0 * t * se * np.sqrt(1.0 + ratio**2) / abs(slope_ref))


def pilot_slope(
    records: Sequence[RateRecord], arch: str, level: float = 0.95
) -> tuple[float, float, float]:
    """(slope, low, high): the OLS slope of log NMSE on log P over ``arch``'s included
    pilot runs and its t-interval (two widths suffice here: the pilot sizes a sweep, it is
    not a fit of the rate)."""
    group = [r for r in records if r.arch == arch and exclusion(r) is None]
    if len({r.n_params for r in group}) < 2 or len(group) < 3:
        raise RateError(
            f"plan_sweep: {arch!r} needs included pilot runs at two widths and three runs, "
            f"got {len(group)} at {len({r.n_params for r in group})}"
        )
    x = np.log([r.n_params for r in group])
    slope, _, resid, sxx = _ols(x, np.log([r.nmse for r in group]))
    half = stats.t.ppf(1.0 - (1.0 - level) / 2.0, len(group) - 2) * resid / np.sqrt(sxx)
    return slope, slope - half, slope + half


def plan_sweep(
    records: Sequence[RateRecord],
    params: Mapping[int, int],
    designs: Sequence[Sequence[int]],
    *,
    reference: str,
    arch: str,
    target: float = 0.5,
    max_runs: int = 48,
    max_seeds: int = 12,
    level: float = 0.95,
) -> SweepPlan:
    """The rule of the module doc on a pilot's ``records`` of ``reference`` and ``arch``;
    ``params``: each candidate width's decoding-parameter count (the same for both
    architectures' last block and readout); ``designs``: the candidate width sets."""
    sigma, df = pooled_sigma(records)
    (b_ref, low, high), (b_arch, _, _) = (pilot_slope(records, a, level) for a in (reference, arch))
    ratio = b_arch / b_ref if b_ref != 0.0 else float("nan")
    base = dict(sigma=sigma, sigma_df=df, slope_ref=b_ref, slope_ref_interval=(low, high),
                slope_arch=b_arch, ratio=ratio)  # fmt: skip
    if low <= 0.0 <= high:
        why = (f"the pilot's {reference} slope interval [{low:.3g}, {high:.3g}] contains 0: "
               "the ratio has no denominator")  # fmt: skip
        return SweepPlan(**base, chosen=None, reason=why)
    missing = sorted({w for d in designs for w in d} - set(params))
    if missing:
        raise RateError(f"plan_sweep: no parameter count for widths {missing}")
    candidates = tuple(
        Design(n, tuple(d), 2 * n * len(d),
               predicted_width(sigma, b_ref, ratio, np.log([params[w] for w in d]), n, level))
        for d in designs
        for n in range(2, max_seeds + 1)
    )  # fmt: skip
    affordable = [c for c in candidates if c.runs <= max_runs] or list(candidates)
    fitting = [c for c in affordable if c.width <= target]
    if fitting:
        chosen = min(fitting, key=lambda c: (c.runs, -len(c.widths)))
        reason = f"the fewest runs whose predicted width is at most {target:g}"
    else:
        chosen = min(affordable, key=lambda c: (c.width, c.runs))
        reason = (f"no design of at most {max_runs} runs and {max_seeds} seeds reaches "
                  f"{target:g}: the narrowest of them")  # fmt: skip
    return SweepPlan(**base, chosen=chosen, reason=reason, candidates=candidates)
