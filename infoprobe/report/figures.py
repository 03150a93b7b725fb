"""Report figures: the colours and names every figure shares, and the score grids (per
layer, and one token's row across layers) with InfoFlow's sets overlaid. Every function
returns a matplotlib ``Figure`` and never shows it; the per-sample view is in
:mod:`infoprobe.report.sample_figure`, curves (ROC, threshold sweeps, training) in
:mod:`infoprobe.report.curves`.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot state), so they
are safe in threads and on headless machines; save them with ``fig.savefig``.
Axes: x = input position s (0-based, data positions only), y = token t (CLS = T) or
layer l (0 = embedding), as in docs/conventions.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from infoprobe.compare.instruments import FLOW_SHARE_NAME, probe_family_of
from infoprobe.compare.predictors import INFOFLOW, sets_phrase

PREDICTED_EDGE = "white"
VIOLATION_COLOR = "#e8112d"
OMISSION_COLOR = "#9aa5b1"
AGREE_COLOR = "#2a9d3f"
PREDICTED_COLOR = "#1f4e9c"
SCORE_CMAP = "viridis"
PANELS_PER_ROW = 4
MAX_FIGURE_WIDTH = 12.5
"""Inches: wider figures are shrunk by the page and their labels become unreadable."""


def file_stem(name: str) -> str:
    """A figure file's stem from an instrument name ("flow (random-init)" → "flow__random_init")."""
    return "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")


def instrument_label(name: str, probe: str | None = None) -> str:
    """An instrument's name with what it measures: "flow" → "flow (local sensitivity)",
    "flow (resample)" → "flow (resample ablation)", controls keep "random-init";
    "decodability" → "decodability (linear probe)" when ``probe`` is given."""
    if name.startswith("flow"):
        method = "resample ablation" if "resample" in name else "local sensitivity"
        control = ", random-init model" if "random-init" in name else ""
        return f"flow ({method}{control})"
    if name == "decodability" and probe:
        return f"decodability ({probe} probe)"
    return name


def score_label(name: str, score_name: str, probe: str | None = None) -> str:
    """A colour-bar label: the score and how the instrument obtains it."""
    if name.startswith("flow"):
        how = "x(s) redrawn" if "resample" in name else "x(s) nudged"
        if score_name == FLOW_SHARE_NAME:  # the aggregate score (docs/influence.md)
            return f"share of samples in which x(s) is in the flow set of h(t, l) ({how})"
        return f"{score_name}: share of h(t, l)'s variance when {how}"
    if name == "decodability" or probe_family_of(name):
        family = probe or probe_family_of(name) or "position"
        return f"{score_name} of a {family} probe reading x(s) from h(t, l)"
    return score_name


def token_labels(n_tokens: int) -> list[str]:
    """Tick labels of the token axis: "0".."T-1", then "CLS"."""
    return [*map(str, range(n_tokens - 1)), "CLS"]


def axis_ticks(
    ax: Axes, n: int, axis: str, labels: Sequence[str] | None = None, most: int = 16
) -> None:
    """Tick every position when at most ``most``, else about 8 evenly spaced ticks."""
    step = 1 if n <= most else int(np.ceil(n / 8))
    ticks = list(range(0, n, step))
    if labels is not None and n - 1 not in ticks:  # always label the CLS row / column
        if n - 1 - ticks[-1] < max(2, step / 2):
            ticks.pop()  # too close: its label would overlap "CLS"
        ticks.append(n - 1)
    shown = [labels[i] if labels is not None else str(i) for i in ticks]
    if axis == "x":
        ax.set_xticks(ticks, shown)
    else:
        ax.set_yticks(ticks, shown)


def _overlay_sets(ax: Axes, membership: np.ndarray, observed: np.ndarray | None) -> None:
    """Mark predicted membership and violations on a [rows, T] heatmap.

    always-predicted cells: white outline; sometimes-predicted: white dot whose area grows
    with the fraction of samples; violations (observed, never predicted): red cross.
    """
    rows, cols = np.nonzero(membership >= 1.0)
    for r, c in zip(rows, cols, strict=True):
        ax.add_patch(
            Rectangle(
                (c - 0.45, r - 0.45), 0.9, 0.9, fill=False, edgecolor=PREDICTED_EDGE, linewidth=1.4
            )
        )
    rows, cols = np.nonzero((membership > 0.0) & (membership < 1.0))
    if rows.size:
        full_area = min(48.0, (220.0 / membership.shape[1]) ** 2)  # shrink dots for large T
        sizes = full_area * (0.15 + 0.85 * membership[rows, cols])
        ax.scatter(cols, rows, s=sizes, facecolor=PREDICTED_EDGE, edgecolor="black", linewidth=0.4)
    if observed is not None:
        rows, cols = np.nonzero(observed & (membership == 0.0))
        if rows.size:
            size = min(60.0, (300.0 / membership.shape[1]) ** 2)
            ax.scatter(cols, rows, s=size, marker="x", color=VIOLATION_COLOR, linewidth=2.0)


