"""Read the pipeline's files into aligned inputs of a comparison.

Files: predicted sets (``infoprobe predict``, every cache sample), probe results
(``infoprobe probe``, the held-out test samples), influence files (``infoprobe
influence``, the samples they were computed on), and optionally the activation cache
(exact input check, attention patterns) and the checkpoint (training history).

Every instrument is restricted to the samples all of them cover (their cache rows,
intersected), so predictions, decodability and flow line up sample by sample.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from infoprobe.attention.program import ObservedProgram, observed_program
from infoprobe.attention.rollout import Rollout, RolloutConfig, predict_rollout
from infoprobe.base.errors import UsageError, UserError
from infoprobe.base.header import MODEL_IDENTITY
from infoprobe.checkpoint import read_checkpoint_meta
from infoprobe.compare import instruments
from infoprobe.compare.core import compare
from infoprobe.compare.crosstab import Crosstab, crosstab
from infoprobe.compare.null import NULL_Q, null_rule
from infoprobe.compare.observations import Observations
from infoprobe.compare.predictors import INFOFLOW, predictor_of, primary
from infoprobe.compare.provenance import (
    ProvenanceError,
    cache_provenance_fields,
    check_provenance,
    predicted_provenance,
    probe_provenance,
    refuse_control,
)
from infoprobe.compare.scopes import SetComparison
from infoprobe.compare.verdicts import headline
from infoprobe.foreign.config import hides_patterns
from infoprobe.foreign.trust import code_files, model_code_sha256
from infoprobe.hooks import open_cache
from infoprobe.influence import flow_threshold, read_influence
from infoprobe.infoflow import Architecture, SetsFile, predict, read_sets
from infoprobe.infoflow.store import inputs_hash
from infoprobe.probes.results import ProbeResults
from infoprobe.tasks import task_from_dict


class SourceError(UserError):
    """A pipeline file lacks what the comparison or report needs."""


def _read_cache(cache_path: Path, rows: np.ndarray, n_blocks: int, want_patterns: bool):
    with open_cache(cache_path) as cache:
        x = np.asarray(cache.x[()])
        provenance = cache.provenance
        patterns = None
        if want_patterns:
            names = [f"blocks.{b}.attn.hook_pattern" for b in range(n_blocks)]
            missing = [n for n in names if n not in cache.hook_names]
            if len(missing) == len(names) and hides_patterns(cache.model_config):
                return x, provenance, None  # nothing to read: the observed program is n/a
            if missing:
                raise SourceError(
                    f"{cache_path}: attention patterns {missing} not cached (present: "
                    f"{cache.hook_names}); re-run `infoprobe cache` with the pattern sites"
                )
            patterns = [np.asarray(cache.acts(n)[rows]) for n in names]  # rows are sorted
    return x, provenance, patterns


def _check_probe_rows(results: ProbeResults, path: Path, n: int, pred_path: Path) -> None:
    """Refuse probe results that do not record what they were computed on, or whose test
    rows reach beyond the predicted sets' samples."""
    if results.inputs_sha256 is None:
        raise ProvenanceError(
            f"{path}: root attribute 'inputs_sha256' missing (a results file of an older "
            "infoprobe records no hash of its inputs, so its rows cannot be checked); re-run "
            "`infoprobe probe`"
        )
    rows = np.asarray(results.test_index)
    if rows.size and int(rows.max()) >= n:
        raise ProvenanceError(
            f"{path}: dataset /split/test_index reaches cache row {int(rows.max())}, but "
            f"{pred_path} holds {n} samples"
        )


@dataclass
class Sources:
    """Aligned inputs of one comparison.

    predicted: bool [L+1, n, T+1, T+1] InfoFlow's sets on the n compared samples;
    rows: their cache rows [n] (sorted); x: their inputs [n, T, d];
    instruments: name → :class:`Observations` on the same n samples (flow first, then its
    controls, then decodability); patterns: per block [n, h, T+1, T+1] or None;
    provenance: label → provenance dict of every input file.
    """

    predicted: np.ndarray
    rows: np.ndarray
    x: np.ndarray
    instruments: dict[str, Observations]
    sets_file: SetsFile
    results: ProbeResults | None = None
    patterns: list[np.ndarray] | None = None
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def cache_provenance(self) -> dict[str, Any] | None:
        """The provenance of the cache every instrument was computed from (if recorded)."""
        for prov in self.provenance.values():
            if "cache_provenance" in prov:
                return prov["cache_provenance"]
        return None


