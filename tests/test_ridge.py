"""All-probes ridge: compared with sklearn per probe, closed forms, and precision."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.metrics import r2_score

from infoprobe.probes.errors import NonFiniteActivationError, ProbeInputError, SplitTooSmallError
from infoprobe.probes.ridge import RidgeAccumulator
from infoprobe.probes.ridge_fit import fit_ridge
from infoprobe.probes.split import TEST, TRAIN, VAL, make_split

N, C, E, G, D = 700, 3, 9, 4, 2


def _problem(seed: int = 0, offset: float = 0.0, per_cell: bool = False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, C, E)) * rng.uniform(0.5, 3.0, size=(C, E)) + offset
    W = rng.normal(size=(C, E, G * D)) * (rng.uniform(size=(C, 1, G * D)) > 0.3)
    if per_cell:
        Y = np.einsum("nce,cek->nck", X, W) + 3.0 * rng.normal(size=(N, C, G * D))
    else:
        Y = np.einsum("nce,cek->nk", X, W) / np.sqrt(C) + 3.0 * rng.normal(size=(N, G * D))
    return X.astype(np.float32), Y.astype(np.float32), make_split(N, seed=seed)


def _accumulate(X, Y, split, block=97, per_cell=False, **kw):
    acc = RidgeAccumulator(X.shape[1], X.shape[2], Y.shape[-1], per_cell_targets=per_cell, **kw)
    for i in range(0, X.shape[0], block):
        acc.update(X[i : i + block], Y[i : i + block], split[i : i + block])
    return acc


def _sklearn_r2(X, Y, split, c, g, alpha, per_cell):
    cols = slice(g * D, (g + 1) * D)
    y = Y[:, c, cols] if per_cell else Y[:, cols]
    xtr, ytr = X[split == TRAIN, c].astype(np.float64), y[split == TRAIN].astype(np.float64)
    model = Ridge(alpha=alpha).fit(xtr, ytr)
    pred = model.predict(X[split == TEST, c].astype(np.float64))
    r2 = r2_score(y[split == TEST], pred, multioutput="variance_weighted")
    return r2, model


@pytest.mark.parametrize("per_cell", [False, True])
def test_fixed_alpha_matches_sklearn_per_probe(per_cell):
    X, Y, split = _problem(1, per_cell=per_cell)
    sol = _accumulate(X, Y, split, per_cell=per_cell).solve(5.0, group_size=D)
    r2 = sol.r2(TEST).numpy()
    for c in range(C):
        for g in range(G):
            ref_r2, model = _sklearn_r2(X, Y, split, c, g, 5.0, per_cell)
            assert abs(r2[c, g] - ref_r2) < 1e-6
            np.testing.assert_allclose(
                sol.coef[c, :, g * D : (g + 1) * D].numpy(), model.coef_.T, atol=1e-5
            )
            np.testing.assert_allclose(
                sol.intercept[c, g * D : (g + 1) * D].numpy(), model.intercept_, atol=1e-4
            )


def test_lambda_chosen_on_validation_is_brute_force_argmin():
    X, Y, split = _problem(2)
    grid = np.logspace(-2, 5, 8)
    sol = _accumulate(X, Y, split).solve(grid, group_size=D)
    for c in range(C):
        for g in range(G):
            cols = slice(g * D, (g + 1) * D)
            val_sse = []
            for a in grid:
                m = Ridge(alpha=a).fit(X[split == TRAIN, c], Y[split == TRAIN, cols])
                val_sse.append(((m.predict(X[split == VAL, c]) - Y[split == VAL, cols]) ** 2).sum())
            assert int(sol.alpha_index[c, g]) == int(np.argmin(val_sse))


def test_closed_form_test_sse_equals_direct_prediction_sse():
    X, Y, split = _problem(3)
    sol = _accumulate(X, Y, split).solve((0.1, 10.0, 1e3), group_size=D)
    pred = sol.predict(X[split == TEST]).double().numpy()
    resid = (pred - Y[split == TEST][:, None, :]) ** 2
    direct = resid.reshape(-1, C, G, D).sum(axis=(0, 3))
    np.testing.assert_allclose(sol.sse(TEST).numpy(), direct, rtol=1e-4)


def test_block_size_does_not_change_the_fit():
    X, Y, split = _problem(4)
    one = _accumulate(X, Y, split, block=N).solve(1.0, group_size=D)
    many = _accumulate(X, Y, split, block=13).solve(1.0, group_size=D)
    np.testing.assert_allclose(one.coef.numpy(), many.coef.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one.r2().numpy(), many.r2().numpy(), atol=1e-6)


def test_large_offsets_keep_float64_precision():
    """Per-feature offsets of 100σ: R² equals a float64 reference within 1e-4."""
    X, Y, split = _problem(5)
    rng = np.random.default_rng(5)
    offset = (100 * X.std(0) * rng.choice([-1, 1], size=(C, E))).astype(np.float32)
    shifted = X + offset
    sol = _accumulate(shifted, Y, split).solve(1.0, group_size=D)
    ref = _accumulate(
        X.astype(np.float64), Y.astype(np.float64), split, compute_dtype=__import__("torch").float64
    ).solve(1.0, group_size=D)
    assert np.abs(sol.r2().numpy() - ref.r2().numpy()).max() < 1e-4


def test_fit_ridge_matches_sklearn_ridge_and_ridgecv():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 7)) + 5
    Y = X @ rng.normal(size=(7, 3)) + 4 * rng.normal(size=(300, 3))
    fixed = fit_ridge(X, Y, alphas=2.0)
    ref = Ridge(alpha=2.0).fit(X, Y)
    np.testing.assert_allclose(fixed.coef, ref.coef_, atol=1e-9)
    np.testing.assert_allclose(fixed.intercept, ref.intercept_, atol=1e-9)
    np.testing.assert_allclose(fixed.predict(X), ref.predict(X), atol=1e-9)
    grid = np.logspace(-2, 4, 13)
    loo = fit_ridge(X, Y, alphas=grid)
    assert loo.alpha == pytest.approx(RidgeCV(alphas=grid).fit(X, Y).alpha_)
    Xv = rng.normal(size=(100, 7)) + 5
    Yv = Xv @ rng.normal(size=(7, 3))  # unrelated weights: validation prefers the largest λ
    held = fit_ridge(X, Y, alphas=grid, X_val=Xv, Y_val=Yv)
    sse = [((Ridge(alpha=a).fit(X, Y).predict(Xv) - Yv) ** 2).sum() for a in grid]
    assert held.alpha == grid[int(np.argmin(sse))]


def test_one_dimensional_target_and_bad_inputs():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(50, 3))
    y = X[:, 0] * 2 + 1
    fit = fit_ridge(X, y, alphas=1e-6)
    assert fit.coef.shape == (1, 3)
    np.testing.assert_allclose(fit.predict(X)[:, 0], y, atol=1e-4)
    with pytest.raises(ProbeInputError, match="alphas"):
        fit_ridge(X, y, alphas=0.0)
    with pytest.raises(ProbeInputError, match="same number of samples"):
        fit_ridge(X, y[:10])
    bad = X.copy()
    bad[17, 2] = np.nan
    with pytest.raises(NonFiniteActivationError, match=r"\(17, 2\)"):
        fit_ridge(bad, y)


def test_many_alphas_need_validation_rows():
    X, Y, split = _problem(8)
    acc = _accumulate(X, Y, np.where(split == VAL, TRAIN, split))
    with pytest.raises(SplitTooSmallError, match="validation"):
        acc.solve((1.0, 2.0), group_size=D)
    with pytest.raises(ProbeInputError, match="group_size"):
        acc.solve(1.0, group_size=3)
