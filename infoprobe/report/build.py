"""Write a report folder: ``summary.json``, one PNG per figure and ``report.html``.

The folder is assembled under ``NAME.tmp-<pid>`` and renamed onto ``NAME`` when complete.
Figures are rendered with matplotlib's Agg canvas (no display needed, no pyplot state).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from infoprobe import __version__
from infoprobe.atomic import atomic_output
from infoprobe.compare import CAVEAT, Comparison, Observations, TauSweep, jsonable
from infoprobe.report import figures
from infoprobe.report.html import render_html

SUMMARY = "summary.json"
HTML = "report.html"
FORMAT = "infoprobe.report"
FORMAT_VERSION = 1


class ReportInputError(ValueError):
    """Report inputs that do not fit together (shapes, sample indices, missing parts)."""


@dataclass
class ReportInputs:
    """Everything a report shows.

    comparison: InfoFlow's :class:`~infoprobe.compare.Comparison` with ``observations``.
    observations: the probes' :class:`~infoprobe.compare.Observations` (arrays for figures).
    predicted: bool [L+1, n, T+1, T+1] InfoFlow sets, samples aligned with observations.
    rollout / rollout_sets: optional second predictor (its Comparison, and its sets
    [L+1, n, T+1, T+1] for the per-sample view), shown beside InfoFlow.
    patterns: per block b, float [k, h_b, T+1, T+1] attention patterns of k samples;
    pattern_samples: their indices on the n axis (length k). Empty: no attention panels.
    n_sample_views: how many per-sample figures (the first of pattern_samples, else 0..).
    history: training history, dicts with ``step`` and ``val_nmse`` (checkpoint.json).
    provenance: input label → its provenance dict (every input file), into summary.json.
    title, notes: page title and extra facts shown at the top (task, architecture, ...).
    """

    comparison: Comparison
    observations: Observations
    predicted: np.ndarray
    rollout: Comparison | None = None
    rollout_sets: np.ndarray | None = None
    patterns: Sequence[np.ndarray] = ()
    pattern_samples: Sequence[int] = ()
    n_sample_views: int = 3
    history: Sequence[Mapping[str, Any]] = ()
    provenance: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    title: str = "infoprobe report"
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.predicted = np.asarray(self.predicted)
        layers, n, tokens, _ = self.predicted.shape
        if self.rollout_sets is not None and self.rollout_sets.shape != self.predicted.shape:
            raise ReportInputError(
                f"rollout_sets: expected shape {self.predicted.shape} like predicted, "
                f"got {self.rollout_sets.shape}"
            )
        if self.patterns:
            if len(self.patterns) != layers - 1:
                raise ReportInputError(
                    f"patterns: expected one array per block ({layers - 1}), "
                    f"got {len(self.patterns)}"
                )
            for block, pattern in enumerate(self.patterns):
                if pattern.shape[0] != len(self.pattern_samples) or pattern.shape[-1] != tokens:
                    raise ReportInputError(
                        f"patterns[{block}]: expected [{len(self.pattern_samples)}, h, {tokens}, "
                        f"{tokens}] (one row per pattern_samples entry), got {pattern.shape}"
                    )
        bad = [i for i in self.pattern_samples if not 0 <= int(i) < n]
        if bad:
            raise ReportInputError(f"pattern_samples: indices {bad} outside 0..{n - 1}")

    def comparisons(self) -> dict[str, Comparison]:
        """Predictor name → comparison, InfoFlow first."""
        found = {self.comparison.name: self.comparison}
        if self.rollout is not None:
            found[self.rollout.name] = self.rollout
        return found

    def sample_indices(self) -> list[int]:
        """Samples drawn in the per-sample view."""
        pool = list(self.pattern_samples) or list(range(self.predicted.shape[1]))
        return [int(i) for i in pool[: self.n_sample_views]]


def inputs_sha256(inputs: ReportInputs) -> str:
    """Content hash of the arrays a report is made of (shapes, dtypes and bytes)."""
    digest = hashlib.sha256()
    obs = inputs.observations
    arrays = [
        inputs.predicted,
        obs.per_sample,
        obs.errors,
        obs.aggregate,
        obs.score,
        inputs.rollout_sets,
        *inputs.patterns,
    ]
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _sweeps(comparisons: Mapping[str, Comparison]) -> tuple[dict[str, TauSweep], str]:
    per_sample = {
        n: c.per_sample.sweep
        for n, c in comparisons.items()
        if c.per_sample is not None and c.per_sample.sweep is not None
    }
    if per_sample:
        return per_sample, "per-sample error"
    aggregate = {
        n: c.aggregate.sweep
        for n, c in comparisons.items()
        if c.aggregate is not None and c.aggregate.sweep is not None
    }
    return aggregate, "aggregate score"


def build_figures(inputs: ReportInputs) -> dict[str, tuple[Figure, str, str]]:
    """Figure name → (figure, title, caption) for every figure the inputs allow."""
    obs, comp = inputs.observations, inputs.comparison
    out: dict[str, tuple[Figure, str, str]] = {}
    marks = (
        "White outlines: positions InfoFlow predicts in every sample; white dots: in "
        "some samples (area = share); red crosses: violations (decodable, never "
        "predicted)."
    )
    if obs.score is not None:
        out["decodability_grid"] = (
            figures.decodability_grid(
                obs.score, comp.membership, obs.aggregate, score_name=obs.score_name
            ),
            "Decodability grid",
            f"{obs.score_name} of a probe decoding x(s) (x axis) from token t's state (y axis) "
            f"at each layer. {marks} Decodable is not used.",
        )
        out["cls_across_layers"] = (
            figures.cls_across_layers(
                obs.score, comp.membership, obs.aggregate, score_name=obs.score_name
            ),
            "CLS across layers",
            f"The CLS token's row of the grid at every layer (layer on y, position on x). {marks}",
        )
    for row, sample in enumerate(inputs.sample_indices()):
        extra = None
        if inputs.rollout_sets is not None and inputs.rollout is not None:
            extra = {inputs.rollout.name: inputs.rollout_sets[:, sample]}
        patterns = [p[row] for p in inputs.patterns] if inputs.patterns else ()
        observed = None if obs.per_sample is None else obs.per_sample[:, sample]
        out[f"sample_{sample}"] = (
            figures.sample_view(
                inputs.predicted[:, sample], observed, patterns, sample=sample, extra_sets=extra
            ),
            f"Sample {sample}",
            "Per-sample sets for one test sample: InfoFlow's predicted set (blue), the "
            "observed set against it (green agree, grey omission, red violation) and the "
            "attention pattern of every head of the block producing that layer.",
        )
    sweeps, what = _sweeps(inputs.comparisons())
    if sweeps:
        out["tau_sweep"] = (
            figures.tau_sweep_figure(sweeps),
            "Threshold sweep",
            f"Precision, recall and violation rate as the {what} threshold τ moves, per "
            "layer (colour) and predictor (line style); the dashed line is the τ fixed "
            "before the comparison.",
        )
    if any(h.get("val_nmse") is not None for h in inputs.history):
        out["training_curve"] = (
            figures.training_curve(inputs.history),
            "Training curve",
            "Validation NMSE (1 = predicting a constant) against training step, log scale.",
        )
    return out


def render_png(fig: Figure, dpi: int = 110) -> bytes:
    """PNG bytes of a figure through the Agg canvas."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white", bbox_inches="tight")
    return buffer.getvalue()


