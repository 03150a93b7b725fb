"""Figures of a claim's results. Every builder takes the ``results.json`` dict and returns a
matplotlib ``Figure`` (built without pyplot; never shown).

Builders (the ``kind`` of a claim's :class:`~infoprobe.reproduce.grid.FigureSpec`, whose
other fields are ``nmse_vs``'s options):
``nmse_vs`` (NMSE against a coordinate, one line per series: best over seeds, dots for
every seed), ``cls_attention`` (bar chart of CLS attention per key position),
``cls_probe`` (probe R² at CLS per position with its controls) and ``role_ratios``
(argmax-probe error ratios per head).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from infoprobe.reproduce.grid import Claim, FigureKind, ReproduceError

Results = Mapping[str, Any]


def _selected(results: Results, where: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return [
        c
        for c in results["configs"]
        if all(c["coords"].get(k) == v for k, v in (where or {}).items())
    ]


def _x_of(config: Mapping[str, Any], x: str) -> float | None:
    return config["n_params"] if x == "n_params" else config["coords"].get(x)


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)


def nmse_vs(
    results: Results,
    *,
    x: str,
    log: bool = True,
    where: Mapping[str, Any] | None = None,
    series_by: str | None = None,
    annotate: str | None = None,
) -> Figure:
    """Validation NMSE against coordinate ``x`` (``"n_params"``: parameter count).

    One line per series (or per value of coordinate ``series_by``) through the best seed
    of each grid point, every seed as a dot. ``annotate``: ``"comparison_number"`` adds
    InfoFlow's comparison number to the x tick labels; ``"exponent"`` adds each series'
    exponent alpha(T) to the legend.
    """
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    configs = [c for c in _selected(results, where) if _x_of(c, x) is not None]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in configs:
        name = f"{series_by}={c['coords'][series_by]}" if series_by else c["series"]
        groups.setdefault(name, []).append(c)
    plotted = False
    for name, members in groups.items():
        members = sorted(members, key=lambda c: _x_of(c, x))
        xs = [_x_of(c, x) for c in members if c["best"]]
        ys = [c["best"]["val_nmse"] for c in members if c["best"]]
        label = name
        if annotate == "exponent":
            label += f"  (alpha = {members[0]['engine']['exponent']})"
        if xs:
            (line,) = ax.plot(xs, ys, marker="o", label=label)
            seed_x = [_x_of(c, x) for c in members for _ in c["runs"]]
            seed_y = [r["val_nmse"] for c in members for r in c["runs"]]
            ax.scatter(seed_x, seed_y, s=14, alpha=0.45, color=line.get_color())
            plotted = True
    if not plotted:
        _no_data(ax)
    if log and plotted:
        ax.set_yscale("log")
    if x == "n_params" and plotted:
        ax.set_xscale("log")
    ticks = sorted({_x_of(c, x) for c in configs})
    if annotate == "comparison_number" and ticks:
        numbers = {_x_of(c, x): c["engine"]["comparison_number"] for c in configs}
        ax.set_xticks(ticks, [f"{t}\n({numbers[t]})" for t in ticks])
        ax.set_xlabel(f"{x}  (InfoFlow comparison number)")
    elif x != "n_params" and ticks:
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel(x)
    else:
        ax.set_xlabel("parameters" if x == "n_params" else x)
    ax.set_ylabel("validation NMSE")
    ax.set_title(f"{results['claim']} ({results['profile']}): NMSE vs {x}")
    ax.grid(True, which="both", alpha=0.3)
    if plotted:
        ax.legend(fontsize=8)
    return fig


def cls_attention(results: Results) -> Figure:
    """Mean CLS attention (block 0, head 0) on each key, one bar group per run."""
    fig = Figure(figsize=(7.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    runs = [r for c in results["configs"] for r in c["runs"] if "cls_attention" in r["analyses"]]
    if not runs:
        _no_data(ax)
        return fig
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        row = np.asarray(run["analyses"]["cls_attention"]["blocks"][0][0])
        pos = np.arange(len(row)) + (i - (len(runs) - 1) / 2) * width
        ax.bar(pos, row, width=width, label=f"seed {run['seed']}")
    n_keys = len(runs[0]["analyses"]["cls_attention"]["blocks"][0][0])
    ax.set_xticks(range(n_keys), [*map(str, range(n_keys - 1)), "CLS"])
    ax.axhline(1 / 3, ls="--", color="k", lw=1, label="1/3")
    ax.set_xlabel("key position (0-based; the paper's x(1..3) are 0..2)")
    ax.set_ylabel("mean attention from CLS")
    ax.set_title(f"{results['claim']}: CLS attention per position (block 0, head 0)")
    ax.legend(fontsize=8)
    return fig


def _best_run(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    best = config.get("best")
    return next((r for r in config["runs"] if best and r["seed"] == best["seed"]), None)


def cls_probe(results: Results) -> Figure:
    """Probe R² of x(s) from the CLS state after the last layer, best seed, with controls."""
    fig = Figure(figsize=(7.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    found = [(c, _best_run(c)) for c in results["configs"]]
    found = [(c, r) for c, r in found if r and "cls_probe" in r["analyses"]]
    if not found:
        _no_data(ax)
        return fig
    config, run = found[0]
    probe = run["analyses"]["cls_probe"]
    series = (("probe", "r2"), ("shuffled", "shuffled_r2"), ("untrained", "random_init_r2"))
    T = len(probe["r2"][-1])
    for i, (label, key) in enumerate(series):
        ax.bar(np.arange(T) + (i - 1) * 0.27, probe[key][-1], width=0.27, label=label)
    ax.set_xticks(range(T))
    ax.set_xlabel("input position s (0-based)")
    ax.set_ylabel("test R²")
    ax.set_title(f"{config['label']}, seed {run['seed']}: x(s) from the CLS state")
    ax.legend(fontsize=8)
    return fig


def role_ratios(results: Results) -> Figure:
    """Error ratio trained/untrained of the argmax (rank 1) and second (rank 2) probes,
    per head of block 0; bars = best seed, dots = every seed."""
    fig = Figure(figsize=(7.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    groups: list[tuple[str, dict[int, list[float]], dict[int, float]]] = []
    for config in results["configs"]:
        best = _best_run(config)
        if best is None or "role_probe" not in best["analyses"]:
            continue
        for head in sorted({r["head"] for r in best["analyses"]["role_probe"]["roles"]}):
            every: dict[int, list[float]] = {}
            for run in config["runs"]:
                for role in run["analyses"]["role_probe"]["roles"]:
                    if role["block"] == 0 and role["head"] == head:
                        every.setdefault(role["rank"], []).append(role["ratio"])
            chosen = {
                r["rank"]: r["ratio"]
                for r in best["analyses"]["role_probe"]["roles"]
                if r["block"] == 0 and r["head"] == head
            }
            groups.append((f"{config['series']}\nhead {head}", every, chosen))
    if not groups:
        _no_data(ax)
        return fig
    ranks = sorted({k for _, _, chosen in groups for k in chosen})
    width = 0.8 / len(ranks)
    for j, rank in enumerate(ranks):
        pos = np.arange(len(groups)) + (j - (len(ranks) - 1) / 2) * width
        name = {1: "most attended key", 2: "second-most attended"}.get(rank, f"rank {rank}")
        heights = [g[2].get(rank, np.nan) for g in groups]
        bars = ax.bar(pos, heights, width=width, label=name)
        for p, (_, every, _) in zip(pos, groups, strict=True):
            values = every.get(rank, [])
            ax.scatter([p] * len(values), values, s=12, color="k", zorder=3)
        bars.set_label(name)
    ax.axhline(1.0, ls="--", color="k", lw=1)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_ylabel("probe error: trained / untrained")
    ax.set_title(f"{results['claim']}: which attended key is linearly recoverable")
    ax.legend(fontsize=8)
    return fig


def rate(results: Results, *, where: Mapping[str, Any]) -> Figure:
    """The cost-law fit of the grid points at ``where`` (one (task, T)): every run, each
    series' fit with its band and InfoFlow's slope (:func:`infoprobe.rates.rate_figure`);
    a note instead while a fit cannot be made."""
    from infoprobe.rates import RateError, fit_rates, rate_figure, records_from_results

    records = records_from_results({"configs": _selected(results, where)}, "results.json")
    try:
        table = fit_rates(records)
    except RateError as err:
        fig = Figure(figsize=(6.4, 4.4), layout="constrained")
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, f"no fit yet:\n{err}", ha="center", va="center", wrap=True,
                fontsize=8, transform=ax.transAxes)  # fmt: skip
        return fig
    fit = table.fits[0]
    return rate_figure(table, records, fit.task, fit.T)


BUILDERS: dict[FigureKind, Callable[..., Figure]] = {
    "nmse_vs": nmse_vs,
    "cls_attention": cls_attention,
    "cls_probe": cls_probe,
    "role_ratios": role_ratios,
    "rate": rate,
}


def claim_figures(claim: Claim, results: Results) -> dict[str, tuple[Figure, str]]:
    """Every figure of ``claim``: name → (Figure, caption); a ``rate`` figure whose
    ``where`` selects no grid point of this profile is left out."""
    out = {}
    for spec in claim.figures:
        if spec.kind not in BUILDERS:
            raise ReproduceError(f"claim {claim.name}: unknown figure kind {spec.kind!r}")
        if spec.kind == "rate" and not _selected(results, spec.where):
            continue
        out[spec.name] = (BUILDERS[spec.kind](results, **spec.options()), spec.caption)
    return out
