"""The ``summary.json`` dict: the header, every number of the comparisons, and the
``answer`` the page leads with (per instrument and layer the AUROC and violation rate of
each predictor and the control, the thresholds, where violations come from, in words).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from infoprobe import __version__
from infoprobe.base import formats
from infoprobe.base.header import make_header
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.instruments import probe_family_of
from infoprobe.compare.predictors import INFOFLOW, display_name, sets_phrase
from infoprobe.compare.scopes import CAVEAT, SetComparison
from infoprobe.compare.verdicts import interval_text
from infoprobe.report import answer
from infoprobe.report.figures import instrument_label
from infoprobe.report.inputs import (
    ReportInputs,
    answer_layers,
    exponent_text,
    heads_dict,
    inputs_sha256,
    probe_of,
    violation_counts,
)

FORMAT = formats.REPORT
SCHEMA_VERSION = 4
"""4: bootstrap intervals over samples beside the AUROCs and rates (``answer`` entries
``auroc_interval``, ``control_auroc_interval``, ``violation_rate_interval``, [lo, hi] or
null; the comparisons' ``<name>_interval`` fields) and the top-level ``interval`` (method,
level, n_resamples, seed); 3: the common header of docs/conventions.md
(``schema_version`` instead of ``format_version``, ``created`` in UTC ``...Z``,
``axes``)."""
AXES = ("layer", "token", "position", "tau")
"""Axes of the comparison arrays summary.json holds (per layer, per token, membership
[layer, token, position], threshold sweeps)."""


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


def _per_layer_interval(comparison: SetComparison, metric: str) -> list[Any]:
    """The bootstrap interval of :func:`_per_layer` (per-sample counts only), else None."""
    part = comparison.per_sample
    found = None if part is None else getattr(part["others"], f"{metric}_interval", None)
    if found is None:
        return [None] * (comparison.n_layers + 1)
    return [list(v) if np.isfinite(v).all() else None for v in found]


def _interval_settings(inputs: ReportInputs) -> dict[str, Any] | None:
    """How the intervals were made (the same for every comparison), None without any."""
    for by_predictor in inputs.comparisons.values():
        for c in by_predictor.values():
            if c.interval is not None:
                return dict(c.interval)
    return None


def build_answer(inputs: ReportInputs) -> dict[str, Any]:
    """What the report leads with (summary.json ``answer``): per instrument and layer the
    AUROC and violation rate of InfoFlow, rollout and InfoFlow against the instrument's
    control; where the primary instrument's violations come from; what the fixed
    per-sample thresholds pass; InfoFlow's verdict and exponent; the headline in words."""
    controls = {c: name for name, obs in inputs.instruments().items() if (c := obs.control_of)}
    predictor = inputs.predictor
    n_layer_axis = inputs.predicted.shape[0]
    layers = answer_layers(inputs)
    instruments: dict[str, Any] = {}
    for name, by_predictor in inputs.comparisons.items():
        obs = by_predictor[predictor].observations
        if obs.control_of is not None:
            continue
        control = inputs.comparisons.get(controls.get(name, ""), {}).get(predictor)
        check = answer.threshold_check(obs, inputs.predicted)
        by_layer = range(n_layer_axis)
        entry: dict[str, Any] = {
            "label": instrument_label(name, probe_of(inputs, name)),
            "auroc": {p: [c.auroc(layer) for layer in by_layer] for p, c in by_predictor.items()},
            "auroc_interval": {
                p: [c.auroc_interval(layer) for layer in by_layer] for p, c in by_predictor.items()
            },
            "violation_rate": {p: _per_layer(c, "violation_rate") for p, c in by_predictor.items()},
            "recall": {p: _per_layer(c, "recall") for p, c in by_predictor.items()},
            "control": None if control is None else control.instrument,
            "control_auroc": None if control is None else [control.auroc(x) for x in by_layer],
            "control_auroc_interval": None
            if control is None
            else [control.auroc_interval(x) for x in by_layer],
            "violation_rate_interval": {
                p: _per_layer_interval(c, "violation_rate") for p, c in by_predictor.items()
            },
            "threshold": None if check is None else check.to_dict(),
            "threshold_lines": [],
        }
        if check is not None:
            ours = by_predictor[predictor]
            entry["threshold_lines"] = [
                answer.threshold_line(
                    check, layer, ours.auroc(layer), obs.word, ours.auroc_interval(layer)
                )
                for layer in layers
            ]
        instruments[name] = entry
    primary = next(iter(instruments), None)
    sources = violation_counts(inputs)
    word = inputs.primary.observations.word
    return jsonable(
        {
            "primary": primary,
            "predictor": predictor,
            "layers": layers,
            "exponent": None if inputs.exponent is None else dict(inputs.exponent),
            "verdict": exponent_text(inputs.exponent),
            "instruments": instruments,
            "violations": None if sources is None else sources.to_dict(),
            "violation_lines": []
            if sources is None
            else answer.violation_lines(sources, heads_dict(inputs), word, predictor),
            "lines": _answer_lines(instruments.get(primary), layers, predictor),
            "decodability_lines": []
            if primary == "decodability"
            else _answer_lines(
                instruments.get("decodability"), layers, predictor, _beside(instruments)
            ),
            "rollout_lines": _rollout_lines(instruments.get(primary), layers, predictor),
        }
    )


