"""The main job: train → cache → probe and flow (each with a random-init control) → predict →
compare → report.

A run folder holds one file per stage and a manifest ``run.json``. Each stage has a
*key*: everything that determines its output (its settings and the keys of the stages it
reads). A stage whose output exists and whose key equals the manifest's is skipped, so
re-running the same command resumes where it stopped; an existing folder made with other
settings is refused (naming the stage and the fields that differ) unless ``overwrite``.

    out/checkpoint/            train (or the user's checkpoint, for probe-checkpoint)
    out/acts.h5                activation cache of the trained model
    out/acts-random-init.h5    the same samples through a randomly initialised model
    out/probes.h5              probe results with controls and observed sets (decodability)
    out/flow.h5                local sensitivity of every state to every input (flow), on
                               the probes' test samples
    out/flow-random-init.h5    the same through the random-init model (flow's control)
    out/pred.h5                InfoFlow's predicted sets on the cache's samples
    out/comparison.json        predicted vs observed, both instruments (InfoFlow, rollout)
    out/report/report.html     figures and numbers (written with comparison.json)
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from infoprobe.attention.orientation import choose_orientation, recorded_orientation
from infoprobe.attention.rollout import RolloutConfig
from infoprobe.base.atomic import atomic_output, locked_output, refuse_existing
from infoprobe.base.header import check_header, make_header, read_json_object, with_header
from infoprobe.base.jsonable import json_sha256
from infoprobe.checkpoint import FORMAT as CHECKPOINT_FORMAT
from infoprobe.checkpoint import load_checkpoint, read_checkpoint_meta, with_task
from infoprobe.compare.core import FORMAT as COMPARISON_FORMAT
from infoprobe.compare.core import read_comparisons, write_comparisons
from infoprobe.compare.sources import checkpoint_history, compare_sources, load_sources
from infoprobe.hooks import FORMAT as CACHE_FORMAT
from infoprobe.hooks import layer_sites, open_cache, resolve_sites
from infoprobe.hooks.hdf5 import json_differences
from infoprobe.hooks.sites import check_site_spec
from infoprobe.influence import InfluenceSettings, influence_for_cache
from infoprobe.influence.store import FORMAT as INFLUENCE_FORMAT
from infoprobe.infoflow import as_architecture, predict, read_sets, write_sets
from infoprobe.infoflow.store import FORMAT as SETS_FORMAT
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.pipeline.chain import output_identity
from infoprobe.pipeline.probing import ProbeSettings, run_probe
from infoprobe.probes.results import FORMAT as PROBES_FORMAT
from infoprobe.probes.split import TEST, make_split
from infoprobe.probes.validate import check_finite
from infoprobe.report.build import FORMAT as REPORT_FORMAT
from infoprobe.report.build import from_sources, write_report
from infoprobe.tasks import Task, task_from_dict
from infoprobe.train.loop import NonFiniteLossError, TrainConfig, train_and_save
from infoprobe.train.seeds import differing_settings, seed_dir, train_seeds

MANIFEST = "run.json"
FORMAT = "infoprobe.run"
SCHEMA_VERSION = 3
"""3: each stage records the ``identity`` of its outputs (infoprobe.pipeline.chain). 2: the common
header of docs/conventions.md. run.json of schema 1 and 2 is still read (the identities are
recorded at the next run), and rewritten with the new header at the next stage."""
CONTROL_SEED = 12_345
"""Initialisation seed of the random-init control model (fixed, never tuned)."""


class RunFolderError(ValueError):
    """A run folder holds outputs made with other settings."""


@dataclass(frozen=True)
class RunSettings:
    """Settings of the stages after training (the defaults are the documented ones).

    n_cache: samples cached and probed (split by sample into train/val/test by the probes).
    sites: hook sites cached (the probes read the layer residuals, the report and rollout
        the attention patterns).
    probe: probe family for the position probes (``linear``, ``mlp`` or ``query``).
    batch_size: samples per forward pass when caching.
    rollout: also compare attention rollout (Abnar & Zuidema 2020) with the observations.
    flow: measure flow (local sensitivity, and its random-init control) on the probes'
        test samples, with ``influence`` settings (docs/influence.md).
    """

    n_cache: int = 8192
    sites: str = "residual,attention"
    probe: str = "linear"
    batch_size: int = 512
    rollout: bool = True
    flow: bool = True
    influence: InfluenceSettings = field(default_factory=InfluenceSettings)
    device: str = "cpu"

    def __post_init__(self) -> None:
        """Validate every setting before any stage touches a file."""
        for name in ("n_cache", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RunFolderError(f"RunSettings.{name}: expected an integer >= 1, got {value!r}")
        check_site_spec(self.sites)  # the names are checked against the model later
        ProbeSettings(probe=self.probe, device=self.device)  # raises on an unknown probe
        make_split(self.n_cache)  # raises when the probes' split would be too small

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["influence"] = self.influence.to_dict()
        return out


@dataclass
class RunSummary:
    """What a finished run prints: model quality, verdict, agreement, where the report is."""

    out: Path
    task: dict
    heads: list[int]
    val_nmse: float | None
    test_nmse: float | None
    verdict: str
    exponent: str
    layer_verdicts: list[str]
    report: Path
    skipped: list[str] = field(default_factory=list)
    seed_val_nmse: dict[int, float] = field(default_factory=dict)
    """Every trained seed's best validation NMSE when several seeds were trained (the
    analysed model is the best of them); empty for one seed."""
    orientation: str = ""
    """The orientation of the comparisons InfoFlow's sets were predicted in, in words."""
    rate: str = ""
    """InfoFlow's α at the run's T and E in words, and whether the law predicts the same
    rate as the minimum heads there (:meth:`infoprobe.infoflow.Prediction.rate_note`)."""

    def lines(self) -> list[str]:
        nmse = "n/a" if self.val_nmse is None else f"{self.val_nmse:.3g}"
        test = "n/a" if self.test_nmse is None else f"{self.test_nmse:.3g}"
        seeds = ", ".join(f"seed {s}: {v:.3g}" for s, v in self.seed_val_nmse.items())
        return [
            f"task {self.task['name']} {self.task['params']}, heads per layer {self.heads}",
            *([f"  seeds trained together (best analysed): {seeds}"] if seeds else []),
            f"  trained model: validation NMSE {nmse}, test NMSE {test}",
            f"  InfoFlow: {self.verdict} (cost exponent {self.exponent})",
            *([f"  rate: {self.rate}"] if self.rate else []),
            *([f"  orientation: {self.orientation}"] if self.orientation else []),
            *[f"  {line}" for line in self.layer_verdicts],
            f"  report: {self.report}",
        ]