def _load_influence(path: Path) -> tuple[Any, dict[str, Any]]:
    inf = read_influence(path)
    cache_prov = (inf.provenance or {}).get("cache") or {}
    return inf, cache_provenance_fields(cache_prov, inf.T, inf.scores.shape[0] - 1)


def _align(row_sets: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The rows every source covers, and for each source the positions of those rows."""
    common = None
    for rows in row_sets.values():
        common = rows if common is None else np.intersect1d(common, rows)
    if common is None or common.size == 0:
        raise SourceError(
            "the inputs share no samples: "
            + "; ".join(f"{k} covers {v.size} cache rows" for k, v in row_sets.items())
        )
    where = {}
    for name, rows in row_sets.items():
        order = np.argsort(rows, kind="stable")
        where[name] = order[np.searchsorted(rows, common, sorter=order)]
    return common, where


def load_sources(
    pred_path: str | os.PathLike,
    probes_path: str | os.PathLike | None = None,
    *,
    influence_paths: Sequence[str | os.PathLike] = (),
    cache_path: str | os.PathLike | None = None,
    probe: str | None = None,
    score: instruments.ScoreKind = "r2",
    want_patterns: bool = False,
    beside: Sequence[str | os.PathLike] = (),
) -> Sources:
    """Read and cross-check predicted sets, probe results, influence files and the cache.

    ``beside``: probe results of other families from the same cache, each compared as the
    instrument "decodability (<family> probe)" beside the main one (``probes_path``).
    Raises ProvenanceError when the files were not made from the same task, data seed,
    samples or model, SourceError when something needed is missing.
    """
    if score not in typing.get_args(instruments.ScoreKind):
        raise UsageError(
            f"load_sources: score: expected one of {typing.get_args(instruments.ScoreKind)}, "
            f"got {score!r}"
        )
    pred_path = Path(pred_path)
    if probes_path is None and not influence_paths:
        raise SourceError("nothing to compare: give probe results and/or influence files")
    sets = read_sets(pred_path)
    pred_prov = predicted_provenance(sets)
    refuse_control(pred_prov, str(pred_path))
    provenance: dict[str, dict[str, Any]] = {}
    row_sets: dict[str, np.ndarray] = {}
    if beside and probes_path is None:
        raise SourceError("probe results beside the main ones need the main ones (probes_path)")
    probe_files: dict[str, tuple[ProbeResults, Path]] = {}
    for i, raw in enumerate([] if probes_path is None else [probes_path, *beside]):
        path = Path(raw)
        found_results = ProbeResults.read(path)
        _check_probe_rows(found_results, path, sets.x.shape[0], pred_path)
        refuse_control(found_results.provenance, str(path))
        check_provenance(
            pred_prov, probe_provenance(found_results), pred_source=str(pred_path),
            probe_source=str(path),
        )  # fmt: skip
        name = "decodability"
        if i:
            main_results, main_path = probe_files["decodability"]
            name = instruments.beside_name(str(found_results.settings.get("probe")))
            main_family = instruments.pick_probe(main_results, probe)
            if name in probe_files or name == instruments.beside_name(main_family):
                raise SourceError(f"{path}: a second probe results file for instrument {name!r}")
            if found_results.provenance != main_results.provenance:
                raise ProvenanceError(
                    f"{path} was not probed from the cache of {main_path}: their provenance differs"
                )
        probe_files[name] = (found_results, path)
        row_sets[name] = np.asarray(found_results.test_index, dtype=np.int64)
        provenance[f"probe results ({path})"] = {
            **probe_provenance(found_results),
            "settings": found_results.settings,
            "thresholds": found_results.thresholds,
            "cache_provenance": found_results.provenance,
        }
    results = probe_files.get("decodability", (None, None))[0]
    influences = []
    for raw in influence_paths:
        path = Path(raw)
        inf, fields = _load_influence(path)
        name, control_of = instruments.flow_name(
            inf.settings.method, (inf.provenance or {}).get("random_init_seed")
        )
        if name in row_sets:
            raise SourceError(f"{path}: a second influence file for instrument {name!r}")
        refuse_control(fields, f"{path} (its cache)")
        check_provenance(pred_prov, fields, pred_source=str(pred_path), probe_source=str(path))
        if results is not None:  # the whole chain: both instruments from the same cache
            check_provenance(
                probe_provenance(results),
                fields,
                pred_source=str(probes_path),
                probe_source=str(path),
            )
        rows = np.asarray(inf.sample_index, dtype=np.int64)
        if rows.size and rows.max() >= sets.x.shape[0]:
            raise ProvenanceError(
                f"{path}: dataset /sample_index reaches cache row {int(rows.max())}, but "
                f"{pred_path} holds {sets.x.shape[0]} samples"
            )
        recorded = (inf.provenance or {}).get("inputs_sha256")
        if recorded and recorded != inputs_hash(sets.x[rows]):
            raise ProvenanceError(
                f"{path}: provenance field 'inputs_sha256' {recorded} differs from the hash of "
                f"the same rows of {pred_path} ({inputs_hash(sets.x[rows])}): other inputs"
            )
        row_sets[name] = rows
        influences.append((name, control_of, inf, path))
        provenance[f"influence ({path})"] = {
            **fields,
            "settings": inf.settings.to_dict(),
            "file_provenance": inf.provenance,
        }
    rows, where = _align(row_sets)
    if rows.max() >= sets.sets.shape[1]:
        raise ProvenanceError(
            f"the inputs reach cache row {int(rows.max())}, but {pred_path} holds "
            f"{sets.sets.shape[1]} samples"
        )
    notes = [
        f"{name}: {rows.size} of its {r.size} samples are compared (the samples every input covers)"
        for name, r in row_sets.items()
        if r.size != rows.size
    ]
    x = sets.x[rows]
    found: dict[str, Observations] = {}
    for name, control_of, inf, path in influences:
        found[name] = instruments.flow(
            np.asarray(inf.scores)[:, where[name]],  # aggregate: their share, not inf.aggregate
            threshold=flow_threshold(inf.T),
            name=name,
            control_of=control_of,
            provenance=provenance[f"influence ({path})"],
        )
    found = dict(sorted(found.items(), key=lambda kv: kv[1].control_of is not None))
    for name, (found_results, _) in probe_files.items():
        test_index = row_sets[name]
        main = name == "decodability"
        prov = probe_provenance(found_results)
        obs = instruments.decodability(
            found_results, sets.x[test_index], probe=probe if main else None, score=score,
            provenance=prov,
        )  # fmt: skip
        found[name] = instruments.take_samples(replace(obs, instrument=name), where[name])
        control = instruments.random_init_control(found_results, of=name, provenance=prov)
        if main and control is not None:  # the critic's per-sample random-init control
            found[control.instrument] = instruments.take_samples(control, where[name])
    patterns = None
    if cache_path is not None:
        n_blocks = sets.sets.shape[0] - 1
        cache_x, cache_prov, patterns = _read_cache(Path(cache_path), rows, n_blocks, want_patterns)
        refuse_control(cache_prov, str(cache_path))
        check_provenance(
            pred_prov,
            cache_provenance_fields(cache_prov, sets.x.shape[1], n_blocks, cache_x),
            pred_source=str(pred_path),
            probe_source=str(cache_path),
        )
        if inputs_hash(cache_x) != pred_prov["inputs_sha256"]:
            raise ProvenanceError(
                f"{cache_path}: its inputs differ from those of {pred_path} (inputs_sha256 "
                f"{inputs_hash(cache_x)} vs {pred_prov['inputs_sha256']})"
            )
        if results is not None and cache_prov != results.provenance:
            raise ProvenanceError(
                f"{probes_path} was not probed from {cache_path}: their provenance differs "
                f"(results: {results.provenance}; cache: {cache_prov})"
            )
        provenance[f"activation cache ({cache_path})"] = {"cache_provenance": cache_prov}
    provenance = {
        f"predicted sets ({pred_path})": {
            **pred_prov,
            "arch": sets.arch,
            "prediction": sets.prediction,
            "file_provenance": sets.provenance,
        },
        **provenance,
    }
    return Sources(
        predicted=sets.sets[:, rows],
        rows=rows,
        x=x,
        instruments=found,
        sets_file=sets,
        results=results,
        patterns=patterns,
        provenance=provenance,
        notes=notes,
    )


@dataclass
class Compared:
    """Everything compared from :class:`Sources`.

    comparisons: instrument → predictor → :class:`SetComparison`; rollout: the rollout sets
    (None without rollout); table: flow × decodability per sample (None unless both have
    per-sample sets); heads: the observed program (None without attention patterns).
    """

    comparisons: dict[str, dict[str, SetComparison]]
    rollout: Rollout | None
    table: Crosstab | None
    heads: ObservedProgram | None = None
    null_rule: dict[str, Any] | None = None
    """The null rule's per-layer counts (:func:`infoprobe.compare.null.null_summary`)."""

    @property
    def predictor(self) -> str:
        """The predicted sets' key in :attr:`comparisons` (``infoflow`` or ``your_sets``)."""
        return primary(next(iter(self.comparisons.values()), {INFOFLOW: None}))

    def headline(self) -> tuple[str, ...]:
        return headline(self.comparisons, self.predictor)

    def extra(self) -> dict[str, Any]:
        """The top-level entries of comparison.json beside the comparisons."""
        return {
            "predictor": self.predictor,
            "headline": list(self.headline()),
            "crosstab": None if self.table is None else self.table.to_dict(),
            "heads": None if self.heads is None else self.heads.to_dict(),
            "null_rule": self.null_rule,
        }


def predicted_program(sets: SetsFile):
    """InfoFlow's program for the task, architecture and orientation recorded in a
    predicted-sets file."""
    a = sets.arch
    arch = Architecture(
        heads=tuple(a["heads"]),
        d_model=int(a["d_model"]),
        d_heads=tuple(a["d_heads"]),
        positions=bool(a["positions"]),
    )
    recorded = sets.prediction.get("orientation")  # absent in files written before it existed
    orientation = list(recorded.values()) if recorded else None
    task = task_from_dict(sets.task)
    return predict(task, arch, search_min_heads=False, orientation=orientation).program


def compare_sources(
    sources: Sources, rollout: RolloutConfig | None = None, *, null_q: float | None = NULL_Q
) -> Compared:
    """Compare InfoFlow's sets, or the user's in their place (the predictor ``your_sets``),
    and rollout when ``rollout`` is given, with every instrument;
    cross flow with decodability; read the observed program from the attention patterns;
    apply the null rule at FDR ``null_q`` (None: not at all; infoprobe.compare.null)."""
    pred_prov = next(v for k, v in sources.provenance.items() if k.startswith("predicted"))
    predictor = predictor_of(sources.sets_file.provenance)
    rolled = None
    if rollout is not None:
        if sources.patterns is None:
            raise SourceError(
                "rollout needs the attention patterns: pass the activation cache (a model "
                "that does not expose its attention weights has none to roll out)"
            )
        rolled = predict_rollout(sources.patterns, rollout)
    comparisons: dict[str, dict[str, SetComparison]] = {}
    for name, obs in sources.instruments.items():
        comparisons[name] = {
            predictor: compare(sources.predicted, obs, name=predictor, provenance=pred_prov)
        }
        if rolled is not None:
            comparisons[name]["rollout"] = compare(
                rolled.sets, obs, name="rollout", provenance=rollout.to_dict()
            )
    table = None
    flow_obs, dec_obs = sources.instruments.get("flow"), sources.instruments.get("decodability")
    if flow_obs is not None and dec_obs is not None and dec_obs.per_sample is not None:
        table = crosstab(flow_obs, dec_obs)
    heads = None
    if sources.patterns is not None:  # beside the task's program; with no task, on its own
        program = None if sources.sets_file.task is None else predicted_program(sources.sets_file)
        heads = observed_program(sources.patterns, program, sources.x)
    summary = None
    if null_q is not None:
        summary = null_rule(sources.instruments, sources.predicted, null_q)[1]
    return Compared(comparisons, rolled, table, heads=heads, null_rule=summary)


def checkpoint_history(
    checkpoint_path: str | os.PathLike, sources: Sources | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Training history and provenance of a checkpoint folder, read from its JSON: none
    of a foreign checkpoint's code runs (its code is located and hashed, not imported).

    With ``sources``, refuses a checkpoint whose weights or model code hash differs from
    the one the compared files record (the training curve would belong to another model).
    Returns (history, provenance dict); a foreign checkpoint's provenance names its
    factory, the files of its code and their hash under ``model_code``.
    """
    path = Path(checkpoint_path)
    meta = read_checkpoint_meta(path, require_task=False)
    found = {"checkpoint_sha256": meta.get("weights_sha256"), "model_code_sha256": None}
    keep = ("model_config", "task", "train_config", "metrics", "weights_sha256", "versions")
    prov = {k: meta[k] for k in keep if k in meta}
    factory = meta["model_config"].get("factory")
    if isinstance(factory, str):
        found["model_code_sha256"] = model_code_sha256(factory, path)
        prov["model_code"] = {
            "factory": factory,
            "files": [str(p.resolve()) for p in code_files(factory, path)],
            "model_code_sha256": found["model_code_sha256"],
            "run": False,
        }
    for key in MODEL_IDENTITY if sources is not None else ():
        recorded = next((p[key] for p in sources.provenance.values() if p.get(key)), None)
        if recorded and found[key] and recorded != found[key]:
            own = "weights_sha256" if key == "checkpoint_sha256" else key
            raise ProvenanceError(
                f"{checkpoint_path}: {own} {found[key]} differs from the {key} {recorded} "
                "the compared files were made from"
            )
    return list(meta.get("history", [])), prov
