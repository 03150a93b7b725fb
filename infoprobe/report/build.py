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
from infoprobe.attention.orientation import recorded_orientation
from infoprobe.base.atomic import atomic_output
from infoprobe.base.errors import UserError
from infoprobe.base.header import make_header
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.agreement import TauSweep
from infoprobe.compare.core import CAVEAT, SetComparison
from infoprobe.compare.crosstab import Crosstab
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.sources import Compared, Sources
from infoprobe.infoflow import Architecture, predict
from infoprobe.report import answer, figures
from infoprobe.report.answer import ViolationSources
from infoprobe.report.html import render_html
from infoprobe.tasks import task_from_dict

SUMMARY = "summary.json"
HTML = "report.html"
FORMAT = "infoprobe.report"
SCHEMA_VERSION = 3
"""3: the common header of docs/conventions.md (``schema_version`` instead of
``format_version``, ``created`` in UTC ``...Z``, ``axes``)."""
AXES = ("layer", "token", "position", "tau")
"""Axes of the comparison arrays summary.json holds (per layer, per token, membership
[layer, token, position], threshold sweeps)."""


class ReportInputError(UserError):
    """Report inputs that do not fit together (shapes, sample indices, missing parts)."""


@dataclass
class ReportInputs:
    """Everything a report shows.

    comparisons: instrument → predictor → :class:`~infoprobe.compare.core.SetComparison` (each
    holds its instrument's :class:`~infoprobe.compare.observations.Observations`, for figures);
    InfoFlow is predictor "infoflow", the first instrument is the primary one.
    predicted: bool [L+1, n, T+1, T+1] InfoFlow sets, samples aligned with observations.
    rollout_sets: optional second predictor's sets [L+1, n, T+1, T+1] (per-sample view).
    table: flow × decodability per sample (:class:`~infoprobe.compare.crosstab.Crosstab`) or None.
    heads: the observed program (``to_dict()``: infoprobe.attention.program) or None.
    headline: one line per layer (every instrument's AUROC, controls beside).
    patterns: per block b, float [k, h_b, T+1, T+1] attention patterns of k samples;
    pattern_samples: their indices on the n axis (length k). Empty: no attention panels.
    n_sample_views: how many per-sample figures (the first of pattern_samples, else 0..).
    history: training history, dicts with ``step`` and ``val_nmse`` (checkpoint.json).
    provenance: input label → its provenance dict (every input file), into summary.json.
    title, notes: page title and extra facts shown at the top (task, architecture, ...).
    violations: where the primary instrument's violations of InfoFlow's sets come from
    (:func:`~infoprobe.report.answer.violation_sources` on every compared sample, with the
    attention patterns of all of them); None: counted from the inputs, without heads.
    probe: the probe family of the decodability instrument (named in titles).
    exponent: InfoFlow's cost exponent: ``alpha`` (α(T) in words), ``at_T`` (its value at
    the run's T), ``T``, ``E``, ``verdict``; None: not shown.
    """

    comparisons: Mapping[str, Mapping[str, SetComparison]]
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
    violations: ViolationSources | None = None
    probe: str | None = None
    exponent: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        self.predicted = np.asarray(self.predicted)
        if not self.comparisons or any("infoflow" not in c for c in self.comparisons.values()):
            raise ReportInputError(
                "comparisons: expected instrument → predictor → SetComparison with predictor "
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
    def primary(self) -> SetComparison:
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
    """Report inputs from loaded :class:`~infoprobe.compare.sources.Sources` and the comparison."""
    shown = list(range(min(n_sample_views, sources.predicted.shape[1])))
    task, arch = sources.sets_file.task, sources.sets_file.arch
    exponent = exponent_of(sources)
    primary = next(iter(sources.instruments.values()))
    violations = None
    if primary.per_sample is not None:
        violations = answer.violation_sources(
            sources.predicted, primary.per_sample, sources.patterns
        )
    default_notes = {
        "task": task.get("name"),
        "task parameters": ", ".join(f"{k}={v}" for k, v in task.get("params", {}).items()),
        "heads per layer": ", ".join(map(str, arch.get("heads", []))) or None,
        "InfoFlow verdict": exponent_text(exponent),
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
        violations=violations,
        probe=None if sources.results is None else _probe_family(sources),
        exponent=exponent,
    )


def _probe_family(sources: Sources) -> str | None:
    """The probe family whose scores the decodability instrument holds (matched by value)."""
    obs = sources.instruments.get("decodability")
    if obs is None or obs.score is None:
        return None
    for key, value in sources.results.scores.items():
        if key[0] == "positions" and np.array_equal(np.asarray(value, np.float64), obs.score):
            return str(key[1])
    return None


def exponent_of(sources: Sources) -> dict[str, Any] | None:
    """InfoFlow's verdict and cost exponent α at the run's T and E, from the predicted-sets
    file (recomputed with the engine when the file predates ``exponent_at_T``)."""
    prediction = sources.sets_file.prediction
    if not prediction.get("verdict"):
        return None
    T = int(sources.sets_file.x.shape[1])
    at_T = prediction.get("exponent_at_T")
    if at_T is None:
        a = sources.sets_file.arch
        arch = Architecture(
            heads=tuple(a["heads"]),
            d_model=int(a["d_model"]),
            d_heads=tuple(a["d_heads"]),
            positions=bool(a["positions"]),
        )
        task = task_from_dict(sources.sets_file.task)
        at_T = predict(task, arch, search_min_heads=False).exponent(T)
    return {
        "verdict": prediction["verdict"],
        "alpha": prediction.get("exponent"),
        "at_T": float(at_T),
        "T": T,
        "E": sources.sets_file.arch.get("d_model"),
    }


def exponent_text(exponent: Mapping[str, Any] | None) -> str | None:
    """E.g. "efficient: α = 1 at T=16, E=32 (α(T) = 1)"."""
    if not exponent:
        return None
    text = f"{exponent['verdict']}: α = {exponent['at_T']:.3g} at T={exponent['T']}"
    if exponent.get("E") is not None:
        text += f", E={exponent['E']}"
    if exponent.get("alpha") is not None:
        text += f" (α(T) = {exponent['alpha']})"
    return text


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


def _sweeps(by_predictor: Mapping[str, SetComparison]) -> tuple[dict[str, TauSweep], str]:
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


def _controls(inputs: ReportInputs) -> dict[str, Observations]:
    """Instrument → its control's observations (e.g. flow → flow on the random-init model)."""
    return {o.control_of: o for o in inputs.instruments().values() if o.control_of}


def violation_counts(inputs: ReportInputs) -> ViolationSources | None:
    """The inputs' violation sources, else counted from the primary instrument (no heads)."""
    if inputs.violations is not None:
        return inputs.violations
    primary = inputs.primary.observations
    if primary.per_sample is None:
        return None
    return answer.violation_sources(inputs.predicted, primary.per_sample)


def answer_layers(inputs: ReportInputs) -> list[int]:
    """Layers where InfoFlow predicts a position besides each token's own (layer 0 never)."""
    T = inputs.predicted.shape[-1] - 1
    others = scope_masks(T)["others"]
    return [
        layer
        for layer in range(inputs.predicted.shape[0])
        if (inputs.predicted[layer, :, :, :T] & others).any()
    ]


def _answer_figure(inputs: ReportInputs, name: str) -> Figure | None:
    """ROC curves and score distributions of one instrument against InfoFlow (and rollout,
    and InfoFlow against the instrument's control) at every layer of :func:`answer_layers`."""
    obs = inputs.instruments()[name]
    layers = answer_layers(inputs)
    if obs.sample_score is None or not layers:
        return None
    predictors = {"infoflow": inputs.predicted}
    if inputs.rollout_sets is not None:
        predictors["rollout"] = inputs.rollout_sets
    control = _controls(inputs).get(name)
    curves, distributions = [], []
    for layer in layers:
        found: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, float]] = {}
        pairs = [(p, sets, obs) for p, sets in predictors.items()]
        if control is not None and control.sample_score is not None:
            pairs.append(("infoflow", inputs.predicted, control))
        for predictor, sets, instrument in pairs:
            scores, labels = answer.layer_scores(instrument, sets, layer)
            if labels.all() or not labels.any():
                continue
            fpr, tpr = answer.roc_curve(scores, labels)
            found[predictor, instrument.instrument] = (fpr, tpr, float(np.trapezoid(tpr, fpr)))
        curves.append(found)
        raw, labels = answer.layer_scores(obs, inputs.predicted, layer)
        raw = raw if obs.member_when == "above" else -raw  # back to the raw score
        distributions.append((raw[labels], raw[~labels]))
    return figures.answer_figure(
        layers,
        curves,
        distributions,
        instrument=name,
        score_name=obs.sample_score_name,
        tau=obs.tau_sample,
    )


