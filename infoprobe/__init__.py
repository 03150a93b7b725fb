"""infoprobe: probe which input positions each Transformer token can access.

Train small Transformers on the InfoFlow tasks, hook every layer, cache
activations to HDF5, fit probes that decode x(s) from h(t, l), and compare the
observed information sets with the InfoFlow prediction.
"""

__version__ = "0.1.0"

from infoprobe.checkpoint import load_checkpoint, save_checkpoint
from infoprobe.infoflow import predict
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.train import TrainConfig

__all__ = [
    "InfoFlowTransformer",
    "ModelConfig",
    "TrainConfig",
    "load_checkpoint",
    "predict",
    "save_checkpoint",
]
