"""Training: the loop and its configuration (loop), batched ensembles of seeds (ensemble),
the seed sweep that keeps the best (seeds).

The names below are loaded lazily from their modules.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "TrainConfig": "infoprobe.train.loop",
    "TrainResult": "infoprobe.train.loop",
    "TrainingError": "infoprobe.train.loop",
    "NonFiniteLossError": "infoprobe.train.loop",
    "nmse": "infoprobe.train.loop",
    "train": "infoprobe.train.loop",
    "train_and_save": "infoprobe.train.loop",
    "train_ensemble": "infoprobe.train.ensemble",
    "train_seeds": "infoprobe.train.seeds",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
