"""Shared workload and measurement helpers of the ridge benchmarks (bench/ridge_*.py).

Workload (the size the probe benchmarks are judged at): N = 20 000 samples, L = 2 layer
sites, T = 32 tokens (+ CLS), E = 256, d = 4. Each cell (layer, token) holds a random
linear mixture of the inputs plus noise, so R² spans 0 … 1 across probes. States live in
memory as float32 ``[N, C, E]``; the probes stream them in blocks like a cache read.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_info

from infoprobe.probes.linear import ProbeTargets
from infoprobe.probes.split import make_split

BLOCK = 2048


@dataclass
class Workload:
    """Synthetic states ``[N, C, E]``, inputs ``x [N, T, d]`` and the split."""

    states: np.ndarray
    x: np.ndarray
    split: np.ndarray

    @property
    def n_cells(self) -> int:
        return self.states.shape[1]

    @property
    def n_probes(self) -> int:
        return self.n_cells * self.x.shape[1]

    def source(self) -> Callable:
        states = self.states
        return lambda: ((i, states[i : i + BLOCK]) for i in range(0, len(states), BLOCK))

    def targets(self) -> ProbeTargets:
        return ProbeTargets(self.x, self.x, np.arange(self.x.shape[1]))


def make_workload(
    n: int = 20_000, layers: int = 2, T: int = 32, E: int = 256, d: int = 4, seed: int = 0
) -> Workload:
    """The benchmark workload (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, T, d, generator=gen)
    cells = layers * (T + 1)
    # each cell sees a few positions strongly and the rest weakly
    weight = torch.randn(cells, T * d, E, generator=gen) / np.sqrt(T * d)
    strong = torch.rand(cells, T, 1, 1, generator=gen) < 0.15
    weight = weight.view(cells, T, d, E) * torch.where(strong, 6.0, 0.3)
    states = torch.einsum("nk,cke->nce", x.reshape(n, T * d), weight.reshape(cells, T * d, E))
    states += torch.randn(states.shape, generator=gen)
    return Workload(states.numpy(), x.numpy(), make_split(n, seed=seed))


def median_time(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in seconds after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` float32 ``torch.matmul`` GFLOP/s on ``size``² matrices."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.matmul(a, b)
    best = min(_timed(lambda: torch.matmul(a, b)) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def print_environment() -> None:
    """CPU, thread pools and torch threads (the benchmark protocol records them)."""
    print(
        f"cpu: {platform.processor() or platform.machine()}, os.cpu_count={os.cpu_count()}, "
        f"torch threads={torch.get_num_threads()}"
    )
    for pool in threadpool_info():
        print(
            f"  threadpool {pool.get('internal_api')} {pool.get('version')} "
            f"threads={pool.get('num_threads')} ({os.path.basename(pool.get('filepath', ''))})"
        )
