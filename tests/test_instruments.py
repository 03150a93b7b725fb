"""Instruments as observations: the corrected per-sample decodability and flow."""

from __future__ import annotations

import numpy as np
import pytest

from infoprobe.compare.core import compare
from infoprobe.compare.instruments import flow
from infoprobe.compare.observations import Observations
from infoprobe.probes.observed import corrected_errors, sample_baseline


def selected_by_norm(n=3000, T=8, d=4, seed=0):
    """Inputs, and 'predicted' sets where every token's partner is the input of largest
    norm: selection by extremeness, as under max retrieval. Layer axis of length 1."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, T, d))
    partner = np.argmax((x**2).sum(-1), axis=1)  # [n]
    pred = np.zeros((1, n, T + 1, T + 1), bool)
    pred[0, np.arange(n), :, partner] = True
    return x, pred


def errors_of(x, x_hat):
    """The probes' per-sample normalised error ‖x̂ − x‖² / (SST / n): [1, n, T+1, T]."""
    sst = ((x - x.mean(0)) ** 2).sum(-1).mean(0)
    e = ((x_hat - x) ** 2).sum(-1) / sst  # [n, T]
    return np.repeat(e[None, :, None, :], x.shape[1] + 1, axis=2)


def others_auroc(pred, errors):
    result = compare(pred, Observations(sample_score=errors))
    return float(result.per_sample["others"].auroc_per_layer[0])


def test_baseline_is_the_mean_predictors_error():
    x, _ = selected_by_norm(n=200)
    mean_pred = np.broadcast_to(x.mean(0), x.shape)
    np.testing.assert_allclose(errors_of(x, mean_pred)[0, :, 0], sample_baseline(x), rtol=1e-12)


def test_a_probe_without_information_is_at_chance_once_corrected():
    """Predicting the mean: raw errors favour the non-selected positions (AUROC far below
    0.5, selection passes for information); corrected, every sample scores 1: 0.5."""
    x, pred = selected_by_norm()
    errors = errors_of(x, np.broadcast_to(x.mean(0), x.shape))
    assert others_auroc(pred, errors) < 0.2
    corrected = corrected_errors(errors, x)
    np.testing.assert_allclose(corrected, 1.0, rtol=1e-9)
    assert others_auroc(pred, corrected) == pytest.approx(0.5)


def test_equal_shrinkage_everywhere_is_at_chance_once_corrected():
    """x̂ = x̄ + ρ(x − x̄) at every position: equally decodable whatever was selected."""
    x, pred = selected_by_norm(seed=1)
    x_hat = x.mean(0) + 0.6 * (x - x.mean(0))
    errors = errors_of(x, x_hat)
    assert others_auroc(pred, errors) < 0.2
    # the ratio is (1 − ρ)² on every sample, up to rounding: ranks are a coin toss
    assert others_auroc(pred, corrected_errors(errors, x)) == pytest.approx(0.5, abs=0.02)


def test_a_probe_that_decodes_the_selected_input_ranks_it_first():
    x, pred = selected_by_norm(seed=2)
    partner = pred[0, :, 0, :-1]  # [n, T]
    noise = np.random.default_rng(3).standard_normal(x.shape)
    x_hat = np.where(partner[..., None], x + 0.1 * noise, x.mean(0) + 0.3 * noise)
    assert others_auroc(pred, corrected_errors(errors_of(x, x_hat), x)) > 0.95


def test_flow_observations_threshold_scores_at_the_given_level():
    rng = np.random.default_rng(4)
    scores = rng.gamma(1.0, 0.05, size=(2, 30, 6, 5))
    obs = flow(scores, scores.mean(1), threshold=0.05, name="flow")
    np.testing.assert_array_equal(obs.per_sample, scores >= 0.05)
    share = (scores >= 0.05).mean(1)  # the aggregate score: share of samples carried
    np.testing.assert_array_equal(obs.score, share)
    np.testing.assert_array_equal(obs.aggregate, share >= 0.5)
    assert obs.member_when == "above" and obs.tau_sample == 0.05
