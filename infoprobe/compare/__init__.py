"""Comparison of predicted and observed information sets: observations, agreement, AUROC,
verdict text and the comparison file (core, agreement, auroc), the observation
instruments and their sources (instruments, sources), provenance checks (provenance).

The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