def _training_summary(history: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not history:
        return None
    nmse = [h["val_nmse"] for h in history if h.get("val_nmse") is not None]
    return {
        "history": [dict(h) for h in history],
        "final_val_nmse": nmse[-1] if nmse else None,
        "best_val_nmse": min(nmse) if nmse else None,
    }


def build_summary(inputs: ReportInputs, figure_meta: Mapping[str, Mapping[str, str]]) -> dict:
    """The summary.json dict: every number, the verdicts, the caveat, provenance."""
    return jsonable(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "infoprobe_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "title": inputs.title,
            "notes": dict(inputs.notes),
            "caveat": CAVEAT,
            "comparisons": {n: c.to_dict() for n, c in inputs.comparisons().items()},
            "training": _training_summary(inputs.history),
            "figures": dict(figure_meta),
            "provenance": {
                **{k: dict(v) for k, v in inputs.provenance.items()},
                "report": {
                    "infoprobe_version": __version__,
                    "inputs_sha256": inputs_sha256(inputs),
                },
            },
        }
    )


def write_report(
    out_dir: str | Path, inputs: ReportInputs, *, overwrite: bool = False, dpi: int = 110
) -> Path:
    """Write ``summary.json``, ``<figure>.png`` and ``report.html`` into ``out_dir``.

    The folder is built as ``out_dir.tmp-<pid>`` and renamed when complete. Raises
    ``OutputExistsError`` if ``out_dir`` exists and ``overwrite`` is false. Returns the path
    of report.html.
    """
    out_dir = Path(out_dir)
    with atomic_output(out_dir, overwrite=overwrite, directory=True, what="report folder") as tmp:
        pngs: dict[str, bytes] = {}
        meta: dict[str, dict[str, str]] = {}
        for name, (fig, title, caption) in build_figures(inputs).items():
            pngs[name] = render_png(fig, dpi)
            (tmp / f"{name}.png").write_bytes(pngs[name])
            meta[name] = {"file": f"{name}.png", "title": title, "caption": caption}
        summary = build_summary(inputs, meta)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
        (tmp / HTML).write_text(render_html(summary, pngs), encoding="utf-8")
    return out_dir / HTML
