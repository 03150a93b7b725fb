"""Report figures. Every function returns a matplotlib ``Figure`` and never shows it.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot state), so they
are safe in threads and on headless machines; save them with ``fig.savefig``.
Axes: x = input position s (0-based, data positions only), y = token t (CLS = T) or
layer l (0 = embedding), as in docs/conventions.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from infoprobe.compare.agreement import TauSweep

PREDICTED_EDGE = "white"
VIOLATION_COLOR = "#e8112d"
OMISSION_COLOR = "#9aa5b1"
AGREE_COLOR = "#2a9d3f"
PREDICTED_COLOR = "#1f4e9c"
SCORE_CMAP = "viridis"
PANELS_PER_ROW = 4
MAX_FIGURE_WIDTH = 12.5
"""Inches: wider figures are shrunk by the page and their labels become unreadable."""
DISPLAY_NAMES = {"infoflow": "InfoFlow", "rollout": "attention rollout"}


def display_name(name: str) -> str:
    """How a predictor's name is shown ("infoflow" → "InfoFlow")."""
    return DISPLAY_NAMES.get(name, name)


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
        return f"{score_name}: share of h(t, l)'s variance when {how}"
    if name == "decodability":
        return f"{score_name} of a {probe or 'position'} probe reading x(s) from h(t, l)"
    return score_name


def _token_labels(n_tokens: int) -> list[str]:
    return [*map(str, range(n_tokens - 1)), "CLS"]


def _ticks(
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
) -> Figure:
    """One heatmap per layer of an aggregate score (R², mean flow), predicted membership overlaid.

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
        _ticks(ax, positions, "x")
        _ticks(ax, tokens, "y", _token_labels(tokens))
    fig.colorbar(
        image, ax=axes, shrink=0.8, label=score_label(instrument, score_name, probe), extend="min"
    )
    _overlay_legend(fig, ncol=3 if ncols * side > 9 else 1)
    fig.suptitle(
        f"{instrument_label(instrument, probe)}: {score_name} of x(s) in token t's state, "
        "per layer, with InfoFlow's sets"
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
) -> Figure:
    """One token's row (default CLS) across layers: layer on y (0 at the bottom), s on x.

    score, membership: [L+1, T+1, T]; observed: bool [L+1, T+1, T] or None; instrument,
    probe: named in the title and colour bar.
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
    _ticks(ax, positions, "x")
    ax.set_yticks(range(layers), [f"{layer}" for layer in range(layers)])
    ax.set_xlabel("input position s")
    ax.set_ylabel("layer l")
    name = "CLS" if token == tokens - 1 else f"token {token}"
    ax.set_title(f"{instrument_label(instrument, probe)}: {name}'s {score_name} of x(s) by layer")
    fig.colorbar(image, ax=ax, label=score_label(instrument, score_name, probe), extend="min")
    _overlay_legend(fig, ncol=1)
    return fig


SET_VIEW_CMAP = ListedColormap(["#ffffff", AGREE_COLOR, OMISSION_COLOR, VIOLATION_COLOR])
"""0 neither, 1 predicted and observed, 2 omission (predicted only), 3 violation."""


