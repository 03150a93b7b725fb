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

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "IncompleteInfluenceError": "infoprobe.influence.errors",
    "InfluenceError": "infoprobe.influence.errors",
    "InfluenceFileError": "infoprobe.influence.errors",
    "InfluenceMismatchError": "infoprobe.influence.errors",
    "InfluenceSettingsError": "infoprobe.influence.errors",
    "InfluenceFile": "infoprobe.influence.file",
    "read_influence": "infoprobe.influence.file",
    "influence_for_cache": "infoprobe.influence.job",
    "model_state_sha256": "infoprobe.influence.job",
    "FlowPlan": "infoprobe.influence.sensitivity",
    "InfluenceResult": "infoprobe.influence.sensitivity",
    "influence": "infoprobe.influence.sensitivity",
    "input_scale": "infoprobe.influence.sensitivity",
    "plan_influence": "infoprobe.influence.sensitivity",
    "state_variance": "infoprobe.influence.sensitivity",
    "AGGREGATE_SHARE_LEVEL": "infoprobe.influence.sets",
    "DEFAULT_FLOW_FRACTION": "infoprobe.influence.sets",
    "flow_sets": "infoprobe.influence.sets",
    "flow_threshold": "infoprobe.influence.sets",
    "membership_share": "infoprobe.influence.sets",
    "InfluenceSettings": "infoprobe.influence.settings",
    "write_influence": "infoprobe.influence.store",
    "layer_summary": "infoprobe.influence.summary",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