STAGE_FIELDS = {"key_sha": str, "key": dict, "output": str}
"""Fields every stage entry of run.json holds, and their JSON types."""


def read_manifest(path: Path) -> dict:
    """Read and validate ``run.json``: its header, ``stages`` an object of stage entries,
    each with ``key_sha``, ``key``, ``output`` (and ``identity``, an object, when recorded).
    Raises RunFolderError naming the file and the field."""
    fix = "restore it from a copy, or choose another --out"
    manifest = read_json_object(path, RunFolderError, fix)
    check_header(manifest, path, fmt=FORMAT, error=RunFolderError,
                 readable=range(1, SCHEMA_VERSION + 1), unversioned=1)  # fmt: skip
    stages = manifest.get("stages")
    if not isinstance(stages, dict):
        raise RunFolderError(
            f"{path}: field 'stages' is {stages!r}, expected an object of stage entries; {fix}"
        )
    for name, entry in stages.items():
        fields = {**STAGE_FIELDS, "identity": dict} if isinstance(entry, dict) else {}
        wrong = [
            f for f, kind in fields.items() if f in entry and not isinstance(entry[f], kind)
        ] + [f for f in STAGE_FIELDS if f not in fields or f not in entry]
        if not isinstance(entry, dict) or wrong:
            raise RunFolderError(
                f"{path}: field 'stages.{name}' is {str(entry)[:80]!r}, expected an object with "
                f"{', '.join(f'{f!r} ({k.__name__})' for f, k in STAGE_FIELDS.items())}; {fix}"
            )
    return manifest


