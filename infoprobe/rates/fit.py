"""Fit a cost-law exponent: log NMSE against log parameters, with an interval.

InfoFlow's cost law says a program of exponent alpha needs P ~ eps^-alpha parameters for
precision eps. With NMSE ~ eps^q (q = 2 when eps is an RMS or sup-norm error of the
standardised target), log NMSE = -(q / alpha) log P + const: the predicted slope is
``-q / alpha``. The ratio of two architectures' slopes does not depend on q: it is
alpha_A / alpha_B.

A fit is ordinary least squares of ``y = log NMSE`` on ``x = log P`` over every included
run (each seed at each width is one point). Its interval is either

- ``"t"`` (default): the classical OLS interval ``b ± t_{n-2} se(b)``, exact when the
  residuals of log NMSE are independent and normal with one variance; or
- ``"bootstrap"``: seeds resampled with replacement (a seed keeps its runs at every
  width together), the fit repeated, percentile interval; it needs at least
  :data:`MIN_BOOTSTRAP_SEEDS` seeds and undercovers with few of them.

Runs that did not train are excluded by :func:`exclusion` (a rule fixed before any run of
the cost-law study) and counted, never silently dropped.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from infoprobe.base.errors import UsageError
from infoprobe.train.convergence import STILL_FALLING_RATIO

DID_NOT_TRAIN_NMSE = 0.9
"""A run whose best validation NMSE is at least this did not train (a constant predictor
has NMSE 1): it is excluded from the fit and counted."""
NMSE_POWER = 2.0
"""q in NMSE ~ eps^q: the law's eps is an RMS (or sup-norm) error of the standardised
target, so NMSE = MSE / Var ~ eps^2."""
MIN_WIDTHS = 3
"""A fit needs runs at this many distinct parameter counts (two points always fit a line)."""
MIN_BOOTSTRAP_SEEDS = 5
INTERVALS = ("t", "bootstrap")
BOOTSTRAP_RESAMPLES = 2000
RATIO_DRAWS = 20_000


class RateError(UsageError):
    """Records that cannot be fitted as asked (the message names the record and the fix)."""


@dataclass(frozen=True)
class RateRecord:
    """One trained run of a capacity sweep.

    Attributes:
        task: the task's name and parameters, e.g. ``"intrinsic-dim D=2 d=4"`` (T apart).
        T: sequence length.
        arch: the architecture's label, e.g. ``"(1,2)"``; fits are per (task, T, arch).
        width: the swept capacity knob's value (e.g. the FFN and readout width).
        seed: the run's seed.
        n_params: the parameters the law counts (the decoding ones), > 0.
        nmse: the run's best validation NMSE (> 0; NaN or inf for a diverged run).
        alpha: InfoFlow's exponent for this architecture at this T and E (None: unknown).
        n_params_total: every parameter of the model (reported, not fitted).
        diverged: the run stopped on a non-finite loss.
        convergence: the run's best NMSE at half its steps over that at the end
            (:mod:`infoprobe.train.convergence`; None: not known). Reported, never used
            to exclude a run.
    """

    task: str
    T: int
    arch: str
    width: int
    seed: int
    n_params: int
    nmse: float
    alpha: float | None = None
    n_params_total: int | None = None
    diverged: bool = False
    convergence: float | None = None

    @property
    def group(self) -> tuple[str, int, str]:
        return (self.task, self.T, self.arch)


def exclusion(record: RateRecord) -> str | None:
    """Why a run is left out of every fit, or None. The rule, fixed in advance: a run that
    diverged (flagged, or a non-finite NMSE) and a run whose NMSE is at least
    :data:`DID_NOT_TRAIN_NMSE` (it did not train) are excluded."""
    if record.diverged or not math.isfinite(record.nmse):
        return "diverged"
    if record.nmse >= DID_NOT_TRAIN_NMSE:
        return "did not train"
    return None


@dataclass(frozen=True)
class SlopeFit:
    """The fit of one (task, T, arch): slope of log NMSE on log P with its interval.

    ``predicted_slope`` is ``-q / alpha`` (None without alpha); ``excluded`` maps each
    exclusion reason to its count; ``draws`` are slope draws from the fit's sampling
    distribution (t or bootstrap), used for ratio intervals.
    """

    task: str
    T: int
    arch: str
    alpha: float | None
    slope: float
    low: float
    high: float
    intercept: float
    level: float
    method: str
    n_runs: int
    widths: tuple[int, ...]
    seeds: tuple[int, ...]
    excluded: dict[str, int]
    predicted_slope: float | None
    x_mean: float
    sxx: float
    resid_scale: float
    draws: np.ndarray = field(repr=False, compare=False)
    convergence: tuple[float, ...] = ()
    """The fitted runs' convergence ratios (those known), reported beside the fit."""

    @property
    def still_falling(self) -> int:
        """Fitted runs whose convergence ratio says they were still falling."""
        return sum(r > STILL_FALLING_RATIO for r in self.convergence)

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def line(self, log_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fitted log NMSE at ``log_p`` [k] and its OLS confidence band at the fit's
        level: (centre, low, high), each [k]."""
        from scipy import stats  # loaded by a fit, not by the command line

        centre = self.intercept + self.slope * log_p
        t = float(stats.t(df=self.n_runs - 2).ppf(0.5 + self.level / 2))
        spread = 1 / self.n_runs + (log_p - self.x_mean) ** 2 / self.sxx
        half = t * self.resid_scale * np.sqrt(spread)
        return centre, centre - half, centre + half

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "T": self.T,
            "arch": self.arch,
            "alpha": self.alpha,
            "predicted_slope": self.predicted_slope,
            "slope": self.slope,
            "interval": [self.low, self.high],
            "intercept": self.intercept,
            "level": self.level,
            "method": self.method,
            "n_runs": self.n_runs,
            "widths": list(self.widths),
            "seeds": list(self.seeds),
            "excluded": dict(self.excluded),
            "convergence": {
                "known": len(self.convergence),
                "still_falling": self.still_falling,
                "median_ratio": float(np.median(self.convergence)) if self.convergence else None,
                "rule": f"still falling: half/end ratio > {STILL_FALLING_RATIO:g}",
            },
        }


def _stream(name: str) -> int:
    """A random stream per fit or ratio, from its name, so a number drawn for it is the
    same whichever other fits are made beside it."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """(slope, intercept, residual standard deviation, sum of squares of x about its
    mean) of the least-squares line y = intercept + slope x."""
    n = len(x)
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = y - intercept - slope * x
    s2 = float((resid**2).sum() / (n - 2)) if n > 2 else math.inf
    return slope, intercept, math.sqrt(s2), sxx


def fit_slope(
    records: Sequence[RateRecord],
    *,
    level: float = 0.95,
    interval: str = "t",
    q: float = NMSE_POWER,
    seed: int = 0,
) -> SlopeFit:
    """Fit one (task, T, arch) group: OLS of log NMSE on log n_params over its included
    runs, with a ``level`` interval by ``interval`` ("t" or "bootstrap", module doc).

    Raises :class:`RateError` for records of several groups, fewer than
    :data:`MIN_WIDTHS` distinct parameter counts after exclusion, a bad level or method.
    """
    if not 0 < level < 1:
        raise RateError(f"level: expected a number in (0, 1), got {level!r}")
    if interval not in INTERVALS:
        raise RateError(f"interval: expected one of {INTERVALS}, got {interval!r}")
    groups = {r.group for r in records}
    if len(groups) != 1:
        raise RateError(f"fit_slope: expected the records of one (task, T, arch), got {groups}")
    task, T, arch = groups.pop()
    name = f"{task} T={T} {arch}"
    excluded: dict[str, int] = {}
    kept = []
    for r in records:
        why = exclusion(r)
        if why is None:
            kept.append(r)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    counts = sorted({r.n_params for r in kept})
    if len(counts) < MIN_WIDTHS:
        raise RateError(
            f"{name}: a fit needs runs at >= {MIN_WIDTHS} parameter counts, got {len(counts)} "
            f"({counts}) after excluding {sum(excluded.values())} run(s) {excluded or ''}"
        )
    x = np.log([r.n_params for r in kept])
    y = np.log([r.nmse for r in kept])
    slope, intercept, scale, sxx = _ols(x, y)
    se = scale / math.sqrt(sxx)
    n = len(kept)
    seeds = tuple(sorted({r.seed for r in kept}))
    rng = np.random.default_rng([seed, _stream(name)])
    if interval == "t":
        from scipy import stats

        t = stats.t(df=n - 2)
        half = float(t.ppf(0.5 + level / 2)) * se
        low, high = slope - half, slope + half
        draws = slope + se * t.rvs(size=RATIO_DRAWS, random_state=rng)
    else:
        if len(seeds) < MIN_BOOTSTRAP_SEEDS:
            raise RateError(
                f"{name}: the bootstrap over seeds needs >= {MIN_BOOTSTRAP_SEEDS} seeds, got "
                f"{len(seeds)}; use interval='t'"
            )
        draws = _seed_bootstrap(kept, seeds, rng)
        low, high = (float(v) for v in np.quantile(draws, [0.5 - level / 2, 0.5 + level / 2]))
    alphas = {r.alpha for r in records}
    if len(alphas) != 1:
        raise RateError(f"{name}: records disagree on alpha: {sorted(map(str, alphas))}")
    alpha = alphas.pop()
    return SlopeFit(
        task=task,
        T=T,
        arch=arch,
        alpha=alpha,
        slope=slope,
        low=float(low),
        high=float(high),
        intercept=intercept,
        level=level,
        method=interval,
        n_runs=n,
        widths=tuple(sorted({r.width for r in kept})),
        seeds=seeds,
        excluded=excluded,
        predicted_slope=None if alpha is None else -q / alpha,
        x_mean=float(x.mean()),
        sxx=sxx,
        resid_scale=scale,
        draws=np.asarray(draws, dtype=float),
        convergence=tuple(r.convergence for r in kept if r.convergence is not None),
    )


def _seed_bootstrap(
    kept: Sequence[RateRecord], seeds: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """Slopes of BOOTSTRAP_RESAMPLES fits, each on seeds drawn with replacement (every run
    of a drawn seed enters with that seed's multiplicity: a weighted least-squares fit);
    resamples whose runs span a single parameter count are left out."""
    index = np.searchsorted(seeds, [r.seed for r in kept])  # [n]
    drawn = rng.integers(0, len(seeds), size=(BOOTSTRAP_RESAMPLES, len(seeds)))
    counts = np.zeros((BOOTSTRAP_RESAMPLES, len(seeds)))
    np.add.at(counts, (np.arange(BOOTSTRAP_RESAMPLES)[:, None], drawn), 1.0)
    w = counts[:, index]  # [B, n] weight of each run in each resample
    x = np.log([r.n_params for r in kept])
    y = np.log([r.nmse for r in kept])
    sw, sx, sy = w.sum(1), w @ x, w @ y
    denom = sw * (w @ (x * x)) - sx**2
    ok = denom > 1e-9 * sw**2
    return (sw * (w @ (x * y)) - sx * sy)[ok] / denom[ok]


@dataclass(frozen=True)
class SlopeRatio:
    """Architecture ``arch`` against ``reference`` at one (task, T): fitted slope ratio
    (arch / reference) with its interval, and InfoFlow's ratio alpha_ref / alpha_arch."""

    task: str
    T: int
    arch: str
    reference: str
    ratio: float
    low: float
    high: float
    predicted: float | None
    level: float

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "T": self.T,
            "arch": self.arch,
            "reference": self.reference,
            "ratio": self.ratio,
            "interval": [self.low, self.high],
            "predicted": self.predicted,
            "level": self.level,
        }


def slope_ratio(fit: SlopeFit, reference: SlopeFit, seed: int = 0) -> SlopeRatio:
    """``fit.slope / reference.slope``; its interval from the quantiles of the ratio of
    independent draws of the two slopes (each from its own fit's sampling distribution;
    the reference's draws are redrawn in random order, so draws made from one random
    stream are not paired)."""
    if (fit.task, fit.T) != (reference.task, reference.T):
        raise RateError(
            f"slope_ratio: fits of different tasks or T: {fit.task} T={fit.T} and "
            f"{reference.task} T={reference.T}"
        )
    level = min(fit.level, reference.level)
    rng = np.random.default_rng(
        [seed, _stream(f"{fit.task} T={fit.T} {fit.arch} / {reference.arch}")]
    )
    draws = fit.draws / rng.choice(reference.draws, size=len(fit.draws))
    low, high = np.quantile(draws, [0.5 - level / 2, 0.5 + level / 2])
    predicted = (
        None if fit.alpha is None or reference.alpha is None else reference.alpha / fit.alpha
    )
    return SlopeRatio(
        task=fit.task,
        T=fit.T,
        arch=fit.arch,
        reference=reference.arch,
        ratio=fit.slope / reference.slope,
        low=float(low),
        high=float(high),
        predicted=predicted,
        level=level,
    )