def set_agreement_codes(predicted: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Codes for :data:`SET_VIEW_CMAP`: bool [..., T] pairs → int [..., T] in {0, 1, 2, 3}."""
    return np.select(
        [predicted & observed, predicted & ~observed, ~predicted & observed], [1, 2, 3], 0
    )


def _set_panel(ax: Axes, image: np.ndarray, cmap: ListedColormap, vmax: int) -> None:
    ax.imshow(image, cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest", aspect="equal")
    rows, cols = image.shape
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="#d0d0d0", linewidth=0.4)
    ax.tick_params(which="minor", length=0)


def sample_view(
    predicted: np.ndarray,
    observed: np.ndarray | None = None,
    patterns: Sequence[np.ndarray] = (),
    *,
    sample: int | None = None,
    extra_sets: Mapping[str, np.ndarray] | None = None,
    instrument: str = "flow",
) -> Figure:
    """Predicted vs observed sets of one sample, beside the attention pattern of each head.

    predicted: bool [L+1, T+1, T+1] (layer, token, position) of this sample; observed:
    bool [L+1, T+1, T] or None; patterns: per block b, float [h_b, T+1, T+1] (query, key),
    drawn in the row of layer b+1 (the layer that block produces); extra_sets: other
    predictors' sets of this sample, name → bool [L+1, T+1, T+1], drawn like ``predicted``;
    instrument: the one that observed ``observed`` (named in the titles).
    Rows: layers 0..L; x = position s, y = token t.
    """
    layers, tokens, _ = predicted.shape
    positions = tokens - 1
    set_columns: dict[str, np.ndarray] = {"predicted (InfoFlow)": predicted[..., :positions]}
    for name, sets in (extra_sets or {}).items():
        set_columns[f"predicted ({display_name(name)})"] = sets[..., :positions]
    max_heads = max((p.shape[0] for p in patterns), default=0) if layers > 1 else 0
    attention_image = None
    ncols = len(set_columns) + (observed is not None) + max_heads
    panel = min(1.0 + 0.17 * tokens, MAX_FIGURE_WIDTH / ncols)
    fig = Figure(figsize=(ncols * panel + 0.8, layers * panel + 1.0), layout="constrained")
    axes = fig.subplots(layers, ncols, squeeze=False)
    for layer in range(layers):
        col = _draw_set_row(axes[layer], layer, set_columns, predicted, observed, instrument)
        block = layer - 1
        for head in range(max_heads):
            image = _draw_head(axes[layer, col + head], patterns, block, head, tokens)
            attention_image = image or attention_image
    for ax in axes[-1, :]:
        if ax.axison:
            ax.set_xlabel("position s (key)")
    if max_heads:
        fig.colorbar(
            attention_image, ax=axes[1:, -max_heads:], shrink=0.7, label="attention weight"
        )
    _set_view_legend(fig, ncols)
    title = "one sample" if sample is None else f"sample {sample}"
    seen = "" if observed is None else f", observed by {instrument_label(instrument)}"
    fig.suptitle(
        f"{title}: InfoFlow's predicted sets{seen}, per layer; attention patterns "
        "(rows = query token, columns = key)"
    )
    return fig


def _draw_set_row(
    row: np.ndarray,
    layer: int,
    set_columns: Mapping[str, np.ndarray],
    predicted: np.ndarray,
    observed: np.ndarray | None,
    instrument: str = "flow",
) -> int:
    """One layer's set panels (each predictor, then observed vs InfoFlow) in the axes
    ``row``; returns the number of columns drawn."""
    tokens = predicted.shape[1]
    positions = tokens - 1
    col = 0
    for name, sets in set_columns.items():
        ax = row[col]
        _set_panel(ax, sets[layer].astype(int), ListedColormap(["#ffffff", PREDICTED_COLOR]), 1)
        ax.set_title(name, fontsize=9)
        col += 1
    if observed is not None:
        ax = row[col]
        codes = set_agreement_codes(predicted[layer, :, :positions], observed[layer])
        _set_panel(ax, codes, SET_VIEW_CMAP, 3)
        ax.set_title(f"{instrument} vs InfoFlow", fontsize=9)
        col += 1
    labels = _token_labels(tokens)
    for ax in row[:col]:
        _ticks(ax, positions, "x", most=8)
        _ticks(ax, tokens, "y", labels, most=8)
    row[0].set_ylabel(f"layer {layer}\ntoken t")
    return col


def _draw_head(ax: Axes, patterns: Sequence[np.ndarray], block: int, head: int, tokens: int):
    """Head ``head`` of block ``block``'s pattern [T+1, T+1] in ``ax`` (axis off where
    there is none); returns the image, or None."""
    if block < 0 or head >= patterns[block].shape[0]:
        ax.set_axis_off()
        return None
    image = ax.imshow(
        patterns[block][head], cmap="magma", vmin=0.0, vmax=1.0, interpolation="nearest",
        aspect="equal",
    )  # fmt: skip
    ax.set_title(f"block {block} head {head}", fontsize=9)
    labels = _token_labels(tokens)
    _ticks(ax, tokens, "x", labels, most=8)
    _ticks(ax, tokens, "y", labels, most=8)
    return image


def _set_view_legend(fig: Figure, ncols: int) -> None:
    handles = [
        Patch(color=PREDICTED_COLOR, label="predicted"),
        Patch(color=AGREE_COLOR, label="predicted and observed"),
        Patch(color=OMISSION_COLOR, label="omission: predicted, not observed"),
        Patch(color=VIOLATION_COLOR, label="violation: observed, not predicted"),
    ]
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=4 if ncols >= 4 else 2,
        frameon=False,
        fontsize=9,
    )


SWEEP_METRICS = (
    ("precision", "precision (observed that are predicted)"),
    ("recall", "recall (predicted that are observed)"),
    ("violation_rate", "violation rate (non-predicted observed)"),
)


def tau_sweep_figure(
    sweeps: Mapping[str, TauSweep],
    *,
    value_name: str = "τ",
    instrument: str = "flow",
    score_name: str = "score",
    probe: str | None = None,
) -> Figure:
    """Precision, recall and violation rate against τ, one line per (predictor, layer).

    sweeps: predictor name → :class:`~infoprobe.compare.agreement.TauSweep` (agreement [k, L+1]).
    Colour = layer, line style = predictor; the dashed vertical line marks the fixed τ.
    instrument, score_name: what was thresholded (named in the title).
    """
    fig = Figure(figsize=(13.0, 4.0), layout="constrained")
    axes = fig.subplots(1, len(SWEEP_METRICS), sharex=True)
    styles = ("-", "--", ":", "-.")
    colors = [f"C{i}" for i in range(10)]
    handles = []
    for p_index, (name, sweep) in enumerate(sweeps.items()):
        style = styles[p_index % len(styles)]
        for layer in range(sweep.agreement.agree.shape[1]):
            for ax, (metric, _) in zip(axes, SWEEP_METRICS, strict=True):
                ax.plot(
                    sweep.taus,
                    getattr(sweep.agreement, metric)[:, layer],
                    style,
                    color=colors[layer % 10],
                    linewidth=1.6,
                )
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle=style,
                    color=colors[layer % 10],
                    label=f"{display_name(name)}, layer {layer}",
                )
            )
        if sweep.fixed_tau is not None:
            for ax in axes:
                ax.axvline(sweep.fixed_tau, color="black", linestyle=(0, (4, 3)), linewidth=1)
    first = next(iter(sweeps.values()))
    for ax, (_, label) in zip(axes, SWEEP_METRICS, strict=True):
        ax.set_title(label, fontsize=10)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        taus = first.taus
        if taus.min() > 0 and taus.max() / taus.min() > 20:
            ax.set_xscale("log")
        relation = "<" if first.member_when == "below" else "≥"
        ax.set_xlabel(f"{value_name}: observed when the value {relation} τ")
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    predictors = " and ".join(display_name(n) for n in sweeps)
    fig.suptitle(
        f"{instrument_label(instrument, probe)} against {predictors}: agreement as the threshold τ "
        f"on {score_name} moves (dashed line: the fixed τ)"
    )
    return fig


def training_curve(history: Sequence[Mapping[str, float]]) -> Figure:
    """Validation NMSE against training step, log y.

    history: dicts with ``step`` and ``val_nmse`` (entries lacking ``val_nmse`` skipped).
    Raises ValueError when no entry has both.
    """
    points = [
        (h["step"], h["val_nmse"]) for h in history if "step" in h and h.get("val_nmse") is not None
    ]
    if not points:
        raise ValueError("training history: no entry with both 'step' and 'val_nmse'")
    steps, nmse = (np.asarray(v, dtype=np.float64) for v in zip(*points, strict=True))
    fig = Figure(figsize=(6.5, 3.6), layout="constrained")
    ax = fig.subplots()
    ax.plot(steps, nmse, marker="o", markersize=3, linewidth=1.5, color=PREDICTED_COLOR)
    best = int(np.argmin(nmse))
    ax.scatter(
        [steps[best]],
        [nmse[best]],
        s=50,
        color=VIOLATION_COLOR,
        zorder=3,
        label=f"best {nmse[best]:.3g} at step {int(steps[best])}",
    )
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("validation NMSE (1 = constant predictor)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(frameon=False)
    ax.set_title("Training curve")
    return fig


ROC_STYLES = {"infoflow": ("-", PREDICTED_COLOR), "rollout": ("--", "#e07b00")}
CONTROL_STYLE = (":", "#7a7a7a")
MAX_CURVE_POINTS = 2000


def _thin(fpr: np.ndarray, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most MAX_CURVE_POINTS points of a curve, both ends kept."""
    if fpr.size <= MAX_CURVE_POINTS:
        return fpr, tpr
    keep = np.unique(np.linspace(0, fpr.size - 1, MAX_CURVE_POINTS).astype(int))
    return fpr[keep], tpr[keep]


