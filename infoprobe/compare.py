"""Compare predicted information sets I_pred(t, l) with observed (decodable) sets I_obs(t, l).

The predicted sets are the reference and the observed sets the measurement, so for one
(layer l, sample, token t), with P = I_pred(t, l) restricted to the T data positions and
O = I_obs(t, l):

- ``agree``      = |P ∩ O|   predicted and decodable
- ``violations`` = |O \\ P|   decodable where the predictor says the information cannot be
- ``omissions``  = |P \\ O|   accessible in theory, not decodable in practice (expected
  where a network compresses what it keeps)
- ``absent``     = |¬P ∩ ¬O| neither
- precision = agree / |O|, recall = agree / |P|, Jaccard = agree / |P ∪ O|,
  violation rate = violations / |¬P| (share of non-predicted positions that are decodable),
  omission rate = omissions / |P| = 1 − recall. A ratio with an empty denominator is NaN.

Violations and omissions are always reported apart, never folded into one number.
Pooled ("micro") numbers sum the counts first and divide once.

Aggregate comparison (fixed-position probes, no sample axis): the predicted membership of
position s in I_pred(t, l) is the fraction of samples in which s ∈ I_pred(t, l).
Content-dependent retrieval puts a different s in each sample, so three cases arise:
``always`` (fraction 1), ``never`` (fraction 0) and ``sometimes`` (in between).
Violations are decodable cells that are *never* predicted, omissions undecodable cells
that are *always* predicted; ``sometimes`` cells are counted on their own (decodable or
not) and enter neither the agreement nor the aggregate AUROC.

AUROC (threshold-free): how well the continuous decodability ranks predicted positions
above non-predicted ones; per-sample errors enter with a minus sign (low error = decodable).

Decodable is not used: see :data:`CAVEAT`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
from einops import rearrange

from infoprobe import __version__
from infoprobe.atomic import atomic_output
from infoprobe.auroc import CompareInputError, auroc

CAVEAT = (
    "Decodable is not used: a probe that recovers x(s) from token t's state shows that the "
    "information is present there, not that the network uses it for its output. Omissions "
    "(predicted but not decodable) are expected where a network compresses what it keeps; "
    "violations (decodable but not predicted) are what contradicts a theory."
)

PROVENANCE_REQUIRED = ("task", "data_seed", "n")
"""Provenance fields both inputs of a comparison must carry and agree on."""

PROVENANCE_OPTIONAL = ("T", "n_layers", "cache", "checkpoint_sha256", "inputs_sha256")
"""Provenance fields compared when both inputs carry them."""

DEFAULT_ERROR_TAUS = np.geomspace(1e-3, 1.0, 31)
"""τ grid of the per-sample sweep: normalised errors, decodable when below τ."""

DEFAULT_SCORE_TAUS = np.linspace(0.0, 1.0, 21)
"""τ grid of the aggregate sweep: scores such as R², decodable when at least τ."""


class ProvenanceError(ValueError):
    """Predicted and observed sets do not come from the same data, model or task."""


# ----------------------------------------------------------------------------- counts


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def jsonable(value: Any) -> Any:
    """numpy → plain Python, NaN/Inf → None (JSON has no NaN); objects with to_dict() → dict."""
    if hasattr(value, "to_dict") and not isinstance(value, np.ndarray | Mapping):
        return jsonable(value.to_dict())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class SetAgreement:
    """Counts of predicted (P) vs observed (O) membership; all four fields share one shape.

    Rates are computed from the counts, so pooling (:meth:`pooled`) is exact.
    """

    agree: np.ndarray  # |P ∩ O|
    violations: np.ndarray  # |O \ P|
    omissions: np.ndarray  # |P \ O|
    absent: np.ndarray  # |¬P ∩ ¬O|

    @classmethod
    def from_sets(
        cls, predicted: np.ndarray, observed: np.ndarray, valid: np.ndarray | None = None
    ) -> SetAgreement:
        """Count over the last axis. predicted, observed, valid: bool [..., m] → int [...]."""
        keep = np.ones(predicted.shape, bool) if valid is None else valid
        p, o = predicted & keep, observed & keep
        return cls(
            agree=(p & o).sum(axis=-1),
            violations=(o & ~predicted & keep).sum(axis=-1),
            omissions=(p & ~observed).sum(axis=-1),
            absent=(keep & ~predicted & ~observed).sum(axis=-1),
        )

    def pooled(self, axis: int | tuple[int, ...]) -> SetAgreement:
        """Sum the counts over ``axis`` (micro-averaging)."""
        return SetAgreement(*(np.sum(c, axis=axis) for c in self._counts()))

    def _counts(self) -> tuple[np.ndarray, ...]:
        return (self.agree, self.violations, self.omissions, self.absent)

    @property
    def n_predicted(self) -> np.ndarray:
        return self.agree + self.omissions

    @property
    def n_observed(self) -> np.ndarray:
        return self.agree + self.violations

    @property
    def n_not_predicted(self) -> np.ndarray:
        return self.violations + self.absent

    @property
    def precision(self) -> np.ndarray:
        """Share of observed positions that are predicted: agree / |O|."""
        return _ratio(self.agree, self.n_observed)

    @property
    def recall(self) -> np.ndarray:
        """Share of predicted positions that are observed: agree / |P|."""
        return _ratio(self.agree, self.n_predicted)

    @property
    def jaccard(self) -> np.ndarray:
        """agree / |P ∪ O|."""
        return _ratio(self.agree, self.agree + self.violations + self.omissions)

    @property
    def violation_rate(self) -> np.ndarray:
        """Share of non-predicted positions that are decodable: violations / |¬P|."""
        return _ratio(self.violations, self.n_not_predicted)

    @property
    def omission_rate(self) -> np.ndarray:
        """Share of predicted positions that are not decodable: omissions / |P|."""
        return _ratio(self.omissions, self.n_predicted)

    def to_dict(self) -> dict[str, Any]:
        """Counts and rates as (nested) lists, NaN as None."""
        names = ("precision", "recall", "jaccard", "violation_rate", "omission_rate")
        out = {
            "agree": self.agree,
            "violations": self.violations,
            "omissions": self.omissions,
            "absent": self.absent,
        }
        out.update({name: getattr(self, name) for name in names})
        return jsonable(out)


# ----------------------------------------------------------------------------- inputs


def _as_array(value: Any, name: str, kind: Literal["bool", "float"], ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim:
        raise CompareInputError(f"{name}: expected {ndim} axes, got shape {array.shape}")
    if kind == "bool":
        if array.dtype != np.bool_:
            raise CompareInputError(f"{name}: expected dtype bool, got {array.dtype}")
        return array
    if not np.issubdtype(array.dtype, np.floating):
        raise CompareInputError(f"{name}: expected a float dtype, got {array.dtype}")
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise CompareInputError(f"{name}: non-finite value at index {first}")
    return array


@dataclass(frozen=True)
class Observations:
    """What the probes measured, in the conventions of docs/conventions.md.

    per_sample: bool [L+1, n, T+1, T] per-sample observed sets (layer, sample, token, pos);
    sets with the conventions' T+1 position axis are accepted, their CLS column dropped.
    errors: float [L+1, n, T+1, T] per-sample normalised errors, lower = more decodable.
    aggregate: bool [L+1, T+1, T] (or [L+1, T+1, T+1]) aggregate observed sets.
    score: float [L+1, T+1, T] continuous decodability (R², selectivity), higher = more.
    score_name: label of ``score`` in tables and figures.
    tau_sample / tau: the thresholds that made ``per_sample`` from ``errors`` (error < τ)
    and ``aggregate`` from ``score``; shown in the τ sweep.
    provenance: where these came from (see :func:`check_provenance`).
    Any field may be None, but at least one of the four arrays must be given.
    """

    per_sample: np.ndarray | None = None
    errors: np.ndarray | None = None
    aggregate: np.ndarray | None = None
    score: np.ndarray | None = None
    score_name: str = "R²"
    tau_sample: float | None = None
    tau: float | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        specs = {
            "per_sample": ("bool", 4),
            "errors": ("float", 4),
            "aggregate": ("bool", 3),
            "score": ("float", 3),
        }
        shapes: dict[str, tuple[int, ...]] = {}
        for name, (kind, ndim) in specs.items():
            value = getattr(self, name)
            if value is not None:
                array = _as_array(value, f"observations.{name}", kind, ndim)
                if kind == "bool" and array.shape[-1] == array.shape[-2]:
                    array = array[..., :-1]  # sets with the CLS column: it carries no input
                object.__setattr__(self, name, array)
                shapes[name] = array.shape
        if not shapes:
            raise CompareInputError(
                "observations: give at least one of per_sample, errors, aggregate, score"
            )
        # every array reduces to (layers, tokens, positions); per-sample ones also to n
        grids = {name: (s[0], *s[-2:]) for name, s in shapes.items()}
        samples = {name: s[1] for name, s in shapes.items() if len(s) == 4}
        for label, found in (("(layers, tokens, positions)", grids), ("samples", samples)):
            if len(set(found.values())) > 1:
                raise ProvenanceError(f"observations disagree on {label}: {found}")
        _, tokens, positions = next(iter(grids.values()))
        if tokens != positions + 1:
            raise CompareInputError(
                f"observations: token axis must be T+1 and position axis T, got {tokens} "
                f"tokens and {positions} positions (shapes {shapes})"
            )

    @property
    def shape(self) -> tuple[int, int | None, int]:
        """(L+1, n or None, T)."""
        arrays = [
            a for a in (self.per_sample, self.errors, self.aggregate, self.score) if a is not None
        ]
        n = next((a.shape[1] for a in arrays if a.ndim == 4), None)
        return arrays[0].shape[0], n, arrays[0].shape[-1]


# ----------------------------------------------------------------------------- τ sweep


@dataclass(frozen=True)
class TauSweep:
    """Agreement as the membership threshold τ moves.

    taus: float [k]; decodable_when: "below" (errors: decodable iff value < τ) or "above"
    (scores: decodable iff value ≥ τ); agreement: counts [k, L+1] pooled per layer.
    """

    taus: np.ndarray
    decodable_when: Literal["below", "above"]
    agreement: SetAgreement
    fixed_tau: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "taus": self.taus,
                "decodable_when": self.decodable_when,
                "fixed_tau": self.fixed_tau,
                "per_layer": self.agreement.to_dict(),
            }
        )


def tau_sweep(
    predicted: np.ndarray,
    values: np.ndarray,
    taus: Sequence[float] | np.ndarray,
    *,
    decodable_when: Literal["below", "above"],
    valid: np.ndarray | None = None,
    fixed_tau: float | None = None,
) -> TauSweep:
    """Pooled per-layer agreement for every τ.

    predicted, valid: bool [L+1, ...]; values: float [L+1, ...] of the same shape.
    One sort per layer and class, then every τ is a ``searchsorted``: exact and fast.
    """
    taus = np.asarray(sorted({float(t) for t in taus}), dtype=np.float64)
    keep = np.ones(predicted.shape, bool) if valid is None else valid
    shape = (taus.size, predicted.shape[0])
    agree, violations, omissions, absent = (np.zeros(shape, np.int64) for _ in range(4))
    for layer in range(predicted.shape[0]):
        v, p, k = values[layer], predicted[layer], keep[layer]
        pos, neg = np.sort(v[p & k]), np.sort(v[~p & k])
        pos_hits = _n_decodable(pos, taus, decodable_when)
        neg_hits = _n_decodable(neg, taus, decodable_when)
        agree[:, layer], omissions[:, layer] = pos_hits, pos.size - pos_hits
        violations[:, layer], absent[:, layer] = neg_hits, neg.size - neg_hits
    agreement = SetAgreement(agree, violations, omissions, absent)
    return TauSweep(taus, decodable_when, agreement, fixed_tau)


def _n_decodable(
    sorted_values: np.ndarray, taus: np.ndarray, decodable_when: Literal["below", "above"]
) -> np.ndarray:
    """How many of ``sorted_values`` are decodable at each τ (< τ, or ≥ τ)."""
    n_below = np.searchsorted(sorted_values, taus, side="left")
    if decodable_when == "below":
        return n_below
    if decodable_when == "above":
        return sorted_values.size - n_below
    raise CompareInputError(f"decodable_when: expected 'below' or 'above', got {decodable_when!r}")


# ----------------------------------------------------------------------------- comparison


def aggregate_membership(predicted: np.ndarray) -> np.ndarray:
    """Fraction of samples in which s ∈ I_pred(t, l).

    predicted: bool [L+1, n, T+1, T+1] → float64 [L+1, T+1, T] (data positions only).
    1 = "always" predicted, 0 = "never", in between = "sometimes".
    """
    positions = predicted.shape[-1] - 1
    return predicted[..., :positions].mean(axis=1, dtype=np.float64)


@dataclass(frozen=True)
class PerSampleComparison:
    """Per-sample predicted vs observed sets.

    samples: counts [L+1, n, T+1] (None without per-sample observed sets); per_token:
    [L+1, T+1] and per_layer: [L+1], pooled over samples (and tokens);
    mean_sample_jaccard: [L+1] mean over (sample, token) of each set pair's Jaccard;
    auroc_per_layer [L+1] / auroc_per_token [L+1, T+1]: −error against predicted
    membership, pooled over (sample, token, position) / (sample, position);
    sweep: agreement as the error threshold τ moves.
    """

    samples: SetAgreement | None
    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    mean_sample_jaccard: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None

    def to_dict(self) -> dict[str, Any]:
        """Everything but the per-sample counts (large), JSON-able."""
        return jsonable(
            {f.name: getattr(self, f.name) for f in fields(self) if f.name != "samples"}
        )


@dataclass(frozen=True)
class AggregateComparison:
    """Aggregate observed sets vs predicted membership (see the module docstring).

    per_token [L+1, T+1] / per_layer [L+1]: counts over "always" and "never" cells only;
    sometimes_observed / sometimes_unobserved [L+1]: "sometimes" cells decodable or not;
    auroc_per_layer [L+1], auroc_per_token [L+1, T+1]: score against always (positive) vs
    never (negative); sweep: agreement as the score threshold τ moves.
    """

    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    sometimes_observed: np.ndarray | None
    sometimes_unobserved: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None

    def to_dict(self) -> dict[str, Any]:
        """All fields, JSON-able."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` measured for one predictor (InfoFlow, rollout, ...).

    membership: float [L+1, T+1, T] aggregate predicted membership; verdicts: one sentence
    per layer; per_sample / aggregate: None when the observations lack that part.
    """

    name: str
    n_layers: int
    T: int
    n_samples: int
    score_name: str
    tau_sample: float | None
    tau: float | None
    membership: np.ndarray
    per_sample: PerSampleComparison | None
    aggregate: AggregateComparison | None
    verdicts: tuple[str, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    caveat: str = CAVEAT

    def to_dict(self) -> dict[str, Any]:
        """All numbers as JSON-able data (per-sample counts left out: see ``per_sample``)."""
        return jsonable(
            {
                "name": self.name,
                "shape": {"layers": self.n_layers + 1, "samples": self.n_samples, "T": self.T},
                "score_name": self.score_name,
                "tau_sample": self.tau_sample,
                "tau": self.tau,
                "verdicts": list(self.verdicts),
                "caveat": self.caveat,
                "membership": self.membership,
                "per_sample": self.per_sample,
                "aggregate": self.aggregate,
                "provenance": dict(self.provenance),
            }
        )


def _check_predicted(predicted: Any, observations: Observations) -> np.ndarray:
    pred = _as_array(predicted, "predicted sets", "bool", 4)
    layers, n, tokens, positions = pred.shape
    if tokens != positions:
        raise CompareInputError(
            f"predicted sets: expected [L+1, n, T+1, T+1], got shape {pred.shape}"
        )
    obs_layers, obs_n, obs_T = observations.shape
    found = {"L+1": (layers, obs_layers), "T": (positions - 1, obs_T)}
    if obs_n is not None:
        found["n samples"] = (n, obs_n)
    wrong = [f"{k}: predicted {a}, observed {b}" for k, (a, b) in found.items() if a != b]
    if wrong:
        raise ProvenanceError(
            "predicted and observed sets do not describe the same model and samples ("
            + "; ".join(wrong)
            + "); compute both from the same cache, aligned to the same samples"
        )
    return pred


def _per_sample_part(
    pred: np.ndarray, obs: Observations, taus: Sequence[float] | np.ndarray | None
) -> PerSampleComparison | None:
    if obs.per_sample is None and obs.errors is None:
        return None
    samples = per_token = per_layer = mean_jaccard = None
    if obs.per_sample is not None:
        samples = SetAgreement.from_sets(pred, obs.per_sample)  # [L+1, n, T+1]
        per_token = samples.pooled(axis=1)
        per_layer = per_token.pooled(axis=1)
        with warnings.catch_warnings():  # a layer where every pair of sets is empty: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_jaccard = np.nanmean(rearrange(samples.jaccard, "l n t -> l (n t)"), axis=1)
    auroc_layer = auroc_token = sweep = None
    if obs.errors is not None:
        neg_err = -obs.errors
        per_layer_axes, per_token_axes = "l n t s -> l (n t s)", "l n t s -> l t (n s)"
        auroc_layer = auroc(rearrange(neg_err, per_layer_axes), rearrange(pred, per_layer_axes))
        auroc_token = auroc(rearrange(neg_err, per_token_axes), rearrange(pred, per_token_axes))
        grid = DEFAULT_ERROR_TAUS if taus is None else np.asarray(taus, dtype=np.float64)
        if obs.tau_sample is not None:
            grid = np.append(grid, obs.tau_sample)
        sweep = tau_sweep(pred, obs.errors, grid, decodable_when="below", fixed_tau=obs.tau_sample)
    return PerSampleComparison(
        samples, per_token, per_layer, mean_jaccard, auroc_layer, auroc_token, sweep
    )


def _aggregate_part(
    membership: np.ndarray, obs: Observations, taus: Sequence[float] | np.ndarray | None
) -> AggregateComparison | None:
    if obs.aggregate is None and obs.score is None:
        return None
    always, never = membership == 1.0, membership == 0.0
    definite = always | never
    per_token = per_layer = some_obs = some_unobs = None
    if obs.aggregate is not None:
        per_token = SetAgreement.from_sets(always, obs.aggregate, valid=definite)
        per_layer = per_token.pooled(axis=1)
        sometimes = ~definite
        some_obs = (sometimes & obs.aggregate).sum(axis=(1, 2))
        some_unobs = (sometimes & ~obs.aggregate).sum(axis=(1, 2))
    auroc_layer = auroc_token = sweep = None
    if obs.score is not None:
        flat = "l t s -> l (t s)"
        auroc_token = auroc(obs.score, always, valid=definite)
        auroc_layer = auroc(
            rearrange(obs.score, flat), rearrange(always, flat), valid=rearrange(definite, flat)
        )
        grid = DEFAULT_SCORE_TAUS if taus is None else np.asarray(taus, dtype=np.float64)
        if obs.tau is not None:
            grid = np.append(grid, obs.tau)
        sweep = tau_sweep(
            always, obs.score, grid, decodable_when="above", valid=definite, fixed_tau=obs.tau
        )
    return AggregateComparison(
        per_token, per_layer, some_obs, some_unobs, auroc_layer, auroc_token, sweep
    )


def _percent(num: int, den: int) -> str:
    return "n/a" if den == 0 else f"{100.0 * num / den:.1f}%"


def _auroc_text(value: np.ndarray | None, layer: int) -> str:
    if value is None or not np.isfinite(value[layer]):
        return ""
    return f"; AUROC {float(value[layer]):.3f}"


def layer_verdicts(
    per_sample: PerSampleComparison | None, aggregate: AggregateComparison | None, n_layers: int
) -> tuple[str, ...]:
    """One sentence per layer 0..L from the per-sample agreement, else the aggregate one."""
    verdicts = []
    for layer in range(n_layers + 1):
        if per_sample is not None and per_sample.per_layer is not None:
            a = per_sample.per_layer
            agree, n_pred = int(a.agree[layer]), int(a.n_predicted[layer])
            viol, n_not = int(a.violations[layer]), int(a.n_not_predicted[layer])
            text = (
                f"layer {layer}: {_percent(agree, n_pred)} of predicted positions decodable "
                f"({agree} of {n_pred}, per sample); {_percent(viol, n_not)} violations "
                f"({viol} of {n_not} non-predicted positions decodable)"
                + _auroc_text(per_sample.auroc_per_layer, layer)
            )
        elif aggregate is not None and aggregate.per_layer is not None:
            a = aggregate.per_layer
            agree, n_pred = int(a.agree[layer]), int(a.n_predicted[layer])
            viol, n_not = int(a.violations[layer]), int(a.n_not_predicted[layer])
            some_obs = int(aggregate.sometimes_observed[layer])
            some_all = some_obs + int(aggregate.sometimes_unobserved[layer])
            text = (
                f"layer {layer} (aggregate): {_percent(agree, n_pred)} of always-predicted "
                f"positions decodable ({agree} of {n_pred}); {_percent(viol, n_not)} "
                f"violations ({viol} of {n_not} never-predicted positions decodable); "
                f"{some_obs} of {some_all} sometimes-predicted positions decodable"
                + _auroc_text(aggregate.auroc_per_layer, layer)
            )
        else:
            # only continuous scores: the AUROC is the whole verdict
            source = per_sample if per_sample is not None else aggregate
            text = f"layer {layer}: no thresholded sets" + _auroc_text(
                None if source is None else source.auroc_per_layer, layer
            )
        verdicts.append(text)
    return tuple(verdicts)


def compare(
    predicted: np.ndarray,
    observations: Observations,
    *,
    name: str = "infoflow",
    error_taus: Sequence[float] | np.ndarray | None = None,
    score_taus: Sequence[float] | np.ndarray | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Comparison:
    """Compare predicted sets with what the probes observed.

    predicted: bool [L+1, n, T+1, T+1] (layer, sample, token, position); only positions
    0..T-1 are compared (CLS carries no input). Its sample axis must be aligned with the
    observations' (the same samples in the same order).
    observations: the probes' sets and scores (:class:`Observations`).
    name: the predictor's name ("infoflow", "rollout").
    error_taus / score_taus: τ grids of the per-sample / aggregate sweeps (defaults
    :data:`DEFAULT_ERROR_TAUS` / :data:`DEFAULT_SCORE_TAUS`; the observations' own τ is
    always added). provenance: the predicted sets' provenance, stored in the result.
    Raises ProvenanceError when L, T or n differ, CompareInputError on bad arrays.
    """
    pred = _check_predicted(predicted, observations)
    layers, n, _, positions = pred.shape
    T = positions - 1
    data_pred = pred[..., :T]
    membership = aggregate_membership(pred)
    per_sample = _per_sample_part(data_pred, observations, error_taus)
    aggregate = _aggregate_part(membership, observations, score_taus)
    return Comparison(
        name=name,
        n_layers=layers - 1,
        T=T,
        n_samples=n,
        score_name=observations.score_name,
        tau_sample=observations.tau_sample,
        tau=observations.tau,
        membership=membership,
        per_sample=per_sample,
        aggregate=aggregate,
        verdicts=layer_verdicts(per_sample, aggregate, layers - 1),
        provenance={
            "predicted": dict(provenance or {}),
            "observed": dict(observations.provenance),
        },
    )


# ----------------------------------------------------------------------------- provenance


def _canonical(key: str, value: Any) -> str:
    if key == "cache" and isinstance(value, str | os.PathLike):
        return os.path.realpath(os.fspath(value))
    return json.dumps(jsonable(value), sort_keys=True, default=str)


def _same(key: str, a: Any, b: Any) -> bool:
    """Equal provenance values; a task given by name alone matches a task dict's name."""
    if key == "task" and (isinstance(a, str) or isinstance(b, str)):
        names = [v if isinstance(v, str) else dict(v).get("name") for v in (a, b)]
        return names[0] == names[1]
    return _canonical(key, a) == _canonical(key, b)


