"""Flow: observed information sets by intervention on the input.

Probes measure decodability (can x(s) be read from h(t, l)?); this package measures
flow: does h(t, l) move when x(s) moves? Two questions, one file format
(docs/influence.md):

- local sensitivity (``method="local"``): the share of the state's variance that x(s)
explains through the linearised network, g = σ² ‖∂h_{t,l}/∂x(s)‖_F² / v(l, t), exact by
forward-mode AD (``estimator="jacobian"``, default) or by finite differences along K
random directions (``estimator="fd"``); - resample ablation (``method="resample"``): the
mean squared move of the state when   x(s) is replaced by another sample's, over 2 v(l,
t).

Scores are float32 [L+1, n, T+1, T] (layer, sample, token, position); s ∈ I_flow(i, t,
l) iff g ≥ r / T with r = :data:`DEFAULT_FLOW_FRACTION` = 0.25; the aggregate score is
the share of samples in which s is a member (:func:`membership_share`), not the mean g.

    from infoprobe.influence import InfluenceSettings, influence_for_cache,
read_influence     influence_for_cache("runs/id", "runs/id/acts.h5",
"runs/id/influence.h5")     sets = read_influence("runs/id/influence.h5").sets()   #
bool [L+1, n, T+1, T+1]
"""

from infoprobe.influence.errors import (
    IncompleteInfluenceError,
    InfluenceError,
    InfluenceFileError,
    InfluenceMismatchError,
    InfluenceSettingsError,
)
from infoprobe.influence.file import InfluenceFile, read_influence
from infoprobe.influence.job import influence_for_cache, model_state_sha256
from infoprobe.influence.sensitivity import (
    FlowPlan,
    InfluenceResult,
    influence,
    input_scale,
    plan_influence,
    state_variance,
)
from infoprobe.influence.sets import (
    AGGREGATE_SHARE_LEVEL,
    DEFAULT_FLOW_FRACTION,
    flow_sets,
    flow_threshold,
    membership_share,
)
from infoprobe.influence.settings import InfluenceSettings
from infoprobe.influence.store import write_influence
from infoprobe.influence.summary import layer_summary

__all__ = [
    "AGGREGATE_SHARE_LEVEL",
    "DEFAULT_FLOW_FRACTION",
    "FlowPlan",
    "IncompleteInfluenceError",
    "InfluenceError",
    "InfluenceFile",
    "InfluenceFileError",
    "InfluenceMismatchError",
    "InfluenceResult",
    "InfluenceSettings",
    "InfluenceSettingsError",
    "flow_sets",
    "flow_threshold",
    "influence",
    "influence_for_cache",
    "input_scale",
    "layer_summary",
    "membership_share",
    "model_state_sha256",
    "plan_influence",
    "read_influence",
    "state_variance",
    "write_influence",
]
