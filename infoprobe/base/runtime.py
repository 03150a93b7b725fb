"""Where and how a command computes: the device, the CPU threads and the progress bars,
declared once (:class:`Runtime`) and set by the same options on every computing command.

The default thread count is fixed (:func:`default_threads`: the cores this process may
run on), so a default run computes the same floats every time on one machine; ``auto``,
only when asked, follows the machine's load as training goes. Plain Python: torch and
threadpoolctl are imported only to apply the threads or judge a device other than cpu.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from infoprobe.base.devices import DEVICE_TYPES, valid_device
from infoprobe.base.errors import UsageError

AUTO = "auto"
"""``threads="auto"``: the cores other work leaves free, re-checked as training goes."""
Threads = int | Literal["auto"] | None


def default_threads() -> int:
    """The CPU threads a command uses unless told otherwise: the cores this process may run
    on (its affinity set: ``taskset -c 1 infoprobe ...`` gives 1; all cores where unknown),
    fixed for the run."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def free_cores(own_load: float = 0.0) -> int:
    """Cores of this process's affinity set that other work leaves free: the affinity
    count minus the 1-minute load average, less ``own_load`` (this process's own mean
    CPU use, which the load average counts too), rounded, at least 1."""
    cores = default_threads()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    others = max(0.0, load - own_load)
    return max(1, min(cores, math.floor(cores - others + 0.5)))


def check_threads(value: object, name: str = "threads") -> Threads:
    """``value`` if it is None, ``"auto"`` or an integer >= 1, else :class:`UsageError`."""
    if value is None or value == AUTO:
        return value  # type: ignore[return-value]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name}: expected an integer >= 1 or 'auto', got {value!r}")
    return value


@dataclass(frozen=True)
class Runtime:
    """How a command computes (the same on every computing command).

    Args:
        device: torch device (cpu, cuda, cuda:N or mps)
        threads: CPU threads (torch's and the BLAS libraries'): a count, ``auto`` (the
            cores other work leaves free, re-checked as training goes), or None for
            :func:`default_threads`, the cores this process may run on (fixed for the run,
            so a default run is reproducible)
        progress: show progress bars
    """

    device: str = "cpu"
    threads: Threads = None
    progress: bool = True

    def __post_init__(self) -> None:
        if not valid_device(self.device):
            raise UsageError(
                f"device: expected a torch device of type {DEVICE_TYPES} (cuda:N for one GPU), "
                f"got {self.device!r}"
            )
        check_threads(self.threads)
        if not isinstance(self.progress, bool):
            raise UsageError(f"progress: expected True or False, got {self.progress!r}")

    @property
    def thread_count(self) -> int | Literal["auto"]:
        """The threads asked for: the given count, ``auto``, or :func:`default_threads`."""
        return default_threads() if self.threads is None else self.threads

    def apply(self, *, torch: bool = True) -> int:
        """Set this process's CPU threads, torch's (unless ``torch`` is false: a command that
        computes with numpy alone need not load it) and the BLAS libraries' that numpy and
        scipy use, and return the count set; ``auto`` sets the cores free now (training
        re-checks them as it goes)."""
        from threadpoolctl import threadpool_limits

        count = self.thread_count
        if count == AUTO:
            count = free_cores()
        if torch:
            import torch as torch_module

            torch_module.set_num_threads(count)
        threadpool_limits(limits=count)
        return count