def check_provenance(
    pred_prov: Mapping[str, Any],
    probe_prov: Mapping[str, Any],
    *,
    pred_source: str = "predicted sets",
    probe_source: str = "probe results",
) -> None:
    """Refuse to compare sets that were not made from the same task, data and model.

    Both dicts must hold :data:`PROVENANCE_REQUIRED` (``task`` dict, ``data_seed``, ``n``
    samples); the fields of :data:`PROVENANCE_OPTIONAL` (``T``, ``n_layers``, ``cache``
    path, ``checkpoint_sha256``, ``inputs_sha256`` of the input samples) are compared when
    both have them; a ``task`` given by name alone is compared with the other's name.
    pred_source / probe_source name the files in the messages.
    Raises ProvenanceError naming every missing or mismatched field with both values.
    """
    missing = [
        f"{source} lacks field {key!r}"
        for source, prov in ((pred_source, pred_prov), (probe_source, probe_prov))
        for key in PROVENANCE_REQUIRED
        if key not in prov
    ]
    if missing:
        raise ProvenanceError(
            "cannot check that predicted and observed sets match: "
            + "; ".join(missing)
            + f" (required: {', '.join(PROVENANCE_REQUIRED)})"
        )
    mismatched = [
        f"field {key!r}: {pred_source} has {pred_prov[key]!r}, {probe_source} has "
        f"{probe_prov[key]!r}"
        for key in PROVENANCE_REQUIRED + PROVENANCE_OPTIONAL
        if key in pred_prov
        and key in probe_prov
        and not _same(key, pred_prov[key], probe_prov[key])
    ]
    if mismatched:
        raise ProvenanceError(
            "predicted and observed sets come from different data or models: "
            + "; ".join(mismatched)
            + ". Recompute the predicted sets on the samples of the probes' cache."
        )


def write_comparisons(
    path: str | os.PathLike,
    comparisons: Sequence[Comparison],
    *,
    provenance: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write comparisons as one JSON file ``{"comparisons": {name: ...}, "provenance": ...}``.

    Written to ``path.tmp-<pid>`` and renamed; raises OutputExistsError if ``path`` exists
    and ``overwrite`` is false.
    """
    document = jsonable(
        {
            "format": "infoprobe.comparison",
            "format_version": 1,
            "infoprobe_version": __version__,
            "caveat": CAVEAT,
            "comparisons": {c.name: c.to_dict() for c in comparisons},
            "provenance": dict(provenance or {}),
        }
    )
    with atomic_output(path, overwrite=overwrite, what="comparison file") as tmp:
        tmp.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    return Path(path)
