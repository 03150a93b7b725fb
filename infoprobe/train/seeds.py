"""Several seeds of one model, trained together as a batched ensemble, written as a folder:

    OUT/summary.json     the header of docs/conventions.md (format "infoprobe.seeds",
                         schema_version 2; files of schema 1, which had no version,
                         are still read), the settings, every seed's validation
                         and test NMSE, how it stopped, and the best seed; rewritten
                         (atomically) each time a seed finishes
    OUT/seed-<S>/        one checkpoint per seed, written as soon as that seed finishes
    OUT/train.state.safetensors  the unfinished seeds' resumable state (with ``resume``;
                         removed when they finish)

A rerun of the same command keeps every seed whose checkpoint exists and trains the rest
(after a kill, nothing half-written stands under a final name). A folder made with other
settings is refused unless ``overwrite``, which starts it afresh.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output, check_writable, refuse_existing
from infoprobe.base.header import check_header, make_header
from infoprobe.checkpoint import read_checkpoint_meta, save_checkpoint
from infoprobe.model import ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.budget import Resume
from infoprobe.train.config import TrainConfig, TrainResult
from infoprobe.train.ensemble import EnsembleError, train_ensemble
from infoprobe.train.state import StateFile

FORMAT = formats.SEEDS
SCHEMA_VERSION = 2
"""2: the common header; schema 1 summaries carried only ``format`` and are still read."""
SUMMARY = "summary.json"
STATE = "train.state.safetensors"
"""The unfinished ensemble's resumable state, inside the seeds folder."""


def seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def _settings(task: Task, model_cfg: ModelConfig, cfg: TrainConfig, seeds: Sequence[int]):
    train = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "compile", "device")}
    return {
        "task": task.to_dict(),
        "model_config": model_cfg.to_dict(),
        "train_config": train,
        "seeds": list(seeds),
    }


def _finished(out: Path, seed: int) -> dict | None:
    """The metrics of seed ``seed``'s checkpoint if it was written, else None."""
    folder = seed_dir(out, seed)
    if not (folder / "checkpoint.json").is_file():
        return None
    return read_checkpoint_meta(folder, require_task=False).get("metrics", {})


def _unchanged(path: Path, summary: dict) -> bool:
    """Whether ``path`` already holds ``summary`` but for the time it was written."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    same = json.loads(json.dumps(summary))  # as JSON reads it back (keys, tuples)
    return isinstance(found, dict) and {**found, "created": None} == {**same, "created": None}


def write_summary(out: Path, settings: dict, metrics: dict[int, dict]) -> Path:
    """Write ``OUT/summary.json``: settings, per-seed metrics (None: not finished) and the
    seed with the lowest validation NMSE among the finished ones."""
    finished = {s: m for s, m in metrics.items() if m is not None}
    finite = {s: m["val_nmse"] for s, m in finished.items() if math.isfinite(m["val_nmse"])}
    best = min(finite, key=finite.get) if finite else None
    summary = {
        **make_header(FORMAT, SCHEMA_VERSION),
        **settings,
        "members": {
            str(s): None if m is None else {**m, "checkpoint": seed_dir(out, s).name}
            for s, m in metrics.items()
        },
        "best_seed": best,
        "best_val_nmse": finite.get(best),
        "finished": len(finished),
    }
    if _unchanged(out / SUMMARY, summary):  # a resumed run that is then refused writes nothing
        return out / SUMMARY
    with atomic_output(out / SUMMARY, overwrite=True, kind=FORMAT) as tmp:
        tmp.write_text(json.dumps(summary, indent=1, sort_keys=True))
    return out / SUMMARY


def differing_settings(
    out: Path, task: Task, model_cfg: ModelConfig, cfg: TrainConfig, seeds: Sequence[int]
) -> list[str]:
    """The settings fields in which the seeds folder ``out`` differs from these."""
    settings = json.loads(json.dumps(_settings(task, model_cfg, cfg, seeds)))
    summary = json.loads((out / SUMMARY).read_text())
    check_header(
        summary,
        out / SUMMARY,
        fmt=FORMAT,
        readable=range(1, SCHEMA_VERSION + 1),
        error=EnsembleError,
        unversioned=1,
    )
    return [k for k in settings if summary.get(k) != settings[k]]


def prepare_folder(out: Path, differ: Callable[[], list[str]], overwrite: bool) -> None:
    """Create ``out`` or check that it holds a run of the same settings (see module doc);
    ``differ()`` lists the settings fields that differ from the folder's."""
    if out.is_dir() and not any(out.iterdir()):
        pass  # an empty folder made for the run
    elif out.exists():
        refuse_existing(out, True, "seeds folder", kind=FORMAT)
        if overwrite:
            shutil.rmtree(out)
        elif fields_ := differ():
            raise EnsembleError(
                f"{out} holds seeds trained with other settings (field(s) {fields_} of "
                f"{out / SUMMARY} differ); pass --overwrite (overwrite=True) to start afresh "
                "or choose another --out"
            )
    check_writable(out, "seeds folder")
    out.mkdir(parents=True, exist_ok=True)


def train_seeds(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    seeds: Sequence[int],
    out: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    threads: int | str | None = None,
    resume: Resume | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` with every seed of ``seeds`` as one batched ensemble and write the
    folder ``out`` (module docstring); return the summary (the content of summary.json).

    Seeds already finished in ``out`` are kept and not trained again. A seed whose loss
    became non-finite keeps its last good model; its ``stopped`` says so. ``threads``:
    torch CPU threads, as for :func:`~infoprobe.train.loop.train`. ``resume``: the
    ensemble keeps its resumable state in ``OUT/train.state.safetensors`` and continues
    from one that is there (:mod:`infoprobe.train.state`).
    """
    out, seeds = Path(out), [int(s) for s in seeds]
    if len(set(seeds)) != len(seeds):
        dup = sorted({s for s in seeds if seeds.count(s) > 1})
        raise EnsembleError(f"duplicate seed(s) {dup} in {seeds}; give each seed once")
    if not seeds:
        raise EnsembleError("no seeds given (M = 0); give at least one seed")
    settings = _settings(task, model_cfg, cfg, seeds)
    prepare_folder(out, partial(differing_settings, out, task, model_cfg, cfg, seeds), overwrite)
    metrics = {s: _finished(out, s) for s in seeds}
    todo = [s for s in seeds if metrics[s] is None]
    write_summary(out, settings, metrics)
    state = None if resume is None else StateFile(out / STATE, settings, resume)
    saved = None if state is None else state.load()
    if saved is not None:  # the group the state was written by (some may have finished)
        todo = [int(s) for s in saved[1]["seeds"]]

    def save(member: int, result: TrainResult) -> None:
        seed = todo[member]
        save_checkpoint(
            seed_dir(out, seed),
            result.model.cpu(),
            task,
            train_config=replace(cfg, seed=seed).to_dict(),
            history=result.history,
            metrics=result.metrics(),
            overwrite=True,
        )
        metrics[seed] = result.metrics()
        write_summary(out, settings, metrics)

    if todo:
        cfgs = [replace(cfg, seed=s) for s in todo]
        train_ensemble(task, model_cfg, cfgs, progress=progress, log=log, on_member_done=save,
                       threads=threads, state=state)  # fmt: skip
    return json.loads((out / SUMMARY).read_text())
