"""infoprobe: probe which input positions each Transformer token can access.

Train small Transformers on the InfoFlow tasks, hook every layer, cache activations to
HDF5, fit probes that decode x(s) from h(t, l), and compare the observed information
sets with the InfoFlow prediction.

The top-level names are loaded lazily, so ``import infoprobe.tasks`` stays light.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "InfoFlowTransformer": "infoprobe.model",
    "ModelConfig": "infoprobe.model",
    "TrainConfig": "infoprobe.train.loop",
    "load_checkpoint": "infoprobe.checkpoint",
    "save_checkpoint": "infoprobe.checkpoint",
    "predict": "infoprobe.infoflow",
    "run_pipeline": "infoprobe.pipeline.run",
    "probe_checkpoint": "infoprobe.pipeline.run",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'infoprobe' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