def _beside(instruments: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of the probes compared beside the main one, by family."""
    return {f: e for name, e in instruments.items() if (f := probe_family_of(name))}


def _answer_lines(
    entry: Mapping[str, Any] | None,
    layers: Sequence[int],
    predictor: str = INFOFLOW,
    beside: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """One sentence per layer: AUROC against the ``predictor``'s sets, its control, rollout
    and the probes ``beside`` (family → entry), violation rates."""
    if entry is None:
        return []
    out = []
    for layer in layers:
        ci = entry.get("auroc_interval") or {}
        auroc = _num(entry["auroc"][predictor][layer], _at(ci.get(predictor), layer))
        extra = []
        if entry["control_auroc"] is not None:
            control_ci = _at(entry.get("control_auroc_interval"), layer)
            extra.append(f"random-init model {_num(entry['control_auroc'][layer], control_ci)}")
        if "rollout" in entry["auroc"]:
            rollout = _num(entry["auroc"]["rollout"][layer], _at(ci.get("rollout"), layer))
            extra.append(f"attention rollout {rollout}")
        for family, other in (beside or {}).items():
            ci_other = _at((other.get("auroc_interval") or {}).get(predictor), layer)
            extra.append(f"{family} probe {_num(other['auroc'][predictor][layer], ci_other)}")
        text = (
            f"layer {layer}: {entry['label']} ranks the positions in {sets_phrase(predictor)} "
            "above "
            f"the others with AUROC {auroc}" + (f" ({'; '.join(extra)})" if extra else "")
        )
        rate = entry["violation_rate"][predictor][layer]
        if rate is not None:
            text += f"; violation rate {_pct(rate)}"
            if "rollout" in entry["violation_rate"]:
                text += f" (rollout {_pct(entry['violation_rate']['rollout'][layer])})"
        out.append(text)
    return out


def _rollout_lines(
    entry: Mapping[str, Any] | None, layers: Sequence[int], predictor: str = INFOFLOW
) -> list[str]:
    """Per layer, which predictor fits the primary instrument better, in numbers."""
    if entry is None or "rollout" not in entry["auroc"]:
        return []
    out = []
    for layer in layers:
        ours, theirs = entry["auroc"][predictor][layer], entry["auroc"]["rollout"][layer]
        if ours is None or theirs is None or not (np.isfinite(ours) and np.isfinite(theirs)):
            continue
        name = display_name(predictor)
        better = "rollout" if theirs > ours else name if ours > theirs else "neither"
        rates = entry["violation_rate"]
        out.append(
            f"layer {layer}: AUROC {_num(theirs)} for attention rollout against {_num(ours)} "
            f"for {name}, violation rate {_pct(rates['rollout'][layer])} against "
            f"{_pct(rates[predictor][layer])}: {better} fits {entry['label']} better"
        )
    return out


def _at(values: Sequence[Any] | None, layer: int) -> Any:
    return None if values is None else values[layer]


def _num(value: float | None, interval: Sequence[float] | None = None) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    return f"{value:.3f}" + interval_text(interval, 3)


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
            "interval": _interval_settings(inputs),
            "answer": build_answer(inputs),
            "comparisons": {
                inst: {pred: c.to_dict() for pred, c in by_pred.items()}
                for inst, by_pred in inputs.comparisons.items()
            },
            "crosstab": None if inputs.table is None else inputs.table.to_dict(),
            "heads": None if inputs.heads is None else inputs.heads.to_dict(),
            "null_rule": inputs.null_rule,
            "flagged_fits": dict(inputs.flagged_fits),
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
