"""What a report is made of: :class:`ReportInputs` (checked on construction), built from
loaded sources by :func:`from_sources`, and what figures and summary both derive from
them (InfoFlow's exponent, the answer layers, the violation counts, a content hash).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infoprobe.attention.orientation import recorded_orientation
from infoprobe.base.errors import UserError
from infoprobe.compare import instruments
from infoprobe.compare.crosstab import Crosstab
from infoprobe.compare.fit_flags import flagged_fits
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.predictors import INFOFLOW, YOUR_SETS, primary, sets_phrase
from infoprobe.compare.scopes import SetComparison
from infoprobe.compare.sources import Compared, Sources
from infoprobe.infoflow import Architecture, predict
from infoprobe.report import answer
from infoprobe.report.answer import ViolationSources
from infoprobe.tasks import task_from_dict


class ReportInputError(UserError):
    """Report inputs that do not fit together (shapes, sample indices, missing parts)."""


@dataclass
class ReportInputs:
    """Everything a report shows.

    comparisons: instrument → predictor → :class:`~infoprobe.compare.scopes.SetComparison` (each
    holds its instrument's :class:`~infoprobe.compare.observations.Observations`, for figures);
    the predicted sets are predictor ``infoflow`` (or ``your_sets`` for sets the user gave:
    :mod:`infoprobe.compare.predictors`), the first instrument is the primary one.
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
    null_rule: the null rule's per-layer counts beside the fixed threshold's
        (:func:`infoprobe.compare.null.null_summary`); None: not applied.
    flagged_fits: instrument → its probe cells whose fit failed after restarts and its
        AUROCs with and without them (:func:`infoprobe.compare.fit_flags.flagged_fits`).
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
    null_rule: Mapping[str, Any] | None = None
    flagged_fits: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.predicted = np.asarray(self.predicted)
        keys = {frozenset(c) & {INFOFLOW, YOUR_SETS} for c in (self.comparisons or {}).values()}
        if not self.comparisons or len(keys) != 1 or len(next(iter(keys))) != 1:
            raise ReportInputError(
                "comparisons: expected instrument → predictor → SetComparison with one "
                f"predictor '{INFOFLOW}' or '{YOUR_SETS}' for every instrument, got "
                f"{_layout(self.comparisons)}"
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
    def predictor(self) -> str:
        """The predicted sets' key: ``infoflow``, or ``your_sets`` for the user's sets."""
        return primary(next(iter(self.comparisons.values())))

    @property
    def sets_phrase(self) -> str:
        """The predicted sets in a sentence: "InfoFlow's sets" or "your sets"."""
        return sets_phrase(self.predictor)

    @property
    def primary(self) -> SetComparison:
        """The predicted sets against the first instrument."""
        return next(iter(self.comparisons.values()))[self.predictor]

    def instruments(self) -> dict[str, Observations]:
        """Instrument name → its observations."""
        return {k: v[self.predictor].observations for k, v in self.comparisons.items()}

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
        "task": "none: inputs from a file" if task is None else task.get("name"),
        "task parameters": None
        if task is None
        else ", ".join(f"{k}={v}" for k, v in task.get("params", {}).items()),
        "sets compared with": sets_origin(sources),
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
        null_rule=compared.null_rule,
        flagged_fits=flagged_fits(sources.predicted, sources.instruments),
        patterns=[] if sources.patterns is None else [p[shown] for p in sources.patterns],
        pattern_samples=shown if sources.patterns is not None else [],
        n_sample_views=n_sample_views,
        history=history or [],
        provenance={**sources.provenance, **(extra_provenance or {})},
        title=title or f"infoprobe report: {'your own sets' if task is None else task['name']}",
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


def sets_origin(sources: Sources) -> str | None:
    """For sets given by the user (``infoprobe sets``): which file, and how to read the
    report's "InfoFlow" columns; None for InfoFlow's own sets."""
    given = sources.sets_file.provenance.get("given_sets")
    if not given:
        return None
    return (
        f"your own sets, {Path(given['file']).name} (SHA-256 {given['sha256'][:16]}…), not "
        "InfoFlow's: wherever this report says InfoFlow, read these sets"
    )


def exponent_of(sources: Sources) -> dict[str, Any] | None:
    """InfoFlow's verdict and cost exponent α at the run's T and E, from the predicted-sets
    file (recomputed with the engine when the file predates ``exponent_at_T``); None for
    sets given by the user."""
    prediction = sources.sets_file.prediction
    if not prediction.get("verdict") or sources.sets_file.provenance.get("given_sets"):
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


def heads_dict(inputs: ReportInputs) -> dict[str, Any] | None:
    """The observed program as a dict (``heads.to_dict()``), or None without one."""
    return None if inputs.heads is None else inputs.heads.to_dict()


def probe_of(inputs: ReportInputs, name: str) -> str | None:
    """The probe family named beside instrument ``name`` (the decodability instruments)."""
    return inputs.probe if name == "decodability" else instruments.probe_family_of(name)
