"""Training: the configuration, its result and its checks (config), the loop (loop),
memory estimates (memory), CPU threads (threads), batched ensembles of seeds (ensemble),
the seed sweep that keeps the best (seeds).

The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "TrainConfig": "infoprobe.train.config",
    "TrainResult": "infoprobe.train.config",
    "TrainingError": "infoprobe.train.config",
    "NonFiniteLossError": "infoprobe.train.config",
    "nmse": "infoprobe.train.loop",
    "train": "infoprobe.train.loop",
    "train_and_save": "infoprobe.train.save",
    "train_ensemble": "infoprobe.train.ensemble",
    "train_seeds": "infoprobe.train.seeds",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
