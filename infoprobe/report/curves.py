"""Report figures drawn as curves: ROC curves and score distributions (the answer figure),
threshold sweeps and the training curve.

Built with ``matplotlib.figure.Figure`` directly (no pyplot state), like every report
figure (:mod:`infoprobe.report.figures`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from infoprobe.compare.agreement import TauSweep
from infoprobe.compare.predictors import INFOFLOW, ROLLOUT, YOUR_SETS, display_name, sets_phrase
from infoprobe.report.figures import (
    MAX_FIGURE_WIDTH,
    OMISSION_COLOR,
    PREDICTED_COLOR,
    VIOLATION_COLOR,
    instrument_label,
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


ROC_STYLES = {
    INFOFLOW: ("-", PREDICTED_COLOR),
    YOUR_SETS: ("-", PREDICTED_COLOR),
    ROLLOUT: ("--", "#e07b00"),
}
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
    predictor: str = INFOFLOW,
) -> Figure:
    """Per layer, does the instrument pick out the predicted positions (``predictor``'s sets:
    InfoFlow's or yours), sample by
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
        for part, color, what in ((predicted, PREDICTED_COLOR, f"in {sets_phrase(predictor)}"),
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
        f"{label}: does it single out the positions in {sets_phrase(predictor)}? Per sample, own "
        "positions left out"
    )
    return fig
