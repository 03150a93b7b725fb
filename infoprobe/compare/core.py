"""Compare predicted information sets I_pred(t, l) with what an instrument observed
(:class:`~infoprobe.compare.observations.Observations`).

The predicted sets are the reference and the observed sets the measurement (counts and
rates: :mod:`infoprobe.compare.agreement`). Each token's own position s = t is in every predicted
set (I(t, 0) = {t} and sets only grow), so it would inflate every agreement number: it is
reported apart (scope ``own``) and every headline number is about the other positions
(scope ``others``). CLS has no own data position.

Aggregate comparison (no sample axis): the predicted membership of s in I_pred(t, l) is
the fraction of samples in which s ∈ I_pred(t, l): ``always`` (1), ``never`` (0) or
``sometimes``. Violations are observed cells that are never predicted, omissions
unobserved cells that are always predicted; sometimes cells are counted on their own.

AUROC (threshold-free): how well the continuous score ranks predicted positions above the
others (errors enter with a minus sign). Observed is not used: see
:data:`infoprobe.compare.scopes.CAVEAT`.

The result types are :mod:`infoprobe.compare.scopes`, the verdict text
:mod:`infoprobe.compare.verdicts`, the comparison file
:mod:`infoprobe.compare.files`, two instruments crossed :mod:`infoprobe.compare.crosstab`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from einops import rearrange

from infoprobe.base.errors import CompareInputError
from infoprobe.compare.agreement import SetAgreement, tau_sweep
from infoprobe.compare.auroc import auroc
from infoprobe.compare.intervals import (
    DEFAULT_INTERVAL,
    IntervalSettings,
    aggregate_scope_intervals,
    aggregate_source,
    multiplicities,
    resample_index,
    sample_scope_intervals,
)
from infoprobe.compare.observations import Observations, as_array, scope_masks
from infoprobe.compare.predictors import INFOFLOW
from infoprobe.compare.provenance import ProvenanceError
from infoprobe.compare.scopes import AggregateScope, SampleScope, SetComparison
from infoprobe.compare.verdicts import layer_verdicts

DEFAULT_SCORE_TAUS = np.linspace(0.0, 1.0, 21)
"""τ grid of the aggregate sweep: scores such as R², members when at least τ."""


def _check_predicted(predicted: Any, observations: Observations) -> np.ndarray:
    pred = as_array(predicted, "predicted sets", "bool", 4)
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
            f"predicted sets and {observations.instrument} do not describe the same model and "
            "samples (" + "; ".join(wrong) + "); compute both from the same cache, aligned to "
            "the same samples"
        )
    return pred


def _sample_scope(
    pred: np.ndarray, obs: Observations, mask: np.ndarray, counts: np.ndarray | None, level: float
) -> SampleScope:
    """Per-sample agreement over the cells ``mask`` [T+1, T] marks (pred [L+1, n, T+1, T])."""
    valid = np.broadcast_to(mask, pred.shape)
    samples = per_token = per_layer = mean_jaccard = None
    if obs.per_sample is not None:
        samples = SetAgreement.from_sets(pred, obs.per_sample, valid)  # [L+1, n, T+1]
        per_token = samples.pooled(axis=1)
        per_layer = per_token.pooled(axis=1)
        with warnings.catch_warnings():  # a layer where every pair of sets is empty: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_jaccard = np.nanmean(rearrange(samples.jaccard, "l n t -> l (n t)"), axis=1)
    auroc_layer = auroc_token = sweep = None
    signed = obs.signed_sample_score()
    if signed is not None:
        layer_axes, token_axes = "l n t s -> l (n t s)", "l n t s -> l t (n s)"
        auroc_layer = auroc(
            rearrange(signed, layer_axes),
            rearrange(pred, layer_axes),
            rearrange(valid, layer_axes),
        )
        auroc_token = auroc(
            rearrange(signed, token_axes),
            rearrange(pred, token_axes),
            rearrange(valid, token_axes),
        )
        sweep = tau_sweep(
            pred,
            obs.sample_score,
            obs.sample_grid(),
            member_when=obs.member_when,
            valid=valid,
            fixed_tau=obs.tau_sample,
        )
    found = {}
    if counts is not None:
        found = sample_scope_intervals(pred, signed, valid, samples, counts, level)
    return SampleScope(
        samples, per_token, per_layer, mean_jaccard, auroc_layer, auroc_token, sweep, **found
    )


def _aggregate_scope(
    membership: np.ndarray,
    obs: Observations,
    mask: np.ndarray,
    taus: np.ndarray,
    intervals: tuple[np.ndarray, np.ndarray, float] | None,
) -> AggregateScope:
    always, never = membership == 1.0, membership == 0.0
    inside = np.broadcast_to(mask, membership.shape)
    definite = (always | never) & inside
    per_token = per_layer = some_obs = some_unobs = None
    if obs.aggregate is not None:
        per_token = SetAgreement.from_sets(always, obs.aggregate, valid=definite)
        per_layer = per_token.pooled(axis=1)
        sometimes = ~(always | never) & inside
        some_obs = (sometimes & obs.aggregate).sum(axis=(1, 2))
        some_unobs = (sometimes & ~obs.aggregate).sum(axis=(1, 2))
    auroc_layer = auroc_token = sweep = None
    if obs.score is not None:
        flat = "l t s -> l (t s)"
        auroc_token = auroc(obs.score, always, valid=definite)
        auroc_layer = auroc(
            rearrange(obs.score, flat), rearrange(always, flat), valid=rearrange(definite, flat)
        )
        grid = taus if obs.tau is None else np.append(taus, obs.tau)
        sweep = tau_sweep(
            always, obs.score, grid, member_when="above", valid=definite, fixed_tau=obs.tau
        )
    found = {}
    if intervals is not None and obs.score is not None:
        pred, counts, level = intervals
        source = aggregate_source(obs.per_sample, obs.sample_score, obs.score)
        recomputable = (
            obs.tau is not None
            and obs.aggregate is not None
            and np.array_equal(obs.aggregate, obs.score >= obs.tau)
        )  # the aggregate set is its score's threshold, so a resample can redraw it
        tau = obs.tau if recomputable else None
        found = aggregate_scope_intervals(pred, source, mask, counts, level, tau)
    return AggregateScope(
        per_token, per_layer, some_obs, some_unobs, auroc_layer, auroc_token, sweep, **found
    )


def aggregate_membership(predicted: np.ndarray) -> np.ndarray:
    """Fraction of samples in which s ∈ I_pred(t, l).

    predicted: bool [L+1, n, T+1, T+1] → float64 [L+1, T+1, T] (data positions only).
    1 = "always" predicted, 0 = "never", in between = "sometimes".
    """
    positions = predicted.shape[-1] - 1
    return predicted[..., :positions].mean(axis=1, dtype=np.float64)


def compare(
    predicted: np.ndarray,
    observations: Observations,
    *,
    name: str = INFOFLOW,
    score_taus: Sequence[float] | np.ndarray | None = None,
    provenance: Mapping[str, Any] | None = None,
    interval: IntervalSettings | None = DEFAULT_INTERVAL,
) -> SetComparison:
    """Compare predicted sets with what one instrument observed.

    predicted: bool [L+1, n, T+1, T+1] (layer, sample, token, position); only positions
    0..T-1 are compared (CLS carries no input). Its sample axis must be aligned with the
    observations' (the same samples in the same order).
    observations: the instrument's sets and scores (:class:`Observations`).
    name: the predictor's name (``infoflow``, ``your_sets``, ``rollout``:
        :mod:`infoprobe.compare.predictors`).
    score_taus: τ grid of the aggregate sweep (default :data:`DEFAULT_SCORE_TAUS`; the
    observations' own τ is always added). provenance: the predicted sets' provenance.
    interval: how to bootstrap the intervals over samples (default
    :data:`~infoprobe.compare.intervals.DEFAULT_INTERVAL`); None: no intervals.
    Raises ProvenanceError when L, T or n differ, CompareInputError on bad arrays.
    """
    pred = _check_predicted(predicted, observations)
    layers, n, _, positions = pred.shape
    T = positions - 1
    data_pred = pred[..., :T]
    membership = aggregate_membership(pred)
    masks = scope_masks(T)
    per_sample = aggregate = None
    obs = observations
    counts = None if interval is None else multiplicities(resample_index(n, interval), n)
    level = 0.0 if interval is None else interval.level
    if obs.per_sample is not None or obs.sample_score is not None:
        per_sample = {
            scope: _sample_scope(data_pred, obs, m, counts, level) for scope, m in masks.items()
        }
    if obs.aggregate is not None or obs.score is not None:
        taus = DEFAULT_SCORE_TAUS if score_taus is None else np.asarray(score_taus, float)
        boot = None if counts is None else (data_pred, counts, level)
        aggregate = {
            scope: _aggregate_scope(membership, obs, m, taus, boot) for scope, m in masks.items()
        }
    return SetComparison(
        name=name,
        instrument=obs.instrument,
        n_layers=layers - 1,
        T=T,
        n_samples=n,
        observations=obs,
        membership=membership,
        per_sample=per_sample,
        aggregate=aggregate,
        verdicts=layer_verdicts(per_sample, aggregate, layers - 1, obs.word),
        provenance={"predicted": dict(provenance or {}), "observed": dict(obs.provenance)},
        interval=None if interval is None else interval.to_dict(),
    )