def answer_figure(
    layers: Sequence[int],
    curves: Sequence[Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray, float]]],
    distributions: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    instrument: str,
    score_name: str,
    tau: float | None = None,
    log_scale: bool = True,
) -> Figure:
    """Per layer, does the instrument pick out InfoFlow's predicted positions, sample by
    sample? Top row: ROC curves over every (sample, token, position s ≠ t) cell of the
    layer; bottom row: the raw per-sample score at InfoFlow's predicted positions against
    the others (density), with the fixed threshold τ.

    layers: the layers drawn; curves[i]: (predictor, instrument) → (fpr, tpr, AUROC) of
    layers[i], the instrument of a control labelled as such; distributions[i]: (scores
    at predicted cells, scores at the other cells), raw (errors or flow g).
    """
    ncols = max(1, len(layers))
    width = min(MAX_FIGURE_WIDTH, 1.0 + 3.9 * ncols)
    fig = Figure(figsize=(width, 7.4), layout="constrained")
    axes = fig.subplots(2, ncols, squeeze=False)
    label = instrument_label(instrument)
    for col, layer in enumerate(layers):
        ax = axes[0, col]
        ax.plot([0, 1], [0, 1], color="#c8c8c8", linewidth=1)
        for (predictor, inst), (fpr, tpr, area) in curves[col].items():
            control = inst != instrument
            style, color = CONTROL_STYLE if control else ROC_STYLES.get(predictor, ("-.", "C3"))
            who = f"{display_name(predictor)} vs {'random-init ' if control else ''}{instrument}"
            x, y = _thin(fpr, tpr)
            ax.plot(x, y, style, color=color, linewidth=2, label=f"{who}: AUROC {area:.3f}")
        ax.set_title(f"layer {layer}: ROC", fontsize=10)
        ax.set_xlabel("false-positive rate (other positions)")
        ax.set_ylabel("true-positive rate (predicted positions)")
        ax.set_aspect("equal")
        ax.legend(loc="lower right", fontsize=7.5, frameon=False)
        ax = axes[1, col]
        predicted, other = distributions[col]
        values = np.concatenate([predicted, other])
        if log_scale:
            floor = max(float(values[values > 0].min()) if (values > 0).any() else 1e-6, 1e-6)
            predicted, other = np.maximum(predicted, floor), np.maximum(other, floor)
            bins = np.geomspace(floor, max(float(values.max()), floor * 10), 41)
            ax.set_xscale("log")
        else:
            bins = np.linspace(float(values.min()), float(values.max()), 41)
        for part, color, what in ((predicted, PREDICTED_COLOR, "predicted by InfoFlow"),
                                  (other, OMISSION_COLOR, "other positions")):  # fmt: skip
            if part.size:
                share = np.full(part.size, 1.0 / part.size)  # each group sums to 1
                ax.hist(part, bins=bins, weights=share, histtype="stepfilled", alpha=0.45,
                        color=color, label=f"{what} ({part.size} cells)")  # fmt: skip
        if tau is not None:
            dashes = (0, (4, 3))
            ax.axvline(tau, color="black", linestyle=dashes, linewidth=1, label=f"τ = {tau:.3g}")
        ax.set_title(f"layer {layer}: {score_name} per cell", fontsize=10)
        ax.set_xlabel(score_name)
        ax.set_ylabel("share of the group's cells")
        ax.legend(fontsize=7.5, frameon=False)
    fig.suptitle(
        f"{label}: does it single out InfoFlow's predicted positions? Per sample, own "
        "positions left out"
    )
    return fig
