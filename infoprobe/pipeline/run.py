"""The main job: train → cache → probe and flow (each with a random-init control) → predict →
compare → report.

A run folder holds one file per stage and a manifest ``run.json``
(:mod:`infoprobe.pipeline.folder`: resumption, refusals); the stages after training are
:func:`infoprobe.pipeline.stages.analysis_stages`, their settings
:class:`infoprobe.pipeline.settings.RunSettings`.

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
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from infoprobe.base.atomic import atomic_output, locked_output
from infoprobe.base.errors import UsageError
from infoprobe.checkpoint import FORMAT as CHECKPOINT_FORMAT
from infoprobe.checkpoint import load_checkpoint, read_checkpoint_meta, with_task
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.folder import RunFolder, RunFolderError, RunStage, key_sha
from infoprobe.pipeline.inputs import read_inputs
from infoprobe.pipeline.seed_analyses import (
    ANALYSES_FOLDER,
    SEEDS_FOLDER,
    analysis_settings,
    record_analysis,
    seeds_to_analyse,
)
from infoprobe.pipeline.settings import RunSettings, check_sites
from infoprobe.pipeline.stages import DataFiles, analysis_stages
from infoprobe.pipeline.summary import RunSummary, run_summary
from infoprobe.tasks import Task
from infoprobe.train.budget import Resume
from infoprobe.train.config import NonFiniteLossError, TrainConfig
from infoprobe.train.save import train_and_save
from infoprobe.train.seeds import differing_settings, seed_dir, train_seeds


def _train_stage(
    task: Task, model_cfg: ModelConfig, train_cfg: TrainConfig, dst: Path, **kw
) -> None:
    """Train into ``dst``; a diverging run keeps nothing there and stops with one line."""
    try:
        train_and_save(task, model_cfg, train_cfg, dst, keep_diverged=False, **kw)
    except NonFiniteLossError as err:
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
    resume: Resume | None = None,
) -> RunSummary:
    """Train a model on ``task`` and run every analysis stage into folder ``out``.

    ``seeds``: train these seeds together as one batched ensemble (``out/seeds/``, one
    checkpoint per seed and a summary) and analyse the one with the best validation NMSE,
    as the paper reports the best of several seeds; None trains ``train_cfg.seed`` alone.
    ``progress`` shows tqdm bars; ``log`` receives the stage lines and one line per
    training evaluation (default: print them when ``progress``). ``resume``: training
    keeps its resumable state in the run folder (``checkpoint.state.safetensors``, or
    ``seeds/train.state.safetensors``) and continues from it; with a budget the run stops
    at the first state after it (:class:`~infoprobe.train.state.BudgetStop`), and the same
    call continues it.
    """
    settings = settings or RunSettings()
    task.structure().check_fits(task.T)  # a structure the engine cannot run: before training
    model = InfoFlowTransformer(model_cfg)  # its hook names, to check the sites up front
    check_sites(list(model.hook_dict), model_cfg.n_layers, settings.sites)
    folder = RunFolder(out, overwrite=overwrite, progress=progress, log=log)
    ckpt_dir = folder.path / "checkpoint"
    train_key = {"task": task.to_dict(), "model": model_cfg.to_dict(), "train": train_cfg.to_dict()}
    train_log = None if progress else log
    if seeds is None:
        build = partial(_train_stage, task, model_cfg, train_cfg, progress=progress,
                        log=train_log, resume=resume)  # fmt: skip
    else:
        train_key["seeds"] = list(seeds)
        build = partial(_train_seeds_stage, task, model_cfg, train_cfg, seeds,
                        progress=progress, log=train_log, resume=resume)  # fmt: skip
    train_stage = RunStage(
        "train", "checkpoint", train_key, build=build, kinds={"checkpoint": CHECKPOINT_FORMAT}
    )
    ckpt_key = {"train": key_sha(train_key)}
    folder.run([train_stage, *analysis_stages(folder, ckpt_dir, ckpt_key, settings)])
    summary = run_summary(folder, ckpt_dir)
    if seeds is not None:
        record_analysis(folder.path, settings)  # `infoprobe spread RUN` analyses the others alike
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
    trust_code: bool = False,
    data: DataFiles | None = None,
) -> RunSummary:
    """Run every analysis stage on an existing checkpoint folder.

    The checkpoint is used in place; only one without a task spec is copied into
    ``out/checkpoint`` with ``task`` recorded (``task`` is required then, unless ``data``
    gives the inputs). A checkpoint naming its own model code is refused unless
    ``trust_code`` (:func:`load_checkpoint`). ``data``: inputs x from a file (their first
    ``settings.n_cache`` rows are cached) and, for a checkpoint with no task, the sets to
    compare with (:class:`~infoprobe.pipeline.stages.DataFiles`).
    """
    settings = settings or RunSettings()
    data = data or DataFiles()
    source = Path(checkpoint).resolve()
    # validates, verifies the weights hash and decides trust before any output exists
    ck = load_checkpoint(
        source, task=task, trust_code=trust_code, allow_no_task=data.inputs is not None
    )
    if (ck.task is None or data.inputs is not None) and data.sets is None:
        why = (
            f"{source}: the checkpoint records no task, so there is no InfoFlow program"
            if ck.task is None
            else f"{data.inputs}: inputs from a file carry no task, so InfoFlow predicts no sets"
        )
        raise UsageError(
            f"{why} to compare with: give your own sets (--sets SETS.npy, bool [L+1, n, T+1, "
            "T] over the inputs' rows), or run cache --inputs, influence and probe alone"
        )
    if ck.task is not None:
        ck.task.structure().check_fits(ck.task.T)
    check_sites(list(ck.model.hook_dict), ck.model_config.n_layers, settings.sites)
    if data.inputs is not None:  # checked (shape, dtype, finite) before any output exists
        cfg = ck.model_config
        rows = len(read_inputs(data.inputs, data.targets, T=cfg.n_ctx, d=cfg.d_in,
                               d_out=cfg.d_out).x)  # fmt: skip
        settings = replace(settings, n_cache=min(settings.n_cache, rows))
    folder = RunFolder(out, overwrite=overwrite, progress=progress, log=log)
    ckpt_key = {
        "checkpoint": str(source),
        "weights_sha256": ck.weights_sha256,
        **({"model_code_sha256": ck.model_code_sha256} if ck.model_code_sha256 else {}),
        "task": None if ck.task is None else ck.task.to_dict(),
    }
    stages = []
    ckpt_dir = source
    if task is not None and "task" not in read_checkpoint_meta(source, require_task=False):
        ckpt_dir = folder.path / "checkpoint"
        stages.append(
            RunStage(
                "checkpoint",
                "checkpoint",
                ckpt_key,
                build=lambda dst: with_task(source, dst, ck.task, trust_code=trust_code),
                kinds={"checkpoint": CHECKPOINT_FORMAT},
            )
        )
    analysis = analysis_stages(
        folder, ckpt_dir, ckpt_key, settings, trust_code=trust_code, data=data
    )
    folder.run([*stages, *analysis])
    return run_summary(folder, ckpt_dir)


def analyse_seeds(
    run: str | Path,
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Analyse every seed of the ``run --seeds`` folder ``run`` that has no analysis yet,
    with the best seed's settings; return every seed's folder, RUN (the best seed) first,
    the others in seed order."""
    run = Path(run)
    seeds = run / SEEDS_FOLDER
    others = seeds_to_analyse(run)
    settings = analysis_settings(run)
    folders = [run]
    for seed in others:
        out = seeds / ANALYSES_FOLDER / f"seed-{seed}"
        if log is not None:
            log(f"seed {seed}: analysing {seeds / f'seed-{seed}'} into {out}")
        probe_checkpoint(seeds / f"seed-{seed}", out, settings, progress=progress, log=log)
        folders.append(out)
    return folders
