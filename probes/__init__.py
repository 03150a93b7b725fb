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

from .batched_training import TrainingBudget
from .controls import check_control_compatible, conditional_baseline, selectivity, shuffled_pairing
from .errors import (
    ControlMismatchError,
    MissingSiteError,
    NonFiniteActivationError,
    ProbeError,
    ProbeInputError,
    ResultsFileError,
    SplitTooSmallError,
)
from .estimators import MLPProbe, RidgeProbe
from .linear import LinearProbeScores, ProbeTargets, fit_linear_probes
from .metrics import identification_hits, per_sample_error, pooled_r2
from .mlp import MLPProbeFit, fit_mlp_probe_sets, fit_mlp_probes
from .observed import (
    DEFAULT_MARGIN,
    DEFAULT_TAU,
    DEFAULT_TAU_SAMPLE,
    Thresholds,
    aggregate_observed,
    per_sample_observed,
)
from .query import QueryProbeFit, fit_query_probe, fit_query_probe_sets
from .results import ProbeResults
from .ridge import DEFAULT_ALPHAS, RidgeAccumulator, RidgeSolution
from .ridge_fit import RidgeFit, fit_ridge
from .split import make_split
from .targets import AttentionRole, attention_rank_partners, position_targets, role_partners

__all__ = [
    "DEFAULT_ALPHAS",
    "DEFAULT_MARGIN",
    "DEFAULT_TAU",
    "DEFAULT_TAU_SAMPLE",
    "AttentionRole",
    "ControlMismatchError",
    "LinearProbeScores",
    "MLPProbe",
    "MLPProbeFit",
    "MissingSiteError",
    "NonFiniteActivationError",
    "ProbeError",
    "ProbeInputError",
    "ProbeResults",
    "ProbeTargets",
    "QueryProbeFit",
    "ResultsFileError",
    "RidgeAccumulator",
    "RidgeFit",
    "RidgeProbe",
    "RidgeSolution",
    "SplitTooSmallError",
    "Thresholds",
    "TrainingBudget",
    "aggregate_observed",
    "attention_rank_partners",
    "check_control_compatible",
    "conditional_baseline",
    "fit_linear_probes",
    "fit_mlp_probe_sets",
    "fit_mlp_probes",
    "fit_query_probe",
    "fit_query_probe_sets",
    "fit_ridge",
    "identification_hits",
    "make_split",
    "per_sample_error",
    "per_sample_observed",
    "pooled_r2",
    "position_targets",
    "role_partners",
    "selectivity",
    "shuffled_pairing",
]
