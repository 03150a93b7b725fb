"""The stages after a checkpoint exists: cache, control, probe, flow, flow-control, predict,
compare (with the report)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoprobe.attention.rollout import RolloutConfig
from infoprobe.base import formats
from infoprobe.base.digest import file_sha256
from infoprobe.base.fdr import FDR_Q as NULL_Q
from infoprobe.base.lazy import deferred
from infoprobe.pipeline.folder import RunFolder, RunStage
from infoprobe.pipeline.probe_settings import ProbeSettings
from infoprobe.pipeline.settings import CONTROL_SEED, RunSettings

# What the stages compute with, imported when a stage runs: listing the stages (``run
# --help``) loads none of it.
cache_checkpoint = deferred("infoprobe.pipeline.caching", "cache_checkpoint")
influence_for_cache = deferred("infoprobe.influence.job", "influence_for_cache")
predict_for_cache = deferred("infoprobe.pipeline.predicting", "predict_for_cache")
run_probe = deferred("infoprobe.pipeline.probing", "run_probe")
sets_for_cache = deferred("infoprobe.pipeline.given_sets", "sets_for_cache")

FLOW_FILES = ("flow.h5", "flow-random-init.h5")


def beside_file(family: str) -> str:
    """The run folder's results file of a probe fitted beside the main one."""
    return f"probes-{family}.h5"


@dataclass(frozen=True)
class DataFiles:
    """A run's own data (:mod:`infoprobe.pipeline.inputs`, :mod:`.given_sets`): ``inputs``
    x [n, T, d] and ``targets`` y instead of the task's samples, ``sets`` bool
    [L+1, n, T+1, T] compared instead of InfoFlow's (None: the task's)."""

    inputs: Path | None = None
    targets: Path | None = None
    sets: Path | None = None

    def cache_options(self) -> dict:
        """The inputs and targets files for the cache stages (none: the task's samples)."""
        if self.inputs is None:
            return {}
        return {
            "inputs": str(self.inputs),
            "targets": None if self.targets is None else str(self.targets),
        }

    def key(self) -> dict:
        """The files' SHA-256 (a stage is redone when a file changes)."""
        named = {"inputs": self.inputs, "targets": self.targets, "sets": self.sets}
        return {k: file_sha256(v) for k, v in named.items() if v is not None}


def compare_and_report(
    folder: Path,
    ckpt_dir: Path,
    report_dir: Path,
    *,
    rollout: bool,
    flow: bool,
    null_q: float | None = NULL_Q,
    beside: Sequence[str] = (),
) -> Path:
    """Compare predicted and observed sets once; write comparison.json and the report.
    ``rollout``: also compare attention rollout; ``flow``: read the flow files; ``null_q``:
    the null rule's false-discovery rate (None: no null rule); ``beside``: probe results
    files of other families in the folder, compared beside probes.h5."""
    from infoprobe.compare.files import write_comparisons
    from infoprobe.compare.sources import checkpoint_history, compare_sources, load_sources
    from infoprobe.report.build import from_sources, write_report

    sources = load_sources(
        folder / "pred.h5",
        folder / "probes.h5",
        influence_paths=[folder / f for f in FLOW_FILES] if flow else [],
        cache_path=folder / "acts.h5",
        want_patterns=True,
        beside=[folder / name for name in beside],
    )
    history, ckpt_prov = checkpoint_history(ckpt_dir, sources)
    rollout = rollout and sources.patterns is not None  # a model that hides its patterns
    compared = compare_sources(sources, RolloutConfig() if rollout else None, null_q=null_q)
    extra_prov = {f"checkpoint ({ckpt_dir})": ckpt_prov}
    inputs = from_sources(
        sources,
        compared,
        history=history,
        extra_provenance=extra_prov,
        notes={"training": _training_note(ckpt_prov), **_pattern_note(sources)},
    )
    write_comparisons(
        folder / "comparison.json",
        compared.comparisons,
        extra=compared.extra(),
        provenance=inputs.provenance,
        overwrite=True,
    )
    return write_report(report_dir, inputs, overwrite=True)


def _pattern_note(sources) -> dict[str, str]:
    if sources.patterns is not None:
        return {}
    return {
        "observed program": "not read: the model does not expose its attention weights (its "
        "site map names no pattern), so neither the observed program nor attention rollout "
        "can be computed; every other instrument ran"
    }