def key_sha(key: dict) -> str:
    """Stable hash of a stage key (JSON with sorted keys)."""
    return json_sha256(key)


@dataclass
class Stage:
    """One step of a run: ``build(path)`` writes ``output`` (atomically) from ``key``."""

    name: str
    output: str
    key: dict
    build: Callable[[Path], Any]
    resumable: bool = False  # build() itself resumes a partial output (the cache)
    also_writes: tuple[str, ...] = ()  # further outputs: up to date only if all exist
    kinds: dict[str, str] = field(default_factory=dict)
    """Output name -> the format marker it must carry to be replaced (infoprobe.base.atomic)."""

    def complete(self, folder: Path) -> bool:
        """Whether every output of the stage exists in ``folder``."""
        return all((folder / name).exists() for name in (self.output, *self.also_writes))


class RunFolder:
    """A run folder and its manifest; runs stages, skipping those that are up to date."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        progress: bool = True,
        log: Callable[[str], None] | None = None,
    ):
        self.path = Path(path)
        self.overwrite = overwrite
        self.progress = progress  # tqdm bars inside stages
        self.log = log if log is not None else (print if progress else None)
        self.manifest_path = self.path / MANIFEST
        self.manifest = self._read_manifest()
        self.skipped: list[str] = []

    def _read_manifest(self) -> dict:
        if not self.path.exists():
            return {**make_header(FORMAT, SCHEMA_VERSION), "stages": {}}
        if not self.manifest_path.is_file():
            if any(self.path.iterdir()):
                raise RunFolderError(
                    f"{self.path} exists and is not an infoprobe run folder (no {MANIFEST}); "
                    "choose another --out (--overwrite only redoes stages of a run folder)"
                )
            return {**make_header(FORMAT, SCHEMA_VERSION), "stages": {}}
        return read_manifest(self.manifest_path)

    def _write_manifest(self) -> None:
        with atomic_output(self.manifest_path, overwrite=True, kind=FORMAT) as tmp:
            self.manifest = with_header(self.manifest, FORMAT, SCHEMA_VERSION)
            tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=True, default=str))

    def run(self, stages: list[Stage]) -> None:
        stale = self._check_chain(stages)
        self._check_replacements(stages, stale)
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.manifest_path.is_file():  # a run folder from its first moment on
            self._write_manifest()
        for i, stage in enumerate(stages, 1):
            label = f"[{i}/{len(stages)}] {stage.name:<9}"
            target = self.path / stage.output
            sha = key_sha(stage.key)
            recorded = self.manifest["stages"].get(stage.name)
            if stage.name in stale:  # --overwrite: a replaced or edited output is redone
                self._remove_outputs(stage)
            elif stage.complete(self.path) and recorded and recorded["key_sha"] == sha:
                self.skipped.append(stage.name)
                self._say(f"{label} up to date: {target}")
                continue
            if target.exists() and recorded and recorded["key_sha"] == sha:
                pass  # recorded with this key, an output missing: rebuild in place
            elif target.exists() and not stage.resumable:
                self._replace_or_refuse(stage, target, recorded)
            elif target.exists() and recorded and recorded["key_sha"] != sha:
                self._replace_or_refuse(stage, target, recorded)
            self._say(f"{label} running ...")
            start = time.perf_counter()
            stage.build(target)
            seconds = time.perf_counter() - start
            self.manifest["stages"][stage.name] = {
                "key_sha": sha,
                "key": stage.key,
                "output": stage.output,
                "seconds": round(seconds, 1),
                "identity": self._identity(stage),
            }
            self._write_manifest()
            self._say(f"{label} done in {seconds:.0f} s: {target}")

    def _identity(self, stage: Stage) -> dict[str, Any]:
        """What each output of ``stage`` was made from (infoprobe.pipeline.chain)."""
        return {n: output_identity(self.path / n) for n in (stage.output, *stage.also_writes)}

    def _check_chain(self, stages: list[Stage]) -> set[str]:
        """Check every recorded, up-to-date output against the identity run.json recorded
        when it was built, before any stage runs; return the stages to redo (--overwrite)
        or raise naming the first output that was replaced or edited. Outputs recorded by
        an infoprobe that kept no identity get theirs recorded now."""
        stale, legacy = set(), False
        for stage in stages:
            recorded = self.manifest["stages"].get(stage.name)
            if not (recorded and recorded["key_sha"] == key_sha(stage.key)):
                continue
            if not stage.complete(self.path):
                continue
            try:
                found = self._identity(stage)
            except (ValueError, OSError) as err:  # a damaged output: the reader's line
                if self.overwrite:
                    stale.add(stage.name)
                    continue
                raise RunFolderError(
                    f"{' '.join(str(err).split())}; pass --overwrite to redo stage {stage.name!r}"
                ) from None
            legacy = legacy or "identity" not in recorded
            expected = recorded.setdefault("identity", found)
            if found == expected:
                continue
            if not self.overwrite:
                lines = json_differences(expected, found, "identity")[:4]
                why = "; ".join(lines).replace("file has", f"{MANIFEST} records")
                why = why.replace("this run has", "the file has")
                changed = next((n for n in found if found[n] != expected.get(n)), stage.output)
                raise RunFolderError(
                    f"{self.path / changed} is not the output stage {stage.name!r} "
                    f"recorded in {MANIFEST} ({why}): it was replaced or edited; restore it, "
                    "or pass --overwrite to redo the stage"
                )
            stale.add(stage.name)
        if legacy and self.manifest_path.is_file():
            self._write_manifest()
        return stale

    def _remove_outputs(self, stage: Stage) -> None:
        for name in (stage.output, *stage.also_writes):
            target = self.path / name
            self._check_kind(stage, name)
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()

    def _check_replacements(self, stages: list[Stage], stale: set[str]) -> None:
        """Before any stage runs, refuse every output a stage would replace that may not be
        replaced (without --overwrite, or not infoprobe's own output of the stage's kind),
        so that a refusal leaves the folder as it was."""
        for stage in stages:
            target = self.path / stage.output
            recorded = self.manifest["stages"].get(stage.name)
            same = bool(recorded) and recorded["key_sha"] == key_sha(stage.key)
            if stage.name in stale:
                names = [stage.output, *stage.also_writes]
            elif not target.exists() or same or (stage.resumable and not recorded):
                continue  # up to date, rebuilt in place, built new, or resumed
            else:
                self._refuse_without_overwrite(stage, target, recorded)
                names = [stage.output]
            for name in names:
                self._check_kind(stage, name)

    def _check_kind(self, stage: Stage, name: str) -> None:
        """Refuse (OutputExistsError) to replace ``name`` unless it is infoprobe's own
        output of the kind ``stage`` writes there."""
        kind = stage.kinds.get(name)
        if kind is None:
            raise RunFolderError(f"stage {stage.name!r}: no format marker known for {name}")
        refuse_existing(self.path / name, True, f"output of stage {stage.name!r}", kind=kind)

    def _replace_or_refuse(self, stage: Stage, target: Path, recorded: dict | None) -> None:
        self._refuse_without_overwrite(stage, target, recorded)
        self._check_kind(stage, stage.output)
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    def _refuse_without_overwrite(self, stage: Stage, target: Path, recorded: dict | None) -> None:
        if not self.overwrite:
            why = (
                "; ".join(json_differences(recorded["key"], stage.key)[:6])
                if recorded
                else "it is not recorded in run.json (an interrupted or foreign output)"
            )
            raise RunFolderError(
                f"{target} was made with other settings ({why}); pass --overwrite to redo "
                f"stage {stage.name!r}, or choose another --out"
            )

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)


def predict_for_cache(
    cache_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    orientation: str | Sequence[str] = "auto",
    overwrite: bool = False,
) -> Path:
    """InfoFlow's predicted sets on exactly the samples of an activation cache.

    The task and architecture are read from the cache's provenance, the samples from its
    ``/inputs/x``; the sets file records the cache's data seed, N and checkpoint hash so
    the comparison can refuse mismatched files. ``orientation``: "auto" (the orientation
    of each comparison the model's heads implement, read from the cached attention
    patterns by :func:`infoprobe.attention.orientation.choose_orientation`; all declared when the
    cache holds no patterns), "declared", "mirrored" (every comparison that has a mirror),
    or one of those two per comparison.
    """
    with open_cache(cache_path) as cache:
        spec, x = cache.spec, cache.x[:]
        task = task_from_dict(spec["task"])
        arch = ModelConfig.from_dict(cache.model_config)
        names = [f"blocks.{b}.attn.hook_pattern" for b in range(cache.n_blocks)]
        has_patterns = all(name in cache.hook_names for name in names)
        patterns = [cache.acts(name)[:] for name in names] if has_patterns else None
        check_finite(x, f"{cache_path}:/inputs/x")
        for name, pattern in zip(names, patterns or [], strict=False):
            check_finite(pattern, f"{cache_path}:acts/{name}")
        provenance = {
            "data_seed": spec["data_seed"],
            "n": spec["n"],
            "cache": str(cache_path),
            "checkpoint_sha256": cache.checkpoint_sha256,
            "random_init_seed": cache.provenance.get("random_init_seed"),
            "data_spec": spec,
        }
    if orientation == "auto" and patterns is None:
        orientation = None
        provenance["orientation"] = "declared: the cache holds no attention patterns"
    elif orientation == "auto":
        choices = choose_orientation(task, as_architecture(arch), x, patterns)
        orientation = [c.chosen for c in choices]
        provenance["orientation"] = [c.to_dict() for c in choices]
    prediction = predict(task, arch, orientation=orientation)
    provenance.setdefault("orientation", "given: " + ", ".join(prediction.orientation))
    return write_sets(out, prediction, x, provenance, overwrite=overwrite)


FLOW_FILES = ("flow.h5", "flow-random-init.h5")


def compare_and_report(
    folder: Path, settings: RunSettings, ckpt_dir: Path, report_dir: Path
) -> Path:
    """Compare predicted and observed sets once; write comparison.json and the report."""
    rollout = RolloutConfig() if settings.rollout else None
    sources = load_sources(
        folder / "pred.h5",
        folder / "probes.h5",
        influence_paths=[folder / f for f in FLOW_FILES] if settings.flow else [],
        cache_path=folder / "acts.h5",
        want_patterns=True,
    )
    history, ckpt_prov = checkpoint_history(ckpt_dir, sources)
    compared = compare_sources(sources, rollout)
    extra_prov = {f"checkpoint ({ckpt_dir})": ckpt_prov}
    inputs = from_sources(
        sources,
        compared,
        history=history,
        extra_provenance=extra_prov,
        notes={"training": _training_note(ckpt_prov)},
    )
    write_comparisons(
        folder / "comparison.json",
        compared.comparisons,
        extra=compared.extra(),
        provenance=inputs.provenance,
        overwrite=True,
    )
    return write_report(report_dir, inputs, overwrite=True)


def test_rows(n: int, probe_settings: ProbeSettings) -> np.ndarray:
    """The cache rows of the probes' test split (the split is decided by n and its seed)."""
    split = make_split(n, probe_settings.fractions, probe_settings.split_seed)
    return np.flatnonzero(split == TEST)


