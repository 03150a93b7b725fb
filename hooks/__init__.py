"""Capture activations at every layer into a resumable HDF5 cache (``infoprobe.hooks``).

A leaf pillar: it works on any TransformerLens ``HookedRootModule`` and imports nothing
from the rest of infoprobe. Write with :func:`write_cache` (or :func:`plan_cache` first
for the size), read with :func:`open_cache`. The file format is docs/cache-format.md.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "capture": "infoprobe.hooks.capture",
    "BatchFunctionError": "infoprobe.hooks.errors",
    "CacheError": "infoprobe.hooks.errors",
    "Float16OverflowError": "infoprobe.hooks.errors",
    "IncompleteCacheError": "infoprobe.hooks.errors",
    "InsufficientDiskError": "infoprobe.hooks.errors",
    "NewerSchemaError": "infoprobe.hooks.errors",
    "NotACacheError": "infoprobe.hooks.errors",
    "ProvenanceMismatchError": "infoprobe.hooks.errors",
    "SiteCaptureError": "infoprobe.hooks.errors",
    "TruncatedCacheError": "infoprobe.hooks.errors",
    "UnknownSiteError": "infoprobe.hooks.errors",
    "CacheFile": "infoprobe.hooks.reader",
    "open_cache": "infoprobe.hooks.reader",
    "read_header": "infoprobe.hooks.reader",
    "FORMAT": "infoprobe.hooks.schema",
    "SCHEMA_VERSION": "infoprobe.hooks.schema",
    "PRESET_PATTERNS": "infoprobe.hooks.sites",
    "axis_names": "infoprobe.hooks.sites",
    "layer_of_site": "infoprobe.hooks.sites",
    "layer_sites": "infoprobe.hooks.sites",
    "resolve_sites": "infoprobe.hooks.sites",
    "CachePlan": "infoprobe.hooks.writer",
    "CacheSummary": "infoprobe.hooks.writer",
    "batch_sizes": "infoprobe.hooks.writer",
    "plan_cache": "infoprobe.hooks.writer",
    "write_cache": "infoprobe.hooks.writer",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
