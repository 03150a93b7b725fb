"""Device names: the one check every setting that names a torch device shares. Plain
Python: torch is imported only to judge a name other than ``cpu``."""

from __future__ import annotations

DEVICE_TYPES = ("cpu", "cuda", "mps")
"""The device types a computing stage accepts."""


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