def _training_note(ckpt_prov: dict) -> str:
    metrics = ckpt_prov.get("metrics", {})
    if "val_nmse" not in metrics:
        return "checkpoint without training metrics"
    return (
        f"validation NMSE {metrics['val_nmse']:.3g}, test NMSE {metrics['test_nmse']:.3g} "
        f"(best at step {metrics.get('best_step')})"
    )


def analysis_stages(
    folder: RunFolder, ckpt_dir: Path, ckpt_key: dict, settings: RunSettings
) -> list[Stage]:
    """The stages after a checkpoint exists: cache, control, probe, predict, compare, report."""
    path = folder.path
    cache_opts = {
        "n": settings.n_cache,
        "sites": settings.sites,
        "batch_size": settings.batch_size,
        "device": settings.device,
    }
    cache_key = {"checkpoint": ckpt_key, **cache_opts}
    control_key = {**cache_key, "random_init_seed": CONTROL_SEED}
    probe_settings = ProbeSettings(probe=settings.probe, device=settings.device)
    probe_key = {"cache": cache_key, "control": control_key, "settings": probe_settings.to_dict()}
    flow_settings = settings.influence
    flow_key = {
        "cache": cache_key,
        "settings": flow_settings.to_dict(),
        "rows": {"split": "test", "fractions": list(probe_settings.fractions),
                 "split_seed": probe_settings.split_seed},
    }  # fmt: skip
    flow_control_key = {**flow_key, "random_init_seed": CONTROL_SEED}
    report_key = {
        "probe": probe_key,
        "flow": [flow_key, flow_control_key] if settings.flow else None,
        "rollout": settings.rollout,
    }
    quiet = not folder.progress

    def flow_stage(name: str, output: str, key: dict, seed: int | None) -> Stage:
        return Stage(
            name,
            output,
            key,
            resumable=True,
            kinds={output: INFLUENCE_FORMAT},
            build=lambda out: influence_for_cache(
                ckpt_dir,
                path / "acts.h5",
                out,
                settings=flow_settings,
                random_init_seed=seed,
                rows=test_rows(settings.n_cache, probe_settings),
                device=settings.device,
                progress=not quiet,
            ),
        )

    flow_stages = (
        [
            flow_stage("flow", FLOW_FILES[0], flow_key, None),
            flow_stage("flow-control", FLOW_FILES[1], flow_control_key, CONTROL_SEED),
        ]
        if settings.flow
        else []
    )
    return [
        Stage(
            "cache",
            "acts.h5",
            cache_key,
            resumable=True,
            kinds={"acts.h5": CACHE_FORMAT},
            build=lambda out: cache_checkpoint(ckpt_dir, out, progress=not quiet, **cache_opts),
        ),
        Stage(
            "control",
            "acts-random-init.h5",
            control_key,
            resumable=True,
            kinds={"acts-random-init.h5": CACHE_FORMAT},
            build=lambda out: cache_checkpoint(
                ckpt_dir, out, progress=not quiet, random_init_seed=CONTROL_SEED, **cache_opts
            ),
        ),
        Stage(
            "probe",
            "probes.h5",
            probe_key,
            kinds={"probes.h5": PROBES_FORMAT},
            build=lambda out: run_probe(
                path / "acts.h5",
                out,
                control_path=path / "acts-random-init.h5",
                settings=probe_settings,
                progress=not quiet,
            ),
        ),
        *flow_stages,
        Stage(
            "predict",
            "pred.h5",
            {"cache": cache_key, "orientation": "auto"},
            kinds={"pred.h5": SETS_FORMAT},
            build=lambda out: predict_for_cache(path / "acts.h5", out),
        ),
        Stage(
            "compare",
            "report",
            report_key,
            build=lambda out: compare_and_report(path, settings, ckpt_dir, out),
            also_writes=("comparison.json",),
            kinds={"report": REPORT_FORMAT, "comparison.json": COMPARISON_FORMAT},
        ),
    ]


