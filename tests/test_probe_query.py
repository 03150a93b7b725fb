"""Query-conditioned probe: per-sample errors reveal content-dependent retrieval.

The states are built by hand, so which x(s) each state carries in each sample is known:
cell 0 carries x(s*) of a position s* drawn anew for every sample (content-dependent
retrieval), cell 1 always carries x(0), cell 2 carries nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.query import fit_query_probe

T, D = 5, 4


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny problems: one intra-op thread avoids OpenMP spin contention on shared CI cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def retrieval_data(n: int, seed: int):
    """States ``X [n, 3, T·D]``, inputs ``x [n, T, D]`` and the retrieved position ``s* [n]``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, T, D))
    star = rng.integers(0, T, size=n)
    rows = np.arange(n)
    retrieved = np.zeros((n, T, D))
    retrieved[rows, star] = x[rows, star]  # x(s*) written into the slot of position s*
    fixed = np.zeros((n, T, D))
    fixed[:, 0] = x[:, 0]
    states = np.stack([retrieved, fixed, rng.normal(size=(n, T, D))], axis=1).reshape(n, 3, T * D)
    states += 0.05 * rng.normal(size=states.shape)
    return states.astype(np.float32), x.astype(np.float32), star


@pytest.fixture(scope="module", params=["onehot", "learned"])
def fitted(request):
    n = 2500
    X, x, star = retrieval_data(n, seed=0)
    order = np.random.default_rng(1).permutation(n)
    train, val, test = order[:1700], order[1700:2100], order[2100:]
    torch.set_num_threads(1)
    budget = TrainingBudget(lr=3e-3, epochs=120, patience=10)
    fit = fit_query_probe(
        X, x, train, val, test, query=request.param, hidden=64, budget=budget, progress=False
    )
    return X, x, star, test, fit


def test_error_is_small_exactly_where_the_queried_content_is_present(fitted):
    _, x, star, test, fit = fitted
    errors = fit.errors  # [n_test, C, S]
    assert errors.shape == (len(test), 3, T)
    present = np.arange(T)[None, :] == star[test][:, None]  # [n_test, T]
    # error of predicting the mean, per sample: where the probe has no information
    mean_error = ((x[test] - x[test].mean(0)) ** 2).sum(-1) / x[test].var(0).sum(-1)
    cell0 = errors[:, 0]
    assert np.quantile(cell0[present], 0.95) < 0.2
    assert np.median(cell0[~present]) > 0.6
    # where x(s) is absent the probe falls back to the mean, sample by sample
    assert np.median(np.abs(cell0 - mean_error)[~present]) < 0.15
    # per-sample membership at a fixed threshold recovers s* in every sample whose x(s)
    # differs from the mean (when x(s) is near the mean, absence cannot be seen)
    decidable = present | (mean_error >= 0.5)
    assert np.mean(((cell0 < 0.35) == present)[decidable]) > 0.98
    # the fixed-position cell: x(0) in every sample, nothing else
    assert np.median(errors[:, 1, 0]) < 0.05
    assert np.median(errors[:, 1, 1:]) > 0.6
    # the empty cell: no better than the mean anywhere
    assert errors[:, 2].mean() > 0.9


def test_aggregate_scores_miss_what_per_sample_errors_show(fitted):
    *_, fit = fitted
    # each x(s) is in cell 0 for only ~1/T of the samples: every aggregate R² is low
    assert np.all(fit.r2[0] < 0.45)
    assert fit.r2[1, 0] > 0.95


def test_errors_are_normalised_so_their_mean_is_the_nmse(fitted):
    X, x, _, test, fit = fitted
    np.testing.assert_allclose(fit.errors.mean(axis=0), fit.nmse, rtol=1e-4)
    np.testing.assert_allclose(fit.nmse, 1 - fit.r2, rtol=1e-10)
    # the same probe applied afresh to the test samples gives the same errors
    np.testing.assert_allclose(fit.errors_on(X[test], x[test]), fit.errors, atol=1e-4)
    # brute force: squared error over the D coordinates / test variance of x(s)
    variance = x[test].var(axis=0).sum(axis=-1)  # [T]
    brute = ((fit.test_pred - x[test][:, None]) ** 2).sum(-1) / variance
    np.testing.assert_allclose(fit.errors, brute, rtol=1e-4)


def test_bad_query_code_is_rejected():
    X, x, _ = retrieval_data(40, seed=3)
    with pytest.raises(ProbeInputError, match="query: expected 'onehot' or 'learned'"):
        fit_query_probe(X, x, np.arange(20), np.arange(20, 30), np.arange(30, 40), query="sin")
