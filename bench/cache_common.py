"""Shared helpers of the activation-cache benchmarks (bench/cache_*.py).

The model is the project's default architecture (ModelConfig defaults: E = 32, heads
(2, 2), d_mlp = 128) on intrinsic-dim with T = 16, D = 2 (d = 4). Timings are medians of
interleaved repeats; the benchmarks pin torch to one thread by default because the cache
writer runs a second (I/O) thread and the reference machine has two shared cores.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import torch
from threadpoolctl import threadpool_info

from infoprobe.checkpoint import save_checkpoint
from infoprobe.hooks import writer
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.tasks import make_task

SCRATCH = Path(os.environ.get("INFOPROBE_BENCH_DIR", tempfile.gettempdir()))


def default_task():
    return make_task("intrinsic-dim", T=16, D=2, seed=0)


def default_model(task=None, **overrides) -> InfoFlowTransformer:
    task = task or default_task()
    cfg = ModelConfig(d_in=task.d, n_ctx=task.T, d_out=task.d_out, **overrides)
    return InfoFlowTransformer(cfg, seed=0).eval()


def make_checkpoint(folder: Path, **overrides) -> Path:
    """Save an untrained default model as a checkpoint folder (timings do not need training)."""
    task = default_task()
    return save_checkpoint(
        folder / "ckpt",
        default_model(task, **overrides),
        task,
        train_config={"seed": 0},
        overwrite=True,
    )


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def print_environment() -> None:
    cpu = "unknown"
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(
        f"cpu: {cpu} ({os.cpu_count()} cores), python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"h5py {h5py.version.version} / HDF5 {h5py.version.hdf5_version}"
    )
    pools = [f"{p['internal_api']}:{p['num_threads']}" for p in threadpool_info()]
    print(
        f"thread pools: {', '.join(pools) or 'none'}; "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
        f"scratch dir {SCRATCH}"
    )


def interleaved_medians(
    fns: dict[str, Callable[[], object]],
    repeats: int = 3,
    warmup: int = 1,
    between: Callable[[], object] | None = None,
) -> dict[str, float]:
    """Median wall time (s) of each function, run in alternation to share machine noise.

    ``between`` runs untimed before every call (e.g. delete the last output and sync).
    Each function's median process CPU time (all threads, user + system) is printed
    beside its wall time: on a shared machine it shows the work done, which other
    jobs do not inflate as they inflate the wall time.
    """
    for _ in range(warmup):
        for fn in fns.values():
            if between is not None:
                between()
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if between is not None:
                between()
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    for name, values in times.items():
        print(
            f"  {name}: median {statistics.median(values):.3f} s over "
            f"{', '.join(f'{v:.3f}' for v in values)}; "
            f"CPU median {statistics.median(cpu[name]):.3f} s"
        )
    return {name: statistics.median(values) for name, values in times.items()}


def settle_disk(*paths: Path) -> None:
    """Delete ``paths`` and flush all dirty pages, so the next timed write starts clean."""
    for path in paths:
        path.unlink(missing_ok=True)
    os.sync()


def batches(task, n: int, batch_size: int, data_seed: int):
    """The cache's samples, batch by batch (same convention as infoprobe.pipeline.caching)."""
    for index, start in enumerate(range(0, n, batch_size)):
        yield task.sample(min(batch_size, n - start), np.random.default_rng([data_seed, index]))


def through_hdf5(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with the cache writer's raw writes off: every dataset goes through
    h5py's ``write_direct`` (``infoprobe.hooks.writer.RAW_WRITES = False``)."""

    def run() -> object:
        writer.RAW_WRITES = False
        try:
            return fn()
        finally:
            writer.RAW_WRITES = True

    return run
