"""Comparison of predicted and observed information sets: what an instrument observed
(observations), the comparison (core) with its agreement counts (agreement) and AUROC
(auroc), its verdict text (verdicts), two instruments crossed (crosstab), the comparison
file (files), the observation instruments and their sources (instruments, sources),
provenance checks (provenance), the spread of several runs over seeds (spread).

The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "Observations": "infoprobe.compare.observations",
    "SetComparison": "infoprobe.compare.core",
    "compare": "infoprobe.compare.core",
    "Crosstab": "infoprobe.compare.crosstab",
    "crosstab": "infoprobe.compare.crosstab",
    "headline": "infoprobe.compare.verdicts",
    "layer_verdicts": "infoprobe.compare.verdicts",
    "write_comparisons": "infoprobe.compare.files",
    "read_comparisons": "infoprobe.compare.files",
    "compare_sources": "infoprobe.compare.sources",
    "load_sources": "infoprobe.compare.sources",
    "seed_spread": "infoprobe.compare.spread",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
