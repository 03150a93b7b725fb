"""Measured runtime estimates for a sweep, before running it (``reproduce --estimate``).

For each group of runs the backend will train together (one run, or a batched ensemble of
runs of one shape), a few real training steps (batch drawing, forward, backward, AdamW,
clipping: the code :func:`infoprobe.train.loop.train` or :class:`infoprobe.train.ensemble.Ensemble`
runs) and one validation pass are timed on this machine with the sweep's threads per
run; with ``compile`` the first step's extra time is the compilation, counted once per
group. A group's time is then ``compile + steps * step time + members * evaluations *
evaluation time``; the sweep's wall time is a simulation of the backend's queue (groups in
sweep order, at most ``workers`` at a time). Not counted: post-training analyses, process
start-up, and slow-down when parallel runs share memory bandwidth. The estimate is a
measurement extrapolated, not a promise.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from infoprobe.reproduce.grid import GridPoint, RunSpec, describe_runs, group_runs
from infoprobe.reproduce.runs import torch_threads
from infoprobe.train.config import TrainConfig
from infoprobe.train.ensemble import Ensemble
from infoprobe.train.loop import (
    TRAIN_STREAM,
    VAL_STREAM,
    batch_loss,
    compiled,
    draw_batch,
    evaluate,
    optimiser_step,
    sample_tensors,
    setup_training,
)

TIMED_STEPS = 10
WARMUP_STEPS = 2


@dataclass(frozen=True)
class PointTiming:
    """Measured costs of one group of runs (one grid point alone, or ``members`` runs
    as a batched ensemble): seconds per training step of the group and per validation
    pass of one member; ``evaluations``: validation passes of one run (the test pass
    counted as n_test / n_val of one); ``compile_seconds``: one-off compilation."""

    label: str
    step_seconds: float
    eval_seconds: float
    steps: int
    evaluations: float
    members: int = 1
    compile_seconds: float = 0.0

    @property
    def run_seconds(self) -> float:
        """Projected training time of the group (of one run when ``members`` is 1)."""
        evals = self.members * self.evaluations * self.eval_seconds
        return self.compile_seconds + self.steps * self.step_seconds + evals


def _timed_steps(step: Callable[[int], Any], steps: int, device: str) -> tuple[float, float]:
    """(median seconds of ``steps`` calls of ``step`` after a short warm-up, extra seconds
    of the first call over that median: its compilation, if any)."""
    durations = []
    for i in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        step(i)
        if device.startswith("cuda"):  # kernels run asynchronously: wait for the step
            torch.cuda.synchronize()
        durations.append(time.perf_counter() - start)
    median = statistics.median(durations[WARMUP_STEPS:])
    return median, max(0.0, durations[0] - median)


def time_ensemble(group: Sequence[RunSpec], *, steps: int = TIMED_STEPS) -> PointTiming:
    """Time ``steps`` steps of ``group`` trained as one batched ensemble (no evaluation
    inside the timed steps) and one validation pass of one member."""
    first = group[0]
    task = first.point.build_task()
    never = {"steps": 10**9, "eval_every": 10**9}
    cfgs = [dataclasses.replace(s.train_config(), **never) for s in group]
    with torch_threads(first.threads):
        ensemble = Ensemble(task, [s.point.model_config() for s in group], cfgs)
        step_seconds, compile_seconds = _timed_steps(ensemble.step, steps, first.device)
        member = ensemble.active[0]
        start = time.perf_counter()
        evaluate(member.tracker.result.model, member.data.x_val, member.data.y_val)
        eval_seconds = time.perf_counter() - start
    cfg = first.train_config()
    return PointTiming(
        f"{first.point.label} x{len(group)}",
        step_seconds,
        eval_seconds,
        max(s.train_config().steps for s in group),
        evaluations(cfg),
        members=len(group),
        compile_seconds=compile_seconds if cfg.compile else 0.0,
    )


def time_point(
    point: GridPoint,
    *,
    threads: int = 1,
    device: str = "cpu",
    steps: int = TIMED_STEPS,
    compile: bool = False,
) -> PointTiming:
    """Time ``steps`` training steps (median, after a short warm-up) and one validation
    pass of ``point`` with ``threads`` torch threads."""
    task, cfg = point.build_task(), point.train_config(0, device, compile)
    with torch_threads(threads):
        model, opt, sched = setup_training(task, point.model_config(), cfg)
        rng = np.random.default_rng([0, TRAIN_STREAM])
        forward = compiled(model, compile)

        def step(_: int) -> None:
            loss = batch_loss(model, *draw_batch(task, cfg, rng), forward)
            optimiser_step(model, opt, sched, loss, cfg)

        step_seconds, compile_seconds = _timed_steps(step, steps, device)
        start = time.perf_counter()
        val_rng = np.random.default_rng([0, VAL_STREAM])
        x_val, y_val = sample_tensors(task, cfg.n_val, val_rng, device)
        evaluate(model, x_val, y_val)
        eval_seconds = time.perf_counter() - start
    return PointTiming(
        point.label,
        step_seconds,
        eval_seconds,
        cfg.steps,
        evaluations(cfg),
        compile_seconds=compile_seconds if compile else 0.0,
    )


def evaluations(cfg: TrainConfig) -> float:
    """Validation passes :func:`~infoprobe.train.loop.train` makes (every ``eval_every`` steps
    and at the last step), plus its test pass in units of one validation pass."""
    return math.ceil(cfg.steps / cfg.eval_every) + cfg.n_test / cfg.n_val


def sweep_wall_seconds(run_seconds: Sequence[float], workers: int) -> float:
    """Wall time of runs taken in order by ``workers`` slots, each starting a run as soon
    as it is free (the local and Ray backends' queue)."""
    free_at = [0.0] * max(1, workers)
    for seconds in run_seconds:
        heapq.heapreplace(free_at, free_at[0] + seconds)
    return max(free_at)


@dataclass(frozen=True)
class SweepEstimate:
    """Per grid point timings and the projected wall time of the whole sweep."""

    timings: tuple[PointTiming, ...]
    runs: str
    workers: int
    threads: int
    device: str
    wall_seconds: float

    def table(self) -> str:
        """A plain-text table: one row per group of runs (``xM``: M runs trained as one
        ensemble; ms/step is the group's step), then the total."""
        w = max([len("config")] + [len(t.label) for t in self.timings])
        head = f"{'config':{w}s} {'ms/step':>8s} {'s/eval':>7s} {'steps':>7s} {'compile s':>9s}"
        rows = [f"{head} {'min/run':>8s}"]
        for t in self.timings:
            rows.append(
                f"{t.label:{w}s} {1e3 * t.step_seconds:8.1f} {t.eval_seconds:7.2f} "
                f"{t.steps:7d} {t.compile_seconds:9.1f} {t.run_seconds / 60:8.1f}"
            )
        rows.append(
            f"{self.runs}, {self.workers} at "
            f"a time with {self.threads} thread(s) each on {self.device}: about "
            f"{format_duration(self.wall_seconds)} of training (analyses, start-up and "
            "contention between parallel runs not counted)"
        )
        return "\n".join(rows)


def format_duration(seconds: float) -> str:
    """``93`` → ``"1.6 min"``, ``7200`` → ``"2.0 h"``, ``200000`` → ``"2.3 days"``."""
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def estimate_sweep(
    specs: Sequence[RunSpec],
    workers: int,
    *,
    ensemble: int = 1,
    steps: int = TIMED_STEPS,
    progress: Callable[[str], Any] | None = None,
) -> SweepEstimate:
    """Time each distinct group of ``specs`` (:func:`group_runs` with ``ensemble`` runs at
    most) once and project the sweep's wall time.

    ``specs`` carry the threads, device and compile setting each run will use (as the
    backend plans them).
    """
    timings: dict[tuple, PointTiming] = {}
    groups = group_runs(specs, ensemble)
    keys = [tuple(s.point.key for s in group) for group in groups]
    for key, group in zip(keys, groups, strict=True):
        if key in timings:
            continue
        first = group[0]
        if progress is not None:
            progress(f"timing {first.point.label} x{len(group)} ({steps} steps)")
        if len(group) == 1:
            timings[key] = time_point(
                first.point,
                threads=first.threads,
                device=first.device,
                steps=steps,
                compile=first.compile,
            )
        else:
            timings[key] = time_ensemble(group, steps=steps)
    wall = sweep_wall_seconds([timings[k].run_seconds for k in keys], workers)
    first = specs[0] if specs else None
    return SweepEstimate(
        timings=tuple(timings.values()),
        runs=describe_runs(specs),
        workers=workers,
        threads=first.threads if first else 1,
        device=first.device if first else "cpu",
        wall_seconds=wall,
    )
