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
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from infoprobe import __version__
from infoprobe.agreement import TauSweep
from infoprobe.atomic import atomic_output
from infoprobe.compare import CAVEAT, Comparison, Crosstab, Observations
from infoprobe.header import make_header
from infoprobe.jsonable import jsonable
from infoprobe.orientation import recorded_orientation
from infoprobe.report import figures
from infoprobe.report.html import render_html
from infoprobe.sources import Compared, Sources

SUMMARY = "summary.json"
HTML = "report.html"
FORMAT = "infoprobe.report"
SCHEMA_VERSION = 3
"""3: the common header of docs/conventions.md (``schema_version`` instead of
``format_version``, ``created`` in UTC ``...Z``, ``axes``)."""
AXES = ("layer", "token", "position", "tau")
"""Axes of the comparison arrays summary.json holds (per layer, per token, membership
[layer, token, position], threshold sweeps)."""


class ReportInputError(ValueError):
    """Report inputs that do not fit together (shapes, sample indices, missing parts)."""


@dataclass
class ReportInputs:
    """Everything a report shows.

    comparisons: instrument → predictor → :class:`~infoprobe.compare.Comparison` (each
    holds its instrument's :class:`~infoprobe.compare.Observations`, arrays for figures);
    InfoFlow is predictor "infoflow", the first instrument is the primary one.
    predicted: bool [L+1, n, T+1, T+1] InfoFlow sets, samples aligned with observations.
    rollout_sets: optional second predictor's sets [L+1, n, T+1, T+1] (per-sample view).
    table: flow × decodability per sample (:class:`~infoprobe.compare.Crosstab`) or None.
    heads: the observed program (anything with ``to_dict()``, see infoprobe.heads) or None.
    headline: one line per layer (every instrument's AUROC, controls beside).
    patterns: per block b, float [k, h_b, T+1, T+1] attention patterns of k samples;
    pattern_samples: their indices on the n axis (length k). Empty: no attention panels.
    n_sample_views: how many per-sample figures (the first of pattern_samples, else 0..).
    history: training history, dicts with ``step`` and ``val_nmse`` (checkpoint.json).
    provenance: input label → its provenance dict (every input file), into summary.json.
    title, notes: page title and extra facts shown at the top (task, architecture, ...).
    """

    comparisons: Mapping[str, Mapping[str, Comparison]]
    predicted: np.ndarray
    rollout_sets: np.ndarray | None = None
    table: Crosstab | None = None
    heads: Any = None
    headline: Sequence[str] = ()
    patterns: Sequence[np.ndarray] = ()
    pattern_samples: Sequence[int] = ()
    n_sample_views: int = 3
    history: Sequence[Mapping[str, Any]] = ()
    provenance: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    title: str = "infoprobe report"
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.predicted = np.asarray(self.predicted)
        if not self.comparisons or any("infoflow" not in c for c in self.comparisons.values()):
            raise ReportInputError(
                "comparisons: expected instrument → predictor → Comparison with predictor "
                f"'infoflow' for every instrument, got {_layout(self.comparisons)}"
            )
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

    @property
    def primary(self) -> Comparison:
        """InfoFlow against the first instrument."""
        return next(iter(self.comparisons.values()))["infoflow"]

    def instruments(self) -> dict[str, Observations]:
        """Instrument name → its observations."""
        return {k: v["infoflow"].observations for k, v in self.comparisons.items()}

    def sample_indices(self) -> list[int]:
        """Samples drawn in the per-sample view."""
        pool = list(self.pattern_samples) or list(range(self.predicted.shape[1]))
        return [int(i) for i in pool[: self.n_sample_views]]


def _layout(comparisons: Any) -> str:
    try:
        return str({k: sorted(v) for k, v in dict(comparisons).items()})
    except (TypeError, ValueError, AttributeError):
        return repr(type(comparisons))


