"""The main job's run folder: settings, stages and resumption (run), the cache and probe
stages' glue (caching, probing), provenance identities (chain), the curated demo (demo).

The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