def _summary(folder: RunFolder, ckpt_dir: Path) -> RunSummary:
    meta = read_checkpoint_meta(ckpt_dir)
    comparison = read_comparisons(folder.path / "comparison.json")
    sets = read_sets(folder.path / "pred.h5")
    metrics = meta.get("metrics", {})
    return RunSummary(
        out=folder.path,
        task=meta["task"],
        heads=meta["model_config"]["heads"],
        val_nmse=metrics.get("val_nmse"),
        test_nmse=metrics.get("test_nmse"),
        verdict=sets.prediction["verdict"],
        exponent=sets.prediction["exponent"],
        layer_verdicts=list(comparison.get("headline", [])),
        report=folder.path / "report" / "report.html",
        skipped=folder.skipped,
        orientation=recorded_orientation(sets.provenance.get("orientation")),
        rate=predict(
            task_from_dict(meta["task"]),
            ModelConfig.from_dict(meta["model_config"]),
            kth_law=sets.prediction.get("kth_law", "tail"),
        ).rate_note(),
    )


def check_sites(hook_names: Sequence[str], n_blocks: int, sites: str) -> list[str]:
    """The hook names ``sites`` selects among a model's ``hook_names``, checked before any
    stage runs: UnknownSiteError for a site the model lacks, RunFolderError when the
    selection lacks what a later stage reads (the probes: the layer residuals; compare and
    the report: every block's attention pattern)."""
    chosen = resolve_sites(hook_names, sites)
    needed = {
        "probe (the layer residuals)": layer_sites(n_blocks),
        "compare (the attention patterns)": [
            f"blocks.{b}.attn.hook_pattern" for b in range(n_blocks)
        ],
    }
    for stage, names in needed.items():
        missing = [name for name in names if name not in chosen]
        if missing:
            raise RunFolderError(
                f"RunSettings.sites (--sites) {sites!r} does not cache {missing}, which stage "
                f"{stage} reads; expected sites that include them, such as "
                f"{RunSettings().sites!r} (the default)"
            )
    return chosen