def _red_reason(inputs: ReportInputs, sample: int) -> str:
    """One sample panel's red cells per layer, and where the layer with the most of them
    gets its violations from (counted over every compared sample)."""
    obs = inputs.primary.observations
    sources = violation_counts(inputs)
    if obs.per_sample is None or sources is None:
        return ""
    T = obs.per_sample.shape[-1]
    others = scope_masks(T)["others"]
    red = obs.per_sample[:, sample] & ~inputs.predicted[:, sample, :, :T] & others
    counts = red.sum(axis=(1, 2))
    cells = int(others.sum())
    shares = ", ".join(
        f"layer {layer} {int(c)} of {cells} cells" for layer, c in enumerate(counts) if c
    )
    if not shares:
        return " No red cells in this sample."
    worst = int(np.argmax(counts))
    lines = answer.violation_lines(sources, _heads_dict(inputs), obs.word)
    why = next((line for line in lines if line.startswith(f"layer {worst}:")), "")
    return f" Red (violation) cells in this sample: {shares}. Why, over all samples: {why}."


def _heads_dict(inputs: ReportInputs) -> dict[str, Any] | None:
    return None if inputs.heads is None else inputs.heads.to_dict()


def build_figures(inputs: ReportInputs) -> dict[str, tuple[Figure, str, str]]:
    """Figure name → (figure, title, caption) for every figure the inputs allow."""
    out: dict[str, tuple[Figure, str, str]] = {}
    for name, obs in inputs.instruments().items():
        if obs.control_of is not None:
            continue
        fig = _answer_figure(inputs, name)
        if fig is not None:
            label = figures.instrument_label(name, inputs.probe if name == "decodability" else None)
            out[f"answer_{figures.file_stem(name)}"] = (
                fig,
                f"{label} at InfoFlow's predicted positions",
                f"Each (sample, token, position s ≠ t) cell of a layer is one item. Top: ROC "
                f"curves of {obs.sample_score_name} ranking InfoFlow's predicted positions "
                "above the others (InfoFlow solid, attention rollout dashed, InfoFlow against "
                "the same instrument on the random-init model dotted; the diagonal is "
                f"chance). Bottom: {obs.sample_score_name} at InfoFlow's predicted positions "
                "(blue) and at the others (grey), with the fixed threshold τ (dashed). "
                "Observed is not used.",
            )
    membership = inputs.primary.membership
    marks = (
        "White outlines: positions InfoFlow predicts in every sample; white dots: in "
        "some samples (area = share); red crosses: violations (observed, never predicted)."
    )
    for name, obs in inputs.instruments().items():
        if obs.score is None or obs.control_of is not None:
            continue
        stem = figures.file_stem(name)
        probe = inputs.probe if name == "decodability" else None
        label = figures.instrument_label(name, probe)
        out[f"{stem}_grid"] = (
            figures.decodability_grid(
                obs.score,
                membership,
                obs.aggregate,
                score_name=obs.score_name,
                instrument=name,
                probe=probe,
            ),
            f"{label}: {obs.score_name} grid",
            f"{obs.score_name} ({name}) for input position s (x axis) in token t's state "
            f"(y axis) at each layer. {marks} Observed is not used.",
        )
        out[f"{stem}_cls_across_layers"] = (
            figures.cls_across_layers(
                obs.score,
                membership,
                obs.aggregate,
                score_name=obs.score_name,
                instrument=name,
                probe=probe,
            ),
            f"{label}: CLS across layers",
            f"The CLS token's row of the {name} grid at every layer (layer on y, position "
            f"on x). {marks}",
        )
    primary = inputs.primary.observations
    for row, sample in enumerate(inputs.sample_indices()):
        reason = _red_reason(inputs, sample)
        extra = None
        if inputs.rollout_sets is not None:
            extra = {"rollout": inputs.rollout_sets[:, sample]}
        patterns = [p[row] for p in inputs.patterns] if inputs.patterns else ()
        observed = None if primary.per_sample is None else primary.per_sample[:, sample]
        out[f"sample_{sample}"] = (
            figures.sample_view(
                inputs.predicted[:, sample],
                observed,
                patterns,
                sample=sample,
                extra_sets=extra,
                instrument=primary.instrument,
            ),
            f"Sample {sample}: InfoFlow against {figures.instrument_label(primary.instrument)}",
            f"Per-sample sets for one compared sample: InfoFlow's predicted set (blue), the "
            f"set observed by {figures.instrument_label(primary.instrument)} against it "
            "(green agree, grey omission, red violation) and the attention pattern of every "
            f"head of the block producing that layer.{reason}",
        )
    for name, by_predictor in inputs.comparisons.items():
        sweeps, what = _sweeps(by_predictor)
        if sweeps:
            obs = next(iter(by_predictor.values())).observations
            probe = inputs.probe if name == "decodability" else None
            score = obs.sample_score_name if what == "per-sample" else obs.score_name
            out[f"tau_sweep_{figures.file_stem(name)}"] = (
                figures.tau_sweep_figure(sweeps, instrument=name, score_name=score, probe=probe),
                f"{figures.instrument_label(name, probe)}: threshold sweep",
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


def _per_layer(comparison: SetComparison, metric: str) -> list[float | None]:
    """A per-layer rate of a comparison (per-sample counts, else aggregate), own left out."""
    for part in (comparison.per_sample, comparison.aggregate):
        if part is not None and part["others"].per_layer is not None:
            return [float(v) for v in getattr(part["others"].per_layer, metric)]
    return [None] * (comparison.n_layers + 1)


def build_answer(inputs: ReportInputs) -> dict[str, Any]:
    """What the report leads with (summary.json ``answer``): per instrument and layer the
    AUROC and violation rate of InfoFlow, rollout and InfoFlow against the instrument's
    control; where the primary instrument's violations come from; what the fixed
    per-sample thresholds pass; InfoFlow's verdict and exponent; the headline in words."""
    controls = {c: name for name, obs in inputs.instruments().items() if (c := obs.control_of)}
    n_layer_axis = inputs.predicted.shape[0]
    layers = answer_layers(inputs)
    instruments: dict[str, Any] = {}
    for name, by_predictor in inputs.comparisons.items():
        obs = by_predictor["infoflow"].observations
        if obs.control_of is not None:
            continue
        control = inputs.comparisons.get(controls.get(name, ""), {}).get("infoflow")
        check = answer.threshold_check(obs, inputs.predicted)
        by_layer = range(n_layer_axis)
        probe = inputs.probe if name == "decodability" else None
        entry: dict[str, Any] = {
            "label": figures.instrument_label(name, probe),
            "auroc": {p: [c.auroc(layer) for layer in by_layer] for p, c in by_predictor.items()},
            "violation_rate": {p: _per_layer(c, "violation_rate") for p, c in by_predictor.items()},
            "recall": {p: _per_layer(c, "recall") for p, c in by_predictor.items()},
            "control": None if control is None else control.instrument,
            "control_auroc": None if control is None else [control.auroc(x) for x in by_layer],
            "threshold": None if check is None else check.to_dict(),
            "threshold_lines": [],
        }
        if check is not None:
            ours = by_predictor["infoflow"]
            entry["threshold_lines"] = [
                answer.threshold_line(check, layer, ours.auroc(layer), obs.word) for layer in layers
            ]
        instruments[name] = entry
    primary = next(iter(instruments), None)
    sources = violation_counts(inputs)
    word = inputs.primary.observations.word
    return jsonable(
        {
            "primary": primary,
            "layers": layers,
            "exponent": None if inputs.exponent is None else dict(inputs.exponent),
            "verdict": exponent_text(inputs.exponent),
            "instruments": instruments,
            "violations": None if sources is None else sources.to_dict(),
            "violation_lines": []
            if sources is None
            else answer.violation_lines(sources, _heads_dict(inputs), word),
            "lines": _answer_lines(instruments.get(primary), layers),
            "rollout_lines": _rollout_lines(instruments.get(primary), layers),
        }
    )


def _answer_lines(entry: Mapping[str, Any] | None, layers: Sequence[int]) -> list[str]:
    """One sentence per layer: AUROC of InfoFlow, its control and rollout, violation rates."""
    if entry is None:
        return []
    out = []
    for layer in layers:
        auroc = entry["auroc"]["infoflow"][layer]
        extra = []
        if entry["control_auroc"] is not None:
            extra.append(f"random-init model {_num(entry['control_auroc'][layer])}")
        if "rollout" in entry["auroc"]:
            extra.append(f"attention rollout {_num(entry['auroc']['rollout'][layer])}")
        text = (
            f"layer {layer}: {entry['label']} ranks InfoFlow's predicted positions above "
            f"the others with AUROC {_num(auroc)}" + (f" ({'; '.join(extra)})" if extra else "")
        )
        rate = entry["violation_rate"]["infoflow"][layer]
        if rate is not None:
            text += f"; violation rate {_pct(rate)}"
            if "rollout" in entry["violation_rate"]:
                text += f" (rollout {_pct(entry['violation_rate']['rollout'][layer])})"
        out.append(text)
    return out


def _rollout_lines(entry: Mapping[str, Any] | None, layers: Sequence[int]) -> list[str]:
    """Per layer, which predictor fits the primary instrument better, in numbers."""
    if entry is None or "rollout" not in entry["auroc"]:
        return []
    out = []
    for layer in layers:
        ours, theirs = entry["auroc"]["infoflow"][layer], entry["auroc"]["rollout"][layer]
        if ours is None or theirs is None or not (np.isfinite(ours) and np.isfinite(theirs)):
            continue
        better = "rollout" if theirs > ours else "InfoFlow" if ours > theirs else "neither"
        rates = entry["violation_rate"]
        out.append(
            f"layer {layer}: AUROC {_num(theirs)} for attention rollout against {_num(ours)} "
            f"for InfoFlow, violation rate {_pct(rates['rollout'][layer])} against "
            f"{_pct(rates['infoflow'][layer])}: {better} fits {entry['label']} better"
        )
    return out


def _num(value: float | None) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def build_summary(inputs: ReportInputs, figure_meta: Mapping[str, Mapping[str, str]]) -> dict:
    """The summary.json dict: every number, the verdicts, the caveat, provenance."""
    return jsonable(
        {
            **make_header(FORMAT, SCHEMA_VERSION, AXES),
            "title": inputs.title,
            "notes": dict(inputs.notes),
            "caveat": CAVEAT,
            "headline": list(inputs.headline),
            "answer": build_answer(inputs),
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
