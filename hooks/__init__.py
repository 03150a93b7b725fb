"""Capture activations at every layer into a resumable HDF5 cache (``infoprobe.hooks``).

A leaf pillar: it works on any TransformerLens ``HookedRootModule`` and imports nothing
from the rest of infoprobe. Write with :func:`write_cache` (or :func:`plan_cache` first
for the size), read with :func:`open_cache`. The file format is docs/cache-format.md.
"""

from infoprobe.hooks.capture import capture
from infoprobe.hooks.errors import (
    BatchFunctionError,
    CacheError,
    Float16OverflowError,
    IncompleteCacheError,
    InsufficientDiskError,
    NewerSchemaError,
    NotACacheError,
    ProvenanceMismatchError,
    SiteCaptureError,
    TruncatedCacheError,
    UnknownSiteError,
)
from infoprobe.hooks.reader import CacheFile, open_cache, read_header
from infoprobe.hooks.schema import FORMAT, SCHEMA_VERSION
from infoprobe.hooks.sites import (
    PRESET_PATTERNS,
    axis_names,
    layer_of_site,
    layer_sites,
    resolve_sites,
)
from infoprobe.hooks.writer import CachePlan, CacheSummary, batch_sizes, plan_cache, write_cache

__all__ = [
    "FORMAT",
    "PRESET_PATTERNS",
    "SCHEMA_VERSION",
    "BatchFunctionError",
    "CacheError",
    "CacheFile",
    "CachePlan",
    "CacheSummary",
    "Float16OverflowError",
    "IncompleteCacheError",
    "InsufficientDiskError",
    "NewerSchemaError",
    "NotACacheError",
    "ProvenanceMismatchError",
    "SiteCaptureError",
    "TruncatedCacheError",
    "UnknownSiteError",
    "axis_names",
    "batch_sizes",
    "capture",
    "layer_of_site",
    "layer_sites",
    "open_cache",
    "plan_cache",
    "read_header",
    "resolve_sites",
    "write_cache",
]
