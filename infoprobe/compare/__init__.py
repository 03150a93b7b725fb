"""Comparison of predicted and observed information sets: observations, agreement, AUROC,
verdict text and the comparison file (core, agreement, auroc), the observation
instruments and their sources (instruments, sources), provenance checks (provenance).

The names below are loaded lazily from their modules.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Observations": "infoprobe.compare.core",
    "Comparison": "infoprobe.compare.core",
    "Crosstab": "infoprobe.compare.core",
    "compare": "infoprobe.compare.core",
    "crosstab": "infoprobe.compare.core",
    "headline": "infoprobe.compare.core",
    "layer_verdicts": "infoprobe.compare.core",
    "write_comparisons": "infoprobe.compare.core",
    "read_comparisons": "infoprobe.compare.core",
    "compare_sources": "infoprobe.compare.sources",
    "load_sources": "infoprobe.compare.sources",
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