SEEDS_FOLDER = "seeds"
"""Where ``run_pipeline(..., seeds=...)`` keeps every seed's checkpoint."""


def _train_stage(
    task: Task, model_cfg: ModelConfig, train_cfg: TrainConfig, dst: Path, **kw
) -> None:
    """Train into ``dst``; a diverging run keeps nothing there and stops with one line."""
    try:
        train_and_save(task, model_cfg, train_cfg, dst, **kw)
    except NonFiniteLossError as err:
        if dst.exists():
            shutil.rmtree(dst)  # a diverged model is not this stage's output
        raise RunFolderError(
            f"stage 'train' diverged: non-finite training loss at step {err.step}; nothing "
            "was kept. Lower --lr or set --grad-clip and re-run into the same folder"
        ) from None


def _train_seeds_stage(
    task: Task,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    seeds: Sequence[int],
    dst: Path,
    **kw,
) -> None:
    """Train ``seeds`` as one ensemble into ``dst.parent/seeds`` (resumable) and copy the
    seed with the best validation NMSE to ``dst``. Finished seeds of the same settings are
    kept; a seeds folder of other settings is replaced (the run folder has already checked
    that this stage may be rebuilt)."""
    folder = dst.parent / SEEDS_FOLDER
    if (folder / "summary.json").is_file() and differing_settings(
        folder, task, model_cfg, train_cfg, seeds
    ):
        shutil.rmtree(folder)
    summary = train_seeds(task, model_cfg, train_cfg, seeds, folder, **kw)
    if summary["best_seed"] is None:
        raise RunFolderError(
            f"stage 'train' diverged: every seed of {list(seeds)} stopped on a non-finite "
            "loss. Lower --lr or set --grad-clip and re-run into the same folder"
        )
    best = seed_dir(folder, summary["best_seed"])
    with atomic_output(dst, overwrite=True, directory=True, what="checkpoint") as tmp:
        shutil.copytree(best, tmp, dirs_exist_ok=True)


