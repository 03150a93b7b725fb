"""infoprobe: probe which input positions each Transformer token can access.

Train small Transformers on the InfoFlow tasks, hook every layer, cache activations to
HDF5, fit probes that decode x(s) from h(t, l), and compare the observed information
sets with the InfoFlow prediction.

The top-level names are loaded lazily, so ``import infoprobe.tasks`` stays light.
"""

from infoprobe.base.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "InfoFlowTransformer": "infoprobe.model",
    "ModelConfig": "infoprobe.model",
    "TrainConfig": "infoprobe.train.config",
    "load_checkpoint": "infoprobe.checkpoint",
    "save_checkpoint": "infoprobe.checkpoint",
    "predict": "infoprobe.infoflow",
    "run_pipeline": "infoprobe.pipeline.run",
    "probe_checkpoint": "infoprobe.pipeline.run",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
