"""Torch CPU threads for a training run: the cores of this process's affinity set and
those other work leaves free (:class:`TrainingThreads`, ``threads="auto"``).
"""

from __future__ import annotations

import math
import os
import time

import torch

from infoprobe.train.config import TrainingError, is_int


def affinity_cores() -> int:
    """CPU cores this process may run on (its affinity set; all cores where unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def free_cores(own_load: float = 0.0) -> int:
    """Cores of this process's affinity set that other work leaves free: the affinity
    count minus the 1-minute load average, less ``own_load`` (this process's own mean
    CPU use, which the load average counts too), rounded, at least 1."""
    cores = affinity_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    others = max(0.0, load - own_load)
    return max(1, min(cores, math.floor(cores - others + 0.5)))


class TrainingThreads:
    """Torch CPU threads for one training run; the caller's count is restored by
    :meth:`close`.

    ``threads``: None leaves torch's setting alone; an int sets that many; ``"auto"``
    sets :func:`free_cores` (at most the affinity set) now and again at every
    :meth:`check`, taking this process's own CPU use since the last check out of the
    load. Threads beyond the free cores cost more than they give: each parallel kernel
    ends at a barrier where OpenMP threads spin while a descheduled one holds them up.
    """

    def __init__(self, threads: int | str | None):
        if threads is not None and threads != "auto" and not (is_int(threads) and threads >= 1):
            raise TrainingError(f"threads must be None, 'auto' or an integer >= 1, got {threads!r}")
        self.auto, self.old = threads == "auto", torch.get_num_threads()
        if self.auto:
            torch.set_num_threads(free_cores())
            self.wall, self.cpu = time.perf_counter(), time.process_time()
        elif threads is not None:
            torch.set_num_threads(int(threads))

    def check(self) -> None:
        """With ``"auto"``: set the threads to the cores free now."""
        if not self.auto:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        own = max(0.0, cpu - self.cpu) / max(wall - self.wall, 1e-9)
        self.wall, self.cpu = wall, cpu
        if (n := free_cores(own)) != torch.get_num_threads():
            torch.set_num_threads(n)

    def close(self) -> None:
        torch.set_num_threads(self.old)
