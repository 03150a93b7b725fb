"""Read the pipeline's files into comparisons and report inputs.

Files: predicted sets (``infoprobe predict --out``, :func:`infoprobe.infoflow.read_sets`),
probe results (``infoprobe probe``, :class:`infoprobe.probes.results.ProbeResults`), the
activation cache they were probed from (optional: exact input check, attention patterns for
rollout and the per-sample view) and the checkpoint (optional: training history).

The probes score a held-out test split; the predicted sets cover every cache sample, so
they are indexed with the results' ``test_index`` before comparing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infoprobe.checkpoint import read_checkpoint_meta
from infoprobe.compare import Comparison, Observations, ProvenanceError, check_provenance, compare
from infoprobe.hooks import open_cache
from infoprobe.infoflow import SetsFile, read_sets
from infoprobe.infoflow.store import inputs_hash
from infoprobe.probes.results import ProbeResults
from infoprobe.report.build import ReportInputs
from infoprobe.rollout import Rollout, RolloutConfig, predict_rollout

ScoreKind = Literal["r2", "selectivity"]
TARGETS = "positions"


class SourceError(ValueError):
    """A pipeline file lacks what the comparison or report needs."""


def _without_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def predicted_provenance(sets: SetsFile) -> dict[str, Any]:
    """Provenance fields of a predicted-sets file, named as in :func:`check_provenance`."""
    prov = sets.provenance
    return _without_none(
        {
            "task": sets.task,
            "data_seed": prov.get("data_seed"),
            "n": int(sets.x.shape[0]),
            "T": int(sets.x.shape[1]),
            "n_layers": int(sets.sets.shape[0]) - 1,
            "checkpoint_sha256": prov.get("checkpoint_sha256"),
            "inputs_sha256": inputs_hash(sets.x),
        }
    )


def probe_provenance(results: ProbeResults, x: np.ndarray | None = None) -> dict[str, Any]:
    """Provenance fields of probe results (from their cache's provenance and data spec).

    x: the cache's inputs [N, T, d], when the cache is at hand, for ``inputs_sha256``.
    """
    prov = results.provenance or {}
    spec = prov.get("data_spec") or {}
    seeds = (prov.get("data_seed"), spec.get("data_seed"), spec.get("seed"))
    return _without_none(
        {
            "task": prov.get("task", spec.get("task")),
            "data_seed": next((s for s in seeds if s is not None), None),
            "n": prov.get("n", spec.get("n")),
            "T": results.T,
            "n_layers": len(results.layers) - 1,
            "checkpoint_sha256": prov.get("checkpoint_sha256"),
            "inputs_sha256": None if x is None else inputs_hash(x),
        }
    )


def _pick_probe(results: ProbeResults, probe: str | None) -> str:
    present = sorted({key[1] for key in results.scores if key[0] == TARGETS})
    if not present:
        raise SourceError(
            f"probe results hold no '{TARGETS}' scores (targets present: "
            f"{sorted({k[0] for k in results.scores})}); run `infoprobe probe --targets positions`"
        )
    chosen = probe or results.settings.get("probe") or present[0]
    if chosen not in present:
        raise SourceError(f"--probe {chosen}: no scores for it; present: {present}")
    return chosen


def observations_from_results(
    results: ProbeResults, *, probe: str | None = None, score: ScoreKind = "r2"
) -> Observations:
    """The position-target sets, errors and scores of ``results`` as :class:`Observations`.

    probe: "linear", "mlp" or "query" (default: the probe the results were run with).
    score: continuous aggregate score, test R² ("r2") or R² minus the largest control
    ("selectivity").
    """
    probe = _pick_probe(results, probe)
    control = "none" if score == "r2" else "selectivity"
    key = (TARGETS, probe, control, "r2")
    if key not in results.scores:
        raise SourceError(
            f"no {score} scores for probe {probe!r}; present: {sorted(results.scores)}"
        )
    errors = results.per_sample.get((TARGETS, probe, "none"))
    thresholds = results.thresholds or {}
    return Observations(
        per_sample=results.observed.get((TARGETS, "per_sample")),
        errors=None if errors is None else np.asarray(errors, dtype=np.float64),
        aggregate=results.observed.get((TARGETS, "aggregate")),
        score=np.asarray(results.scores[key], dtype=np.float64),
        score_name="R²" if score == "r2" else "selectivity (R² − control)",
        tau_sample=thresholds.get("tau_sample"),
        tau=thresholds.get("tau") if score == "r2" else thresholds.get("margin"),
        provenance=probe_provenance(results),
    )


def _read_cache(cache_path: Path, test_index: np.ndarray, n_blocks: int, want_patterns: bool):
    with open_cache(cache_path) as cache:
        x = np.asarray(cache.x[()])
        provenance = cache.provenance
        patterns = None
        if want_patterns:
            names = [f"blocks.{b}.attn.hook_pattern" for b in range(n_blocks)]
            missing = [n for n in names if n not in cache.hook_names]
            if missing:
                raise SourceError(
                    f"{cache_path}: attention patterns {missing} not cached (present: "
                    f"{cache.hook_names}); re-run `infoprobe cache` with the pattern sites"
                )
            patterns = [np.asarray(cache.acts(n)[np.sort(test_index)]) for n in names]
    return x, provenance, patterns


@dataclass
class Sources:
    """Aligned inputs of one comparison (test samples only).

    predicted: bool [L+1, n_test, T+1, T+1]; observations: their probes' measurements;
    test_index: cache rows of the n_test samples; patterns: per block [n_test, h, T+1, T+1]
    or None; provenance: label → provenance dict of every input file.
    """

    predicted: np.ndarray
    observations: Observations
    test_index: np.ndarray
    sets_file: SetsFile
    results: ProbeResults
    patterns: list[np.ndarray] | None = None
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_sources(
    pred_path: str | os.PathLike,
    probes_path: str | os.PathLike,
    *,
    cache_path: str | os.PathLike | None = None,
    probe: str | None = None,
    score: ScoreKind = "r2",
    want_patterns: bool = False,
) -> Sources:
    """Read and cross-check predicted sets, probe results and (optionally) their cache.

    Raises ProvenanceError when the files were not made from the same task, data seed,
    samples or model (with the cache: when its inputs differ from the predicted sets' or its
    provenance differs from the results'), SourceError when something needed is missing.
    """
    pred_path, probes_path = Path(pred_path), Path(probes_path)
    sets = read_sets(pred_path)
    results = ProbeResults.read(probes_path)
    test_index = np.asarray(results.test_index, dtype=np.int64)
    x = patterns = None
    provenance: dict[str, dict[str, Any]] = {}
    if cache_path is not None:
        n_blocks = len(results.layers) - 1
        x, cache_prov, patterns = _read_cache(Path(cache_path), test_index, n_blocks, want_patterns)
        if cache_prov != results.provenance:
            raise ProvenanceError(
                f"{probes_path} was not probed from {cache_path}: their provenance differs "
                f"(results: {results.provenance}; cache: {cache_prov})"
            )
        provenance[f"activation cache ({cache_path})"] = cache_prov
    pred_prov, probe_prov = predicted_provenance(sets), probe_provenance(results, x)
    check_provenance(
        pred_prov, probe_prov, pred_source=str(pred_path), probe_source=str(probes_path)
    )
    if test_index.size and test_index.max() >= sets.sets.shape[1]:
        raise ProvenanceError(
            f"{probes_path}: test_index reaches sample {int(test_index.max())}, but {pred_path} "
            f"holds {sets.sets.shape[1]} samples"
        )
    observations = observations_from_results(results, probe=probe, score=score)
    provenance[f"predicted sets ({pred_path})"] = {
        **pred_prov,
        "arch": sets.arch,
        "prediction": sets.prediction,
        "file_provenance": sets.provenance,
    }
    provenance[f"probe results ({probes_path})"] = {
        **probe_prov,
        "settings": results.settings,
        "thresholds": results.thresholds,
        "cache_provenance": results.provenance,
    }
    order = np.argsort(test_index, kind="stable")
    if patterns is not None:  # read in sorted order (h5py); put back in test_index order
        patterns = [p[np.argsort(order, kind="stable")] for p in patterns]
    return Sources(
        predicted=sets.sets[:, test_index],
        observations=observations,
        test_index=test_index,
        sets_file=sets,
        results=results,
        patterns=patterns,
        provenance=provenance,
    )


def compare_sources(
    sources: Sources, rollout: RolloutConfig | None = None
) -> tuple[Comparison, Comparison | None, Rollout | None]:
    """InfoFlow's comparison, and rollout's when ``rollout`` is given (needs patterns)."""
    infoflow = compare(
        sources.predicted,
        sources.observations,
        provenance=next(v for k, v in sources.provenance.items() if k.startswith("predicted")),
    )
    if rollout is None:
        return infoflow, None, None
    if sources.patterns is None:
        raise SourceError("rollout needs the attention patterns: pass the activation cache")
    rolled = predict_rollout(sources.patterns, rollout)
    rollout_comparison = compare(
        rolled.sets, sources.observations, name="rollout", provenance=rollout.to_dict()
    )
    return infoflow, rollout_comparison, rolled


def report_inputs(
    sources: Sources,
    *,
    rollout: RolloutConfig | None = None,
    history: list[dict[str, Any]] | None = None,
    n_sample_views: int = 3,
    title: str | None = None,
    notes: Mapping[str, Any] | None = None,
    extra_provenance: Mapping[str, Mapping[str, Any]] | None = None,
) -> ReportInputs:
    """Comparisons plus everything the report draws, from loaded :class:`Sources`."""
    infoflow, rollout_comparison, rolled = compare_sources(sources, rollout)
    shown = list(range(min(n_sample_views, sources.predicted.shape[1])))
    task = sources.sets_file.task
    arch = sources.sets_file.arch
    default_notes = {
        "task": task.get("name"),
        "task parameters": ", ".join(f"{k}={v}" for k, v in task.get("params", {}).items()),
        "heads per layer": ", ".join(map(str, arch.get("heads", []))) or None,
        "InfoFlow verdict": sources.sets_file.prediction.get("verdict"),
        "test samples compared": int(sources.predicted.shape[1]),
    }
    return ReportInputs(
        comparison=infoflow,
        observations=sources.observations,
        predicted=sources.predicted,
        rollout=rollout_comparison,
        rollout_sets=None if rolled is None else rolled.sets,
        patterns=[] if sources.patterns is None else [p[shown] for p in sources.patterns],
        pattern_samples=shown if sources.patterns is not None else [],
        n_sample_views=n_sample_views,
        history=history or [],
        provenance={**sources.provenance, **(extra_provenance or {})},
        title=title or f"infoprobe report: {task.get('name', 'task')}",
        notes={**_without_none(default_notes), **(notes or {})},
    )


def checkpoint_history(
    checkpoint_path: str | os.PathLike, sources: Sources | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Training history and provenance of a checkpoint folder.

    With ``sources``, refuses a checkpoint whose weights hash differs from the one the
    probed cache records (the training curve would belong to another model).
    Returns (history, provenance dict).
    """
    meta = read_checkpoint_meta(checkpoint_path)
    sha = meta.get("weights_sha256")
    if sources is not None:
        cached = (sources.results.provenance or {}).get("checkpoint_sha256")
        if cached and sha and cached != sha:
            raise ProvenanceError(
                f"{checkpoint_path}: weights_sha256 {sha} differs from the checkpoint_sha256 "
                f"{cached} the probed cache was made from"
            )
    keep = ("model_config", "task", "train_config", "metrics", "weights_sha256", "versions")
    return list(meta.get("history", [])), {k: meta[k] for k in keep if k in meta}
