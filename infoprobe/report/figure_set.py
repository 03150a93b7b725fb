"""The report's figures, assembled from :class:`~infoprobe.report.inputs.ReportInputs`:
figure name → (figure, title, caption), in the order the page shows them (the answer
figures, each instrument's grids, the per-sample views, threshold sweeps, training).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from matplotlib.figure import Figure

from infoprobe.compare.agreement import TauSweep
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.predictors import display_name
from infoprobe.compare.scopes import SetComparison
from infoprobe.report import answer, figures
from infoprobe.report.curves import answer_figure, tau_sweep_figure, training_curve
from infoprobe.report.inputs import (
    ReportInputs,
    answer_layers,
    heads_dict,
    probe_of,
    violation_counts,
)
from infoprobe.report.sample_figure import sample_view

MARKS = (
    "White outlines: positions in {sets} in every sample; white dots: in "
    "some samples (area = share); red crosses: violations (observed, never predicted)."
)
"""How the grids mark the predicted sets (their captions; ``sets``: whose, in words)."""
GRID_FIGURES: tuple[tuple[str, Callable[..., Figure], str, str], ...] = (
    (
        "grid",
        figures.decodability_grid,
        "{score} grid",
        "{score} ({name}) for input position s (x axis) in token t's state (y axis) at each "
        "layer. {marks} Observed is not used.",
    ),
    (
        "cls_across_layers",
        figures.cls_across_layers,
        "CLS across layers",
        "The CLS token's row of the {name} grid at every layer (layer on y, position on x). "
        "{marks}",
    ),
)
"""Per instrument with aggregate scores: file suffix, figure function, title, caption."""
ANSWER_CAPTION = (
    "Each (sample, token, position s ≠ t) cell of a layer is one item. Top: ROC curves of "
    "{score} ranking the positions in {sets} above the others ({who} solid, "
    "attention rollout dashed, {who} against the same instrument on the random-init "
    "model dotted; the diagonal is chance). Bottom: {score} at the positions in {sets} "
    "(blue) and at the others (grey){threshold}. Observed is not used."
)
FIXED_THRESHOLD = ", with the fixed threshold τ (dashed)"
"""The answer caption's threshold clause, for an instrument whose sets come from one."""

Figures = dict[str, tuple[Figure, str, str]]


def build_figures(inputs: ReportInputs) -> Figures:
    """Figure name → (figure, title, caption) for every figure the inputs allow."""
    out: Figures = {}
    _add_answer_figures(out, inputs)
    _add_grids(out, inputs)
    _add_sample_views(out, inputs)
    _add_tau_sweeps(out, inputs)
    if any(h.get("val_nmse") is not None for h in inputs.history):
        out["training_curve"] = (
            training_curve(inputs.history),
            "Training curve",
            "Validation NMSE (1 = predicting a constant) against training step, log scale.",
        )
    return out


def _add_answer_figures(out: Figures, inputs: ReportInputs) -> None:
    """Per instrument (not controls), ROC curves and distributions at the predicted sets."""
    for name, obs in inputs.instruments().items():
        if obs.control_of is not None:
            continue
        fig = _answer_figure(inputs, name)
        if fig is not None:
            label = figures.instrument_label(name, probe_of(inputs, name))
            out[f"answer_{figures.file_stem(name)}"] = (
                fig,
                f"{label} at the positions in {inputs.sets_phrase}",
                ANSWER_CAPTION.format(
                    sets=inputs.sets_phrase,
                    who=display_name(inputs.predictor),
                    score=obs.sample_score_name,
                    threshold="" if obs.tau_sample is None else FIXED_THRESHOLD,
                ),
            )


