"""The main job's run folder: settings, stages and resumption (run), the cache and probe
stages' glue (caching, probing), provenance identities (chain), the curated demo (demo).

The names below are loaded lazily from their modules.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "RunSettings": "infoprobe.pipeline.settings",
    "RunSummary": "infoprobe.pipeline.summary",
    "RunFolderError": "infoprobe.pipeline.folder",
    "run_pipeline": "infoprobe.pipeline.run",
    "probe_checkpoint": "infoprobe.pipeline.run",
    "cache_checkpoint": "infoprobe.pipeline.caching",
    "ProbeSettings": "infoprobe.pipeline.probing",
    "run_demo": "infoprobe.pipeline.demo",
    "predict_for_cache": "infoprobe.pipeline.predicting",
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
