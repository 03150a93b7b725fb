"""The per-sample figure: one sample's predicted and observed sets, layer by layer, beside
the attention pattern of every head.

Built with ``matplotlib.figure.Figure`` directly (no pyplot state), like every report
figure (:mod:`infoprobe.report.figures`). x = input position s, y = token t (CLS = T).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from infoprobe.compare.predictors import INFOFLOW, display_name, sets_phrase
from infoprobe.report.figures import (
    AGREE_COLOR,
    MAX_FIGURE_WIDTH,
    OMISSION_COLOR,
    PREDICTED_COLOR,
    VIOLATION_COLOR,
    axis_ticks,
    instrument_label,
    token_labels,
)

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
    predictor: str = INFOFLOW,
) -> Figure:
    """Predicted vs observed sets of one sample, beside the attention pattern of each head.

    predicted: bool [L+1, T+1, T+1] (layer, token, position) of this sample; observed:
    bool [L+1, T+1, T] or None; patterns: per block b, float [h_b, T+1, T+1] (query, key),
    drawn in the row of layer b+1 (the layer that block produces); extra_sets: other
    predictors' sets of this sample, name → bool [L+1, T+1, T+1], drawn like ``predicted``;
    instrument: the one that observed ``observed`` (named in the titles); predictor: whose
    sets ``predicted`` are (``infoflow`` or ``your_sets``).
    Rows: layers 0..L; x = position s, y = token t.
    """
    layers, tokens, _ = predicted.shape
    positions = tokens - 1
    who = display_name(predictor)
    set_columns: dict[str, np.ndarray] = {f"predicted ({who})": predicted[..., :positions]}
    for name, sets in (extra_sets or {}).items():
        set_columns[f"predicted ({display_name(name)})"] = sets[..., :positions]
    max_heads = max((p.shape[0] for p in patterns), default=0) if layers > 1 else 0
    attention_image = None
    ncols = len(set_columns) + (observed is not None) + max_heads
    panel = min(1.0 + 0.17 * tokens, MAX_FIGURE_WIDTH / ncols)
    fig = Figure(figsize=(ncols * panel + 0.8, layers * panel + 1.0), layout="constrained")
    axes = fig.subplots(layers, ncols, squeeze=False)
    for layer in range(layers):
        col = _draw_set_row(
            axes[layer], layer, set_columns, predicted, observed, f"{instrument} vs {who}"
        )
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
        f"{title}: {sets_phrase(predictor)}{seen}, per layer; attention patterns "
        "(rows = query token, columns = key)"
    )
    return fig


def _draw_set_row(
    row: np.ndarray,
    layer: int,
    set_columns: Mapping[str, np.ndarray],
    predicted: np.ndarray,
    observed: np.ndarray | None,
    observed_title: str = "flow vs InfoFlow",
) -> int:
    """One layer's set panels (each predictor, then the observed set against the predicted
    one, titled ``observed_title``) in the axes ``row``; returns the number of columns drawn."""
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
        ax.set_title(observed_title, fontsize=9)
        col += 1
    labels = token_labels(tokens)
    for ax in row[:col]:
        axis_ticks(ax, positions, "x", most=8)
        axis_ticks(ax, tokens, "y", labels, most=8)
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
    labels = token_labels(tokens)
    axis_ticks(ax, tokens, "x", labels, most=8)
    axis_ticks(ax, tokens, "y", labels, most=8)
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
