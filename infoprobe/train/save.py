"""Train and write the checkpoint: the output side of :func:`infoprobe.train.loop.train`
(an output refused before any work, the run's state beside it, a finished run that is
asked for again)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infoprobe.base.atomic import check_writable, refuse_existing
from infoprobe.checkpoint import FORMAT as CHECKPOINT_FORMAT
from infoprobe.checkpoint import save_checkpoint
from infoprobe.model import ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.budget import Resume
from infoprobe.train.config import NonFiniteLossError, TrainConfig, TrainResult
from infoprobe.train.loop import train
from infoprobe.train.state import StateFile, state_path


def run_settings(task: Task, model_cfg: ModelConfig, cfg: TrainConfig) -> dict[str, Any]:
    """What a run's state must agree on with the run that continues it: the task, the
    model and the whole training recipe (seed included)."""
    return {"task": task.to_dict(), "model_config": model_cfg.to_dict(),
            "train_config": cfg.to_dict()}  # fmt: skip


def finished_run(out: str | Path, task: Task, model_cfg: ModelConfig, cfg: TrainConfig):
    """The metrics of the checkpoint at ``out`` if it is this run, finished (its task,
    model and training recipe are these), else None: running the same command again after
    it finished has nothing left to do."""
    from infoprobe.checkpoint import CheckpointError, read_checkpoint_meta

    if not (Path(out) / "checkpoint.json").is_file():
        return None
    try:
        meta = read_checkpoint_meta(out)
    except CheckpointError:
        return None
    recorded = {k: meta.get(k) for k in ("task", "model_config", "train_config")}
    wanted = json.loads(json.dumps(run_settings(task, model_cfg, cfg)))
    same = recorded == {"task": wanted["task"], "model_config": wanted["model_config"],
                        "train_config": wanted["train_config"]}  # fmt: skip
    return meta.get("metrics", {}) if same else None


def check_output_folder(path: Path, overwrite: bool = False, what: str = "checkpoint") -> None:
    """Refuse, before any work, an output folder that could not be written at the end.

    ``path`` must not exist (unless ``overwrite``), and its nearest existing ancestor
    must be a writable folder (missing folders in between are created when writing), so
    a path under a regular file or in a read-only folder fails now, not after training.
    """
    refuse_existing(path, overwrite, what, kind=CHECKPOINT_FORMAT)
    check_writable(path, f"{what} folder")


def train_and_save(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    out,
    *,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    threads: int | str | None = None,
    keep_diverged: bool = True,
    resume: Resume | None = None,
) -> TrainResult:
    """Train (``threads``: see :func:`train`), then write the checkpoint folder ``out``
    (refused up front if it exists or cannot be written: see :func:`check_output_folder`).
    ``resume``: keep a resumable state beside it, ``OUT.state.safetensors``
    (:func:`~infoprobe.train.state.state_path`), and continue from one that is there.

    If the loss diverges, :class:`NonFiniteLossError` propagates; with ``keep_diverged``
    the last good model is saved first (its metrics record where training stopped),
    without it nothing is written (a pipeline stage whose output must be a trained model).
    """

    def save(result: TrainResult) -> None:
        save_checkpoint(
            out,
            result.model,
            task,
            train_config=cfg.to_dict(),
            history=result.history,
            metrics=result.metrics(),
            overwrite=overwrite,
        )

    check_output_folder(Path(out), overwrite)
    state = None
    if resume is not None:
        settings = run_settings(task, model_cfg, cfg)
        state = StateFile(state_path(out), settings, resume)
    try:
        result = train(
            task, model_cfg, cfg, progress=progress, log=log, threads=threads, state=state
        )
    except NonFiniteLossError as err:
        if keep_diverged:
            save(err.result)
        raise
    save(result)
    return result
