"""Acceptance checks on a claim's results, thresholds fixed in :mod:`claims` before any run.

Each function takes the per-grid-point summaries of ``results.json`` (``configs``) and
keyword thresholds, and returns ``(passed, detail)``. The claims bind the thresholds with
``functools.partial``.

``passed`` is True or False only when the check compared something. It is None, with a
detail starting "not measurable: ", when there is nothing to compare: a grid point it
needs has no finished run, or the grid has no point of the series, rivals, positions or
roles the check is about. A check never passes vacuously (``all([])``); the
``infoprobe reproduce`` command treats an acceptance check that is not measurable as not
accepted (exit status 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

Configs = Sequence[Mapping[str, Any]]
Outcome = tuple[bool | None, str]
NOT_MEASURABLE = "not measurable: "


def _unmeasurable(why: str) -> Outcome:
    return None, NOT_MEASURABLE + why


def _select(configs: Configs, **coords: Any) -> list[Mapping[str, Any]]:
    return [c for c in configs if all(c["coords"].get(k) == v for k, v in coords.items())]


def _best(config: Mapping[str, Any]) -> float | None:
    best = config.get("best")
    return None if best is None else best["val_nmse"]


def _best_run(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    best = config.get("best")
    if best is None:
        return None
    return next(r for r in config["runs"] if r["seed"] == best["seed"])


def nmse_gap(configs: Configs, *, where: Mapping[str, Any], good: str, factor: float) -> Outcome:
    """Among the grid points at ``where``, series ``good`` has a best NMSE at least
    ``factor`` times lower than every other series."""
    chosen = _select(configs, **where)
    winner = [c for c in chosen if c["series"] == good]
    others = [c for c in chosen if c["series"] != good]
    if not winner:
        return _unmeasurable(f"no grid point of series {good} at {dict(where)}")
    if not others:
        return _unmeasurable(f"no other series than {good} at {dict(where)}")
    if any(_best(c) is None for c in chosen):
        return _unmeasurable(f"missing runs at {dict(where)}")
    ref = _best(winner[0])
    ratios = {c["label"]: _best(c) / ref for c in others}
    text = ", ".join(f"{k}/{winner[0]['label']} = {v:.3g}x" for k, v in ratios.items())
    return all(r >= factor for r in ratios.values()), text


def rises_with(configs: Configs, *, x: str, floor: float | None = None, at: Any = None) -> Outcome:
    """In every series the best NMSE increases strictly along ``x``; with ``floor``, it
    also exceeds ``floor`` at ``x = at``. Not measurable without a series of at least two
    points, or (with ``floor``) without a point at ``x = at``."""
    ok, parts = True, []
    all_series = list(dict.fromkeys(c["series"] for c in configs))
    if not all_series:
        return _unmeasurable("no grid point")
    for series in all_series:
        points = sorted((c["coords"][x], _best(c)) for c in configs if c["series"] == series)
        if any(v is None for _, v in points):
            return _unmeasurable(f"missing runs in series {series}")
        if len(points) < 2:
            return _unmeasurable(f"series {series} has one point, nothing to rise from")
        values = [v for _, v in points]
        rising = all(b > a for a, b in itertools.pairwise(values))
        high = True
        if floor is not None:
            at_floor = [v for xv, v in points if xv == at]
            if not at_floor:
                return _unmeasurable(f"series {series} has no point at {x}={at}")
            high = all(v > floor for v in at_floor)
        ok = ok and rising and high
        parts.append(f"{series}: " + " < ".join(f"{v:.3g}" for v in values))
    return ok, "; ".join(parts)


def cls_attention_near(
    configs: Configs, *, positions: Sequence[int], target: float, tol: float
) -> Outcome:
    """Best seed of every grid point: the mean CLS attention of block 0, head 0 on each of
    ``positions`` lies within ``tol`` of ``target``. Not measurable without a grid point
    or without positions."""
    if not configs or not positions:
        return _unmeasurable("no grid point" if not configs else "no positions to check")
    ok, parts = True, []
    for config in configs:
        run = _best_run(config)
        if run is None:
            return _unmeasurable(f"missing runs for {config['label']}")
        row = run["analyses"]["cls_attention"]["blocks"][0][0]
        values = [row[p] for p in positions]
        ok = ok and all(abs(v - target) <= tol for v in values)
        parts.append(f"{config['label']}: " + ", ".join(f"{v:.3f}" for v in values))
    return ok, "; ".join(parts)


def role_ratios(
    configs: Configs, *, where: Mapping[str, Any], rank1_max: float, rank2_min: float
) -> Outcome:
    """Best seed of the grid points at ``where``: every head of block 0 has a probe error
    ratio (trained / untrained) <= ``rank1_max`` for the most attended key and
    >= ``rank2_min`` for the second. Not measurable without a grid point at ``where``
    or without a rank-1 or rank-2 role of block 0."""
    chosen = _select(configs, **where)
    if not chosen:
        return _unmeasurable(f"no grid point at {dict(where)}")
    ok, parts = True, []
    for config in chosen:
        run = _best_run(config)
        if run is None:
            return _unmeasurable(f"missing runs for {config['label']}")
        for role in run["analyses"]["role_probe"]["roles"]:
            if role["block"] != 0 or role["rank"] not in (1, 2):
                continue
            limit_ok = (
                role["ratio"] <= rank1_max if role["rank"] == 1 else role["ratio"] >= rank2_min
            )
            ok = ok and limit_ok
            parts.append(f"{config['label']} {role['name']}: {role['ratio']:.3f}")
    if not parts:
        return _unmeasurable(f"no rank-1 or rank-2 role of block 0 at {dict(where)}")
    return ok, "; ".join(parts)


def series_below(
    configs: Configs,
    *,
    x: str,
    good: str,
    others: Sequence[str],
    where: Mapping[str, Any] | None = None,
) -> Outcome:
    """Among the grid points at ``where``: at every ``x`` where series ``good`` ran, its
    best NMSE is below that of each series in ``others`` at the same ``x``. Not measurable
    without a point of ``good``, or where an ``x`` of ``good`` has no rival point."""
    configs = _select(configs, **(where or {}))
    if not any(c["series"] == good for c in configs):
        return _unmeasurable(f"no grid point of series {good}")
    ok, parts = True, []
    for config in (c for c in configs if c["series"] == good):
        ref = _best(config)
        rivals = [
            c
            for c in configs
            if c["series"] in others and c["coords"].get(x) == config["coords"].get(x)
        ]
        if not rivals:
            return _unmeasurable(
                f"no point of {list(others)} at {x}={config['coords'].get(x)} to compare with"
            )
        if ref is None or any(_best(c) is None for c in rivals):
            return _unmeasurable(f"missing runs at {x}={config['coords'].get(x)}")
        below = all(ref < _best(c) for c in rivals)
        ok = ok and below
        parts.append(
            f"{x}={config['coords'].get(x)}: {good} {ref:.3g} vs "
            + ", ".join(f"{c['series']} {_best(c):.3g}" for c in rivals)
        )
    return ok, "; ".join(parts)


# ---- cost law: fitted rates ---------------------------------------------------------------
def _slope_ratios(configs: Configs, where: Mapping[str, Any]) -> tuple[list[Any], str | None]:
    """The slope ratios of the rate fits at ``where`` (:func:`infoprobe.rates.fit_rates`),
    or ``([], why)`` when they cannot be measured."""
    from infoprobe.rates import RateError, fit_rates, records_from_results

    chosen = _select(configs, **where)
    if not chosen or any(c["missing_seeds"] for c in chosen):
        return [], f"missing runs at {dict(where)}"
    try:
        table = fit_rates(records_from_results({"configs": chosen}, "results.json"))
    except RateError as err:
        return [], str(err)
    if not table.ratios:
        return [], f"one series only at {dict(where)}"
    return list(table.ratios), None


def _ratio_text(ratios: Sequence[Any]) -> str:
    return "; ".join(
        f"{r.arch}/{r.reference} slope ratio {r.ratio:.3g} [{r.low:.3g}, {r.high:.3g}] "
        f"(alpha ratio {r.predicted:.3g})"
        for r in ratios
    )


def slope_ratios_cover(configs: Configs, *, where: Mapping[str, Any]) -> Outcome:
    """At ``where``, every slope ratio's interval contains InfoFlow's alpha ratio."""
    ratios, why = _slope_ratios(configs, where)
    if why:
        return _unmeasurable(why)
    return all(r.low <= r.predicted <= r.high for r in ratios), _ratio_text(ratios)


def slope_ratios_below(configs: Configs, *, where: Mapping[str, Any], bound: float) -> Outcome:
    """At ``where``, every slope ratio's interval lies below ``bound``: the compared
    architecture's NMSE falls more slowly with parameters than the reference's."""
    ratios, why = _slope_ratios(configs, where)
    if why:
        return _unmeasurable(why)
    return all(r.high < bound for r in ratios), _ratio_text(ratios)


def slope_ratios_narrow(configs: Configs, *, where: Mapping[str, Any], width: float) -> Outcome:
    """At ``where``, every slope ratio's 95% interval is at most ``width`` wide: the sweep
    measured the ratio finely enough to tell InfoFlow's ratio from its neighbours."""
    ratios, why = _slope_ratios(configs, where)
    if why:
        return _unmeasurable(why)
    widths = ", ".join(f"{r.arch}/{r.reference} {r.high - r.low:.3g}" for r in ratios)
    ok = all(r.high - r.low <= width for r in ratios)
    return ok, f"interval width {widths} (bound {width:g}); " + _ratio_text(ratios)