def _training_note(ckpt_prov: dict) -> str:
    metrics = ckpt_prov.get("metrics", {})
    shown = [
        f"{label} {metrics[key]:.3g}"
        for key, label in (("val_nmse", "validation NMSE"), ("test_nmse", "test NMSE"))
        if isinstance(metrics.get(key), int | float)
    ]
    if not shown:
        return "checkpoint without training metrics"
    step = f" (best at step {metrics['best_step']})" if "best_step" in metrics else ""
    if "factory" in ckpt_prov.get("model_config", {}):  # the user's own training
        return ", ".join(shown) + step + " (supplied in checkpoint.json, not measured by infoprobe)"
    return ", ".join(shown) + step + " (measured by infoprobe's training, in checkpoint.json)"


def analysis_stages(
    folder: RunFolder,
    ckpt_dir: Path,
    ckpt_key: dict,
    settings: RunSettings,
    *,
    trust_code: bool = False,
    data: DataFiles | None = None,
) -> list[RunStage]:
    """The stages after a checkpoint exists: cache, control, probe, predict, compare, report
    (``trust_code``: the checkpoint's own code may run, as in :func:`load_checkpoint`;
    ``data``: inputs from a file instead of the task's samples, and the user's own sets
    instead of InfoFlow's)."""
    path = folder.path
    data = data or DataFiles()
    cache_opts = {**settings.cache_options(), **data.cache_options()}
    cache_key = {"checkpoint": ckpt_key, **cache_opts, **data.key()}
    control_key = {**cache_key, "random_init_seed": CONTROL_SEED}
    probe_settings = settings.probes
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
        "null_q": settings.null_q,
    }
    if settings.beside:  # absent otherwise, so folders made before it keep their key
        report_key["beside"] = [b.to_dict() for b in settings.beside]
    quiet = not folder.progress

    def flow_stage(name: str, output: str, key: dict, seed: int | None) -> RunStage:
        return RunStage(
            name,
            output,
            key,
            resumable=True,
            kinds={output: formats.INFLUENCE},
            build=lambda out: influence_for_cache(
                ckpt_dir,
                path / "acts.h5",
                out,
                settings=flow_settings,
                random_init_seed=seed,
                rows=probe_settings.test_rows(settings.n_cache),
                device=settings.device,
                progress=not quiet,
                trust_code=trust_code,
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

    def probe_stage(name: str, output: str, probe: ProbeSettings) -> RunStage:
        return RunStage(
            name,
            output,
            {"cache": cache_key, "control": control_key, "settings": probe.to_dict()},
            kinds={output: formats.PROBE_RESULTS},
            build=lambda out: run_probe(
                path / "acts.h5",
                out,
                control_path=path / "acts-random-init.h5",
                settings=probe,
                progress=not quiet,
            ),
        )

    beside_stages = [
        probe_stage(f"probe-{b.probe}", beside_file(b.probe), b) for b in settings.beside
    ]
    return [
        RunStage(
            "cache",
            "acts.h5",
            cache_key,
            resumable=True,
            kinds={"acts.h5": formats.CACHE},
            build=lambda out: cache_checkpoint(
                ckpt_dir, out, progress=not quiet, trust_code=trust_code, **cache_opts
            ),
        ),
        RunStage(
            "control",
            "acts-random-init.h5",
            control_key,
            resumable=True,
            kinds={"acts-random-init.h5": formats.CACHE},
            build=lambda out: cache_checkpoint(
                ckpt_dir,
                out,
                progress=not quiet,
                random_init_seed=CONTROL_SEED,
                trust_code=trust_code,
                **cache_opts,
            ),
        ),
        probe_stage("probe", "probes.h5", probe_settings),
        *beside_stages,
        *flow_stages,
        RunStage(
            "predict",
            "pred.h5",
            {"cache": cache_key, "orientation": "auto"},
            kinds={"pred.h5": formats.PREDICTED_SETS},
            build=lambda out: predict_for_cache(path / "acts.h5", out),
        )
        if data.sets is None
        else RunStage(
            "sets",
            "pred.h5",
            {"cache": cache_key, "sets": data.key()["sets"]},
            kinds={"pred.h5": formats.PREDICTED_SETS},
            build=lambda out: sets_for_cache(data.sets, path / "acts.h5", out),
        ),
        RunStage(
            "compare",
            "report",
            report_key,
            build=lambda out: compare_and_report(
                path,
                ckpt_dir,
                out,
                rollout=settings.rollout,
                flow=settings.flow,
                null_q=settings.null_q,
                beside=[beside_file(b.probe) for b in settings.beside],
            ),
            also_writes=("comparison.json",),
            kinds={"report": formats.REPORT, "comparison.json": formats.COMPARISON},
        ),
    ]