@locked_output("out")
def run_pipeline(
    out: str | os.PathLike,
    task: Task,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    settings: RunSettings | None = None,
    *,
    seeds: Sequence[int] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> RunSummary:
    """Train a model on ``task`` and run every analysis stage into folder ``out``.

    ``seeds``: train these seeds together as one batched ensemble (``out/seeds/``, one
    checkpoint per seed and a summary) and analyse the one with the best validation NMSE,
    as the paper reports the best of several seeds; None trains ``train_cfg.seed`` alone.
    ``progress`` shows tqdm bars; ``log`` receives the stage lines and one line per
    training evaluation (default: print them when ``progress``).
    """
    settings = settings or RunSettings()
    model = InfoFlowTransformer(model_cfg)  # its hook names, to check the sites up front
    check_sites(list(model.hook_dict), model_cfg.n_layers, settings.sites)
    folder = RunFolder(out, overwrite=overwrite, progress=progress, log=log)
    ckpt_dir = folder.path / "checkpoint"
    train_key = {"task": task.to_dict(), "model": model_cfg.to_dict(), "train": train_cfg.to_dict()}
    train_log = None if progress else log
    if seeds is None:
        build = partial(_train_stage, task, model_cfg, train_cfg, progress=progress, log=train_log)
    else:
        train_key["seeds"] = list(seeds)
        build = partial(
            _train_seeds_stage, task, model_cfg, train_cfg, seeds, progress=progress, log=train_log
        )
    train_stage = Stage(
        "train", "checkpoint", train_key, build=build, kinds={"checkpoint": CHECKPOINT_FORMAT}
    )
    ckpt_key = {"train": key_sha(train_key)}
    folder.run([train_stage, *analysis_stages(folder, ckpt_dir, ckpt_key, settings)])
    summary = _summary(folder, ckpt_dir)
    if seeds is not None:
        members = json.loads((folder.path / SEEDS_FOLDER / "summary.json").read_text())["members"]
        summary.seed_val_nmse = {int(s): m["val_nmse"] for s, m in members.items() if m}
    return summary


@locked_output("out")
def probe_checkpoint(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    settings: RunSettings | None = None,
    *,
    task: Task | None = None,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run every analysis stage on an existing checkpoint folder.

    The checkpoint is used in place; only one without a task spec is copied into
    ``out/checkpoint`` with ``task`` recorded (``task`` is required then).
    """
    settings = settings or RunSettings()
    source = Path(checkpoint).resolve()
    ck = load_checkpoint(source, task=task)  # validates, verifies the weights hash up front
    check_sites(list(ck.model.hook_dict), ck.model_config.n_layers, settings.sites)
    folder = RunFolder(out, overwrite=overwrite, progress=progress, log=log)
    ckpt_key = {
        "checkpoint": str(source),
        "weights_sha256": ck.weights_sha256,
        "task": ck.task.to_dict(),
    }
    stages = []
    ckpt_dir = source
    if "task" not in read_checkpoint_meta(source, require_task=False):
        ckpt_dir = folder.path / "checkpoint"
        stages.append(
            Stage(
                "checkpoint",
                "checkpoint",
                ckpt_key,
                build=lambda dst: with_task(source, dst, ck.task),
                kinds={"checkpoint": CHECKPOINT_FORMAT},
            )
        )
    folder.run([*stages, *analysis_stages(folder, ckpt_dir, ckpt_key, settings)])
    return _summary(folder, ckpt_dir)
