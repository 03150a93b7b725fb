"""Torch CPU threads for a training run: the cores of this process's affinity set and
those other work leaves free (:class:`TrainingThreads`, ``threads="auto"``).
"""

from __future__ import annotations

import time

import torch

from infoprobe.base.runtime import free_cores
from infoprobe.train.config import TrainingError, is_int


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
