"""sklearn-compatible probes: sklearn's own estimator checks, agreement with sklearn's Ridge,
and the MLP probe as a thin wrapper of the batched engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.errors import SplitTooSmallError
from infoprobe.probes.estimators import MLPProbe, RidgeProbe
from infoprobe.probes.mlp import fit_mlp_probes


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny problems: one intra-op thread avoids OpenMP spin contention on shared CI cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# A smaller budget than the defaults keeps sklearn's ~50 checks fast; it still must reach
# R² > 0.5 in check_regressors_train.
@parametrize_with_checks(
    [
        RidgeProbe(),
        RidgeProbe(alphas=(0.1, 1.0, 10.0)),
        MLPProbe(hidden=16, epochs=30, lr=1e-2, patience=5),
    ]
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)) * np.arange(1, 7) + 10.0
    Y = X @ rng.normal(size=(6, 3)) + rng.normal(size=(300, 3))
    return X, Y


def test_ridge_probe_equals_sklearn_ridge(regression):
    X, Y = regression
    for y in (Y, Y[:, 0]):
        ours = RidgeProbe(alpha=3.0).fit(X, y)
        ref = Ridge(alpha=3.0).fit(X, y)
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8)
        np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-8)
        assert ours.predict(X).shape == y.shape


def test_ridge_probe_grid_chooses_like_ridgecv(regression):
    X, Y = regression
    grid = (1e-2, 1.0, 1e2, 1e4)
    ours = RidgeProbe(alphas=grid).fit(X, Y[:, 1])
    ref = RidgeCV(alphas=grid).fit(X, Y[:, 1])
    assert ours.alpha_ == ref.alpha_
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-7)


def test_mlp_probe_is_the_batched_engine_with_one_cell(regression):
    X, _ = regression
    y = np.tanh(X[:, :2] - 10).sum(1)
    est = MLPProbe(hidden=8, epochs=20, validation_fraction=0.2, random_state=0).fit(X, y)
    # the estimator's split and seed, replayed on the engine directly
    rng = np.random.RandomState(0)
    order = rng.permutation(len(X))
    seed = int(rng.randint(np.iinfo(np.int32).max))
    fit = fit_mlp_probes(
        X[:, None].astype(np.float32), y[:, None, None], np.sort(order[60:]), np.sort(order[:60]),
        np.arange(0), hidden=8, budget=TrainingBudget(epochs=20, seed=seed), progress=False,
    )  # fmt: skip
    np.testing.assert_allclose(est.predict(X), fit.predict(X[:, None])[:, 0, 0, 0], atol=1e-4)
    assert est.coefs_[0].shape == (6, 8) and est.coefs_[1].shape == (8, 1)


def test_mlp_probe_learns_a_nonlinear_map_in_a_pipeline():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(900, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2]
    mlp = make_pipeline(StandardScaler(), MLPProbe(hidden=32, epochs=150, lr=1e-2, patience=15))
    ridge = make_pipeline(StandardScaler(), RidgeProbe())
    assert cross_val_score(mlp, X, y, cv=3).mean() > 0.85
    assert cross_val_score(ridge, X, y, cv=3).mean() < 0.15


def test_one_sample_is_a_clear_error():
    with pytest.raises(SplitTooSmallError, match="n_samples=1"):
        MLPProbe().fit(np.ones((1, 2)), np.ones(1))
