"""Probes: which input positions are decodable from each token's state at each layer.

A leaf pillar: plain arrays (or an iterator of blocks) in, arrays out; it never opens a
cache itself (``infoprobe.pipeline.probing`` wires it to the HDF5 activation cache).

- Linear (ridge) probes of every (cell, target) from streaming sufficient statistics:
  :func:`fit_ridge`, :class:`RidgeAccumulator`, :func:`fit_linear_probes`.
- Batched MLP probes and the query-conditioned per-sample probe:
  :func:`fit_mlp_probes`, :func:`fit_query_probe` (several datasets in one pass:
  :func:`fit_mlp_probe_sets`, :func:`fit_query_probe_sets`), trained with one
  :class:`TrainingBudget`.
- sklearn-compatible estimators wrapping the same engines: :class:`RidgeProbe`,
  :class:`MLPProbe`.
- Role targets (x at the k-th most attended key), controls, observed sets, results file:
  :func:`role_partners`, :func:`selectivity`, :class:`Thresholds`, :class:`ProbeResults`.

Decodable is not the same as used: a probe shows what can be read from a state, not what
the network reads from it.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "TrainingBudget": "infoprobe.probes.settings",
    "check_control_compatible": "infoprobe.probes.controls",
    "conditional_baseline": "infoprobe.probes.controls",
    "selectivity": "infoprobe.probes.controls",
    "shuffled_pairing": "infoprobe.probes.controls",
    "ControlMismatchError": "infoprobe.probes.errors",
    "MissingSiteError": "infoprobe.probes.errors",
    "NonFiniteActivationError": "infoprobe.probes.errors",
    "ProbeError": "infoprobe.probes.errors",
    "ProbeInputError": "infoprobe.probes.errors",
    "ResultsFileError": "infoprobe.probes.errors",
    "SplitTooSmallError": "infoprobe.probes.errors",
    "MLPProbe": "infoprobe.probes.estimators",
    "RidgeProbe": "infoprobe.probes.estimators",
    "LinearProbeScores": "infoprobe.probes.linear",
    "ProbeTargets": "infoprobe.probes.linear",
    "fit_linear_probes": "infoprobe.probes.linear",
    "identification_hits": "infoprobe.probes.metrics",
    "per_sample_error": "infoprobe.probes.metrics",
    "pooled_r2": "infoprobe.probes.metrics",
    "MLPProbeFit": "infoprobe.probes.mlp",
    "fit_mlp_probe_sets": "infoprobe.probes.mlp",
    "fit_mlp_probes": "infoprobe.probes.mlp",
    "DEFAULT_MARGIN": "infoprobe.probes.observed",
    "DEFAULT_TAU": "infoprobe.probes.observed",
    "DEFAULT_TAU_SAMPLE": "infoprobe.probes.observed",
    "Thresholds": "infoprobe.probes.observed",
    "aggregate_observed": "infoprobe.probes.observed",
    "per_sample_observed": "infoprobe.probes.observed",
    "QueryProbeFit": "infoprobe.probes.query",
    "fit_query_probe": "infoprobe.probes.query",
    "fit_query_probe_sets": "infoprobe.probes.query",
    "ProbeResults": "infoprobe.probes.results",
    "DEFAULT_ALPHAS": "infoprobe.probes.settings",
    "RidgeAccumulator": "infoprobe.probes.ridge",
    "RidgeSolution": "infoprobe.probes.ridge",
    "RidgeFit": "infoprobe.probes.ridge_fit",
    "fit_ridge": "infoprobe.probes.ridge_fit",
    "make_split": "infoprobe.probes.split",
    "AttentionRole": "infoprobe.probes.targets",
    "attention_rank_partners": "infoprobe.probes.targets",
    "position_targets": "infoprobe.probes.targets",
    "role_partners": "infoprobe.probes.targets",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