def _overlay_legend(fig: Figure, ncol: int = 3) -> None:
    handles = [
        Patch(facecolor="none", edgecolor="black", label="predicted in every sample"),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="none",
            markerfacecolor="white",
            markeredgecolor="black",
            label="predicted in some samples (size = share)",
        ),
        Line2D(
            [],
            [],
            marker="x",
            linestyle="none",
            color=VIOLATION_COLOR,
            markeredgewidth=2,
            label="violation: observed, never predicted",
        ),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False, fontsize=9)


def decodability_grid(
    score: np.ndarray,
    membership: np.ndarray,
    observed: np.ndarray | None = None,
    *,
    score_name: str = "R²",
    instrument: str = "decodability",
    probe: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    sets: str = sets_phrase(INFOFLOW),
) -> Figure:
    """One heatmap per layer of an aggregate score (R², flow-set share), predicted membership
    overlaid.

    score: float [L+1, T+1, T] (layer, token, position); membership: float [L+1, T+1, T]
    fraction of samples in which s ∈ I_pred(t, l); observed: bool [L+1, T+1, T] aggregate
    observed sets, used to mark violations. x = position s, y = token t (CLS last).
    instrument, probe: name the instrument in the title and colour bar
    (:func:`instrument_label`, :func:`score_label`).
    """
    layers, tokens, positions = score.shape
    ncols = min(layers, PANELS_PER_ROW)
    nrows = int(np.ceil(layers / ncols))
    side = min(2.2 + 0.16 * positions, 4.8, MAX_FIGURE_WIDTH / ncols)
    fig = Figure(
        figsize=(ncols * side + 1.2, nrows * side * tokens / positions + 1.4), layout="constrained"
    )
    axes = fig.subplots(nrows, ncols, squeeze=False)
    image = None
    for layer, ax in enumerate(axes.flat):
        if layer >= layers:
            ax.set_axis_off()
            continue
        image = ax.imshow(
            score[layer],
            cmap=SCORE_CMAP,
            vmin=vmin,
            vmax=vmax,
            interpolation="nearest",
            aspect="equal",
        )
        _overlay_sets(ax, membership[layer], None if observed is None else observed[layer])
        ax.set_title(f"layer {layer}" + (" (embedding)" if layer == 0 else ""))
        ax.set_xlabel("input position s")
        ax.set_ylabel("token t")
        axis_ticks(ax, positions, "x")
        axis_ticks(ax, tokens, "y", token_labels(tokens))
    fig.colorbar(
        image, ax=axes, shrink=0.8, label=score_label(instrument, score_name, probe), extend="min"
    )
    _overlay_legend(fig, ncol=3 if ncols * side > 9 else 1)
    fig.suptitle(
        f"{instrument_label(instrument, probe)}: {score_name} of x(s) in token t's state, "
        f"per layer, with {sets}"
    )
    return fig


def cls_across_layers(
    score: np.ndarray,
    membership: np.ndarray,
    observed: np.ndarray | None = None,
    *,
    token: int | None = None,
    score_name: str = "R²",
    instrument: str = "decodability",
    probe: str | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    sets: str = sets_phrase(INFOFLOW),
) -> Figure:
    """One token's row (default CLS) across layers: layer on y (0 at the bottom), s on x.

    score, membership: [L+1, T+1, T]; observed: bool [L+1, T+1, T] or None; instrument,
    probe: named in the title and colour bar; sets: what ``membership`` is, in words.
    """
    layers, tokens, positions = score.shape
    token = tokens - 1 if token is None else token
    fig = Figure(figsize=(2.5 + 0.32 * positions, 1.6 + 0.5 * layers), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(
        score[:, token, :],
        cmap=SCORE_CMAP,
        vmin=vmin,
        vmax=vmax,
        origin="lower",
        interpolation="nearest",
        aspect="auto",
    )
    _overlay_sets(ax, membership[:, token, :], None if observed is None else observed[:, token, :])
    axis_ticks(ax, positions, "x")
    ax.set_yticks(range(layers), [f"{layer}" for layer in range(layers)])
    ax.set_xlabel("input position s")
    ax.set_ylabel("layer l")
    name = "CLS" if token == tokens - 1 else f"token {token}"
    ax.set_title(
        f"{instrument_label(instrument, probe)}: {name}'s {score_name} of x(s) by layer, "
        f"with {sets}"
    )
    fig.colorbar(image, ax=ax, label=score_label(instrument, score_name, probe), extend="min")
    _overlay_legend(fig, ncol=1)
    return fig
