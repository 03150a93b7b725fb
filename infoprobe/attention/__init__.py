"""Attention analysis: each head's observed program (program), the per-head statistics and
mode rules it reads from the patterns (statistics), the orientation of ordered operations
(orientation), attention rollout (rollout).

The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "ObservedProgram": "infoprobe.attention.program",
    "observed_program": "infoprobe.attention.program",
    "HeadStatistics": "infoprobe.attention.statistics",
    "HeadsError": "infoprobe.attention.statistics",
    "argmax_agreement": "infoprobe.attention.statistics",
    "classify": "infoprobe.attention.statistics",
    "head_statistics": "infoprobe.attention.statistics",
    "choose_orientation": "infoprobe.attention.orientation",
    "RolloutConfig": "infoprobe.attention.rollout",
    "predict_rollout": "infoprobe.attention.rollout",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