def from_sources(
    sources: Sources,
    compared: Compared,
    *,
    history: Sequence[Mapping[str, Any]] | None = None,
    n_sample_views: int = 3,
    title: str | None = None,
    notes: Mapping[str, Any] | None = None,
    extra_provenance: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReportInputs:
    """Report inputs from loaded :class:`~infoprobe.sources.Sources` and what was compared."""
    shown = list(range(min(n_sample_views, sources.predicted.shape[1])))
    task, arch = sources.sets_file.task, sources.sets_file.arch
    default_notes = {
        "task": task.get("name"),
        "task parameters": ", ".join(f"{k}={v}" for k, v in task.get("params", {}).items()),
        "heads per layer": ", ".join(map(str, arch.get("heads", []))) or None,
        "InfoFlow verdict": sources.sets_file.prediction.get("verdict"),
        "comparison orientation": recorded_orientation(
            sources.sets_file.provenance.get("orientation")
        ),
        "samples compared": int(sources.predicted.shape[1]),
        "instruments": ", ".join(sources.instruments),
        "alignment": "; ".join(sources.notes) or None,
    }
    return ReportInputs(
        comparisons=compared.comparisons,
        predicted=sources.predicted,
        rollout_sets=None if compared.rollout is None else compared.rollout.sets,
        table=compared.table,
        heads=compared.heads,
        headline=compared.headline(),
        patterns=[] if sources.patterns is None else [p[shown] for p in sources.patterns],
        pattern_samples=shown if sources.patterns is not None else [],
        n_sample_views=n_sample_views,
        history=history or [],
        provenance={**sources.provenance, **(extra_provenance or {})},
        title=title or f"infoprobe report: {task.get('name', 'task')}",
        notes={**{k: v for k, v in default_notes.items() if v is not None}, **(notes or {})},
    )


def inputs_sha256(inputs: ReportInputs) -> str:
    """Content hash of the arrays a report is made of (shapes, dtypes and bytes)."""
    digest = hashlib.sha256()
    arrays: list[np.ndarray | None] = [inputs.predicted]
    for obs in inputs.instruments().values():
        arrays += [obs.per_sample, obs.sample_score, obs.aggregate, obs.score]
    arrays += [inputs.rollout_sets, *inputs.patterns]
    for array in arrays:
        if array is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _sweeps(by_predictor: Mapping[str, Comparison]) -> tuple[dict[str, TauSweep], str]:
    """Predictor → the "others" sweep of one instrument (per-sample when it has one)."""
    for part, what in (("per_sample", "per-sample"), ("aggregate", "aggregate")):
        found = {
            name: getattr(c, part)["others"].sweep
            for name, c in by_predictor.items()
            if getattr(c, part) is not None and getattr(c, part)["others"].sweep is not None
        }
        if found:
            return found, what
    return {}, ""


def _file_name(instrument: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in instrument).strip("_")


def build_figures(inputs: ReportInputs) -> dict[str, tuple[Figure, str, str]]:
    """Figure name → (figure, title, caption) for every figure the inputs allow."""
    out: dict[str, tuple[Figure, str, str]] = {}
    membership = inputs.primary.membership
    marks = (
        "White outlines: positions InfoFlow predicts in every sample; white dots: in "
        "some samples (area = share); red crosses: violations (observed, never predicted)."
    )
    for name, obs in inputs.instruments().items():
        if obs.score is None or obs.control_of is not None:
            continue
        stem = _file_name(name)
        out[f"{stem}_grid"] = (
            figures.decodability_grid(
                obs.score, membership, obs.aggregate, score_name=obs.score_name
            ),
            f"{name.capitalize()} grid",
            f"{obs.score_name} ({name}) for input position s (x axis) in token t's state "
            f"(y axis) at each layer. {marks} Observed is not used.",
        )
        out[f"{stem}_cls_across_layers"] = (
            figures.cls_across_layers(
                obs.score, membership, obs.aggregate, score_name=obs.score_name
            ),
            f"CLS across layers ({name})",
            f"The CLS token's row of the {name} grid at every layer (layer on y, position "
            f"on x). {marks}",
        )
    primary = inputs.primary.observations
    for row, sample in enumerate(inputs.sample_indices()):
        extra = None
        if inputs.rollout_sets is not None:
            extra = {"rollout": inputs.rollout_sets[:, sample]}
        patterns = [p[row] for p in inputs.patterns] if inputs.patterns else ()
        observed = None if primary.per_sample is None else primary.per_sample[:, sample]
        out[f"sample_{sample}"] = (
            figures.sample_view(
                inputs.predicted[:, sample], observed, patterns, sample=sample, extra_sets=extra
            ),
            f"Sample {sample}",
            f"Per-sample sets for one compared sample: InfoFlow's predicted set (blue), the "
            f"set observed by {primary.instrument} against it (green agree, grey omission, "
            "red violation) and the attention pattern of every head of the block producing "
            "that layer.",
        )
    for name, by_predictor in inputs.comparisons.items():
        sweeps, what = _sweeps(by_predictor)
        if sweeps:
            out[f"tau_sweep_{_file_name(name)}"] = (
                figures.tau_sweep_figure(sweeps),
                f"Threshold sweep ({name})",
                f"Precision, recall and violation rate of {name} ({what}, own positions "
                "left out) as the threshold τ moves, per layer (colour) and predictor (line "
                "style); the dashed line is the τ fixed before the comparison.",
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
            **make_header(FORMAT, SCHEMA_VERSION, AXES),
            "title": inputs.title,
            "notes": dict(inputs.notes),
            "caveat": CAVEAT,
            "headline": list(inputs.headline),
            "comparisons": {
                inst: {pred: c.to_dict() for pred, c in by_pred.items()}
                for inst, by_pred in inputs.comparisons.items()
            },
            "crosstab": None if inputs.table is None else inputs.table.to_dict(),
            "heads": None if inputs.heads is None else inputs.heads.to_dict(),
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
    with atomic_output(
        out_dir, overwrite=overwrite, directory=True, what="report folder", kind=FORMAT
    ) as tmp:
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
