"""Where and how a command computes: the device, the CPU threads and the progress bars,
declared once (:class:`Runtime`) and set by the same options on every computing command.

The default thread count is fixed (:func:`default_threads`: the cores this process may
use), so a default run computes the same floats every time on one machine; ``auto``
(only when asked) follows the machine's load as training goes. Plain Python: torch is
imported only to judge a device name other than ``cpu`` or to apply the threads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from infoprobe.base.errors import UsageError

DEVICE_TYPES = ("cpu", "cuda", "mps")
"""The device types a computing stage accepts."""
AUTO = "auto"
"""``--threads auto``: the cores other work leaves free, re-checked as training goes."""


def default_threads() -> int:
    """The CPU threads a command uses unless told otherwise: the cores this process may run
    on (its affinity mask; ``taskset -c 1`` gives 1), fixed for the run."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def valid_device(value: object) -> bool:
    """Whether ``value`` names a torch device (``cpu``, ``cuda``, ``cuda:N``, ``mps``);
    this machine need not have it."""
    if value == "cpu":
        return True
    if not isinstance(value, str):
        return False
    import torch

    try:
        return torch.device(value).type in DEVICE_TYPES
    except (RuntimeError, TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Runtime:
    """How a command computes (the same on every computing command).

    Args:
        device: torch device of the computation (cpu, cuda, cuda:N or mps)
        threads: torch CPU threads: a count, or ``auto`` to follow the machine's load as
            training goes (default: the cores this process may use, fixed for the run)
        progress: show progress bars
    """

    device: str = "cpu"
    threads: int | Literal["auto"] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if not valid_device(self.device):
            raise UsageError(
                f"Runtime.device: expected a torch device {DEVICE_TYPES} (cuda:N for one GPU), "
                f"got {self.device!r}"
            )
        ok = self.threads in (None, AUTO) or (
            isinstance(self.threads, int) and not isinstance(self.threads, bool)
            and self.threads >= 1
        )  # fmt: skip
        if not ok:
            raise UsageError(
                f"Runtime.threads: expected an integer >= 1 or 'auto', got {self.threads!r}"
            )
        if not isinstance(self.progress, bool):
            raise UsageError(f"Runtime.progress: expected true or false, got {self.progress!r}")

    @property
    def thread_count(self) -> int | Literal["auto"]:
        """The threads to use: the given count, ``auto``, or :func:`default_threads`."""
        return default_threads() if self.threads is None else self.threads

    def apply(self) -> None:
        """Set torch's CPU threads for this process (a count; ``auto`` is applied by the
        training loop as it goes, starting from :func:`default_threads`)."""
        import torch

        count = self.thread_count
        torch.set_num_threads(default_threads() if count == AUTO else count)
