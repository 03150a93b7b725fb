"""Measured runtime estimates for a sweep, before running it (``reproduce --estimate``).

For each grid point, a few real training steps (batch drawing, forward, backward, AdamW,
clipping: the code :func:`infoprobe.train.train` runs) and one validation pass are timed
on this machine with the sweep's threads per run. A run's time is then
``steps * step time + evaluations * evaluation time``; the sweep's wall time is a
simulation of the backend's queue (runs in sweep order, at most ``workers`` at a time).
Not counted: post-training analyses, process start-up, and slow-down when parallel runs
share memory bandwidth. The estimate is a measurement extrapolated, not a promise.
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from infoprobe.reproduce.grid import GridPoint, RunSpec, describe_runs
from infoprobe.reproduce.runs import torch_threads
from infoprobe.train import (
    TRAIN_STREAM,
    VAL_STREAM,
    TrainConfig,
    batch_loss,
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
    """Measured costs of one grid point: seconds per training step and per validation
    pass; ``evaluations``: validation passes of one run (the test pass counted as
    n_test / n_val of one)."""

    label: str
    step_seconds: float
    eval_seconds: float
    steps: int
    evaluations: float

    @property
    def run_seconds(self) -> float:
        """Projected training time of one run of this grid point."""
        return self.steps * self.step_seconds + self.evaluations * self.eval_seconds


def time_point(
    point: GridPoint, *, threads: int = 1, device: str = "cpu", steps: int = TIMED_STEPS
) -> PointTiming:
    """Time ``steps`` training steps (median, after a short warm-up) and one validation
    pass of ``point`` with ``threads`` torch threads."""
    task, cfg = point.build_task(), point.train_config(0, device)
    with torch_threads(threads):
        model, opt, sched = setup_training(task, point.model_config(), cfg)
        rng = np.random.default_rng([0, TRAIN_STREAM])
        durations = []
        for i in range(WARMUP_STEPS + steps):
            start = time.perf_counter()
            optimiser_step(model, opt, sched, batch_loss(model, *draw_batch(task, cfg, rng)), cfg)
            if device.startswith("cuda"):  # kernels run asynchronously: wait for the step
                torch.cuda.synchronize()
            if i >= WARMUP_STEPS:
                durations.append(time.perf_counter() - start)
        start = time.perf_counter()
        val_rng = np.random.default_rng([0, VAL_STREAM])
        x_val, y_val = sample_tensors(task, cfg.n_val, val_rng, device)
        evaluate(model, x_val, y_val)
        eval_seconds = time.perf_counter() - start
    return PointTiming(
        point.label, statistics.median(durations), eval_seconds, cfg.steps, evaluations(cfg)
    )


def evaluations(cfg: TrainConfig) -> float:
    """Validation passes :func:`~infoprobe.train.train` makes (every ``eval_every`` steps
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
        """A plain-text table: one row per grid point, then the total."""
        w = max([len("config")] + [len(t.label) for t in self.timings])
        rows = [f"{'config':{w}s} {'ms/step':>8s} {'s/eval':>7s} {'steps':>7s} {'min/run':>8s}"]
        for t in self.timings:
            rows.append(
                f"{t.label:{w}s} {1e3 * t.step_seconds:8.1f} {t.eval_seconds:7.2f} "
                f"{t.steps:7d} {t.run_seconds / 60:8.1f}"
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
    steps: int = TIMED_STEPS,
    progress: Callable[[str], Any] | None = None,
) -> SweepEstimate:
    """Time each distinct grid point of ``specs`` once and project the sweep's wall time.

    ``specs`` carry the threads and device each run will use (as the backend plans them).
    """
    timings: dict[str, PointTiming] = {}
    for spec in specs:
        key = spec.point.key
        if key not in timings:
            if progress is not None:
                progress(f"timing {spec.point.label} ({steps} steps)")
            timings[key] = time_point(
                spec.point, threads=spec.threads, device=spec.device, steps=steps
            )
    wall = sweep_wall_seconds([timings[s.point.key].run_seconds for s in specs], workers)
    first = specs[0] if specs else None
    return SweepEstimate(
        timings=tuple(timings.values()),
        runs=describe_runs(specs),
        workers=workers,
        threads=first.threads if first else 1,
        device=first.device if first else "cpu",
        wall_seconds=wall,
    )