def _add_grids(out: Figures, inputs: ReportInputs) -> None:
    """Each instrument's :data:`GRID_FIGURES` (controls and instruments without aggregate
    scores have none)."""
    membership = inputs.primary.membership
    for name, obs in inputs.instruments().items():
        if obs.score is None or obs.control_of is not None:
            continue
        stem = figures.file_stem(name)
        probe = probe_of(inputs, name)
        label = figures.instrument_label(name, probe)
        for suffix, draw, title, caption in GRID_FIGURES:
            fig = draw(
                obs.score,
                membership,
                obs.aggregate,
                score_name=obs.score_name,
                instrument=name,
                probe=probe,
                sets=inputs.sets_phrase,
            )
            marks = MARKS.format(sets=inputs.sets_phrase)
            words = {"score": obs.score_name, "name": name, "marks": marks}
            out[f"{stem}_{suffix}"] = (
                fig,
                f"{label}: {title.format(**words)}",
                caption.format(**words),
            )


def _add_sample_views(out: Figures, inputs: ReportInputs) -> None:
    """Per drawn sample, its sets against the primary instrument beside the attention."""
    primary = inputs.primary.observations
    label = figures.instrument_label(primary.instrument)
    for row, sample in enumerate(inputs.sample_indices()):
        reason = _red_reason(inputs, sample)
        extra = None
        if inputs.rollout_sets is not None:
            extra = {"rollout": inputs.rollout_sets[:, sample]}
        patterns = [p[row] for p in inputs.patterns] if inputs.patterns else ()
        observed = None if primary.per_sample is None else primary.per_sample[:, sample]
        out[f"sample_{sample}"] = (
            sample_view(
                inputs.predicted[:, sample],
                observed,
                patterns,
                sample=sample,
                extra_sets=extra,
                instrument=primary.instrument,
                predictor=inputs.predictor,
            ),
            f"Sample {sample}: {display_name(inputs.predictor)} against {label}",
            f"Per-sample sets for one compared sample: {inputs.sets_phrase} (blue), the "
            f"set observed by {label} against it "
            "(green agree, grey omission, red violation) and the attention pattern of every "
            f"head of the block producing that layer.{reason}",
        )


def _add_tau_sweeps(out: Figures, inputs: ReportInputs) -> None:
    """Per instrument with a sweep, agreement as the threshold moves."""
    for name, by_predictor in inputs.comparisons.items():
        sweeps, what = _sweeps(by_predictor)
        if sweeps:
            obs = next(iter(by_predictor.values())).observations
            probe = probe_of(inputs, name)
            score = obs.sample_score_name if what == "per-sample" else obs.score_name
            out[f"tau_sweep_{figures.file_stem(name)}"] = (
                tau_sweep_figure(sweeps, instrument=name, score_name=score, probe=probe),
                f"{figures.instrument_label(name, probe)}: threshold sweep",
                f"Precision, recall and violation rate of {name} ({what}, own positions "
                "left out) as the threshold τ moves, per layer (colour) and predictor (line "
                "style); the dashed line is the τ fixed before the comparison.",
            )


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


def _answer_figure(inputs: ReportInputs, name: str) -> Figure | None:
    """ROC curves and score distributions of one instrument against InfoFlow (and rollout,
    and InfoFlow against the instrument's control) at every layer of :func:`answer_layers`."""
    obs = inputs.instruments()[name]
    layers = answer_layers(inputs)
    if obs.sample_score is None or not layers:
        return None
    predictors = {inputs.predictor: inputs.predicted}
    if inputs.rollout_sets is not None:
        predictors["rollout"] = inputs.rollout_sets
    control = _controls(inputs).get(name)
    curves, distributions = [], []
    for layer in layers:
        found: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, float]] = {}
        pairs = [(p, sets, obs) for p, sets in predictors.items()]
        if control is not None and control.sample_score is not None:
            pairs.append((inputs.predictor, inputs.predicted, control))
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
    return answer_figure(
        layers,
        curves,
        distributions,
        instrument=name,
        score_name=obs.sample_score_name,
        tau=obs.tau_sample,
        predictor=inputs.predictor,
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
    lines = answer.violation_lines(sources, heads_dict(inputs), obs.word, inputs.predictor)
    why = next((line for line in lines if line.startswith(f"layer {worst}:")), "")
    return f" Red (violation) cells in this sample: {shares}. Why, over all samples: {why}."
