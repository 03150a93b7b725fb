"""Batched MLP probes: recovery of a known nonlinear map, equality with per-probe training,
independence from chunking, pooled metrics equal to sklearn's, and clear input errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import r2_score
from torch import nn

from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.errors import NonFiniteActivationError, ProbeInputError, SplitTooSmallError
from infoprobe.probes.mlp import BatchedMLP, fit_mlp_probes


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny problems: one intra-op thread avoids OpenMP spin contention on shared CI cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def split(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_val = n_test = n // 5
    return np.sort(order[n_val + n_test :]), np.sort(order[:n_val]), np.sort(order[n_val:][:n_test])


@pytest.fixture(scope="module")
def nonlinear():
    """Cell 0 carries u [n, 3]; cell 1 is noise. Target 0 = (sin 2u0, u1·u2), target 1 = noise."""
    rng = np.random.default_rng(0)
    n = 1500
    u = rng.normal(size=(n, 3))
    X = np.stack([u, rng.normal(size=(n, 3))], axis=1).astype(np.float32)
    Y = np.stack(
        [np.stack([np.sin(2 * u[:, 0]), u[:, 1] * u[:, 2]], 1), rng.normal(size=(n, 2))], 1
    ).astype(np.float32)
    splits = split(n)
    torch.set_num_threads(1)
    budget = TrainingBudget(epochs=150, lr=1e-2, patience=15)
    fit = fit_mlp_probes(X, Y, *splits, hidden=32, budget=budget, progress=False)
    return X, Y, splits, fit


def linear_r2(X: np.ndarray, Y: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    """Pooled R² of an ordinary least-squares fit (intercept included), brute force."""
    design = np.c_[X, np.ones(len(X))]
    coef, *_ = np.linalg.lstsq(design[train], Y[train], rcond=None)
    return r2_score(Y[test], design[test] @ coef, multioutput="variance_weighted")


def test_mlp_probe_recovers_known_nonlinear_function(nonlinear):
    X, Y, (train, _, test), fit = nonlinear
    assert fit.r2.shape == (2, 2) and fit.test_pred.shape == (len(test), 2, 2, 2)
    assert fit.r2[0, 0] > 0.9
    # the map is not linear: least squares on the same cell explains almost nothing
    assert linear_r2(X[:, 0], Y[:, 0], train, test) < 0.15
    # nothing to decode: noise target, or a cell without the information
    assert np.all(np.abs([fit.r2[0, 1], fit.r2[1, 0], fit.r2[1, 1]]) < 0.05)
    np.testing.assert_allclose(fit.nmse, 1 - fit.r2)


def test_pooled_r2_is_sklearn_variance_weighted(nonlinear):
    _, Y, (_, _, test), fit = nonlinear
    for c in range(2):
        for s in range(2):
            expected = r2_score(Y[test, s], fit.test_pred[:, c, s], multioutput="variance_weighted")
            assert fit.r2[c, s] == pytest.approx(expected, abs=1e-6)


def test_predict_reproduces_test_predictions(nonlinear):
    X, _, (_, _, test), fit = nonlinear
    np.testing.assert_allclose(fit.predict(X[test]), fit.test_pred, atol=1e-5)
    np.testing.assert_allclose(fit.predict(X[test], dtype=torch.float64), fit.test_pred, atol=1e-4)


def per_probe_reference(
    X: np.ndarray,
    Y: np.ndarray,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    init: dict[str, torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    patience: int,
    seed: int,
) -> tuple[np.ndarray, int]:
    """One probe trained alone with nn.Linear layers, the documented data order and
    early stopping. ``X [n, E]``, ``Y [n, k]``; returns (test predictions, best epoch)."""
    train, val, test = splits
    mx, sx = X[train].astype(np.float64).mean(0), X[train].astype(np.float64).std(0)
    my, sy = Y[train].astype(np.float64).mean(0), Y[train].astype(np.float64).std(0)
    x = torch.tensor(((X - mx) / sx).astype(np.float32))
    y = torch.tensor(((Y - my) / sy).astype(np.float32))
    probe = nn.Sequential(
        nn.Linear(*init["w_in"].shape[::-1]), nn.GELU(), nn.Linear(*init["w_out"].shape[::-1])
    )
    with torch.no_grad():
        probe[0].weight.copy_(init["w_in"])
        probe[0].bias.copy_(init["b_in"])
        probe[2].weight.copy_(init["w_out"])
        probe[2].bias.copy_(init["b_out"])
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    x_train, y_train = x[train], y[train]
    best, best_epoch, best_state = np.inf, -1, None
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad()
            ((probe(x_train[idx]) - y_train[idx]) ** 2).mean().backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = float(((probe(x[val]) - y[val]) ** 2).mean())
        if val_loss < best:
            best, best_epoch = val_loss, epoch
            best_state = {k: v.clone() for k, v in probe.state_dict().items()}
        if epoch - best_epoch >= patience:
            break
    probe.load_state_dict(best_state)
    with torch.no_grad():
        pred = probe(x[test]).numpy() * sy + my
    return pred, best_epoch


def test_batched_training_equals_per_probe_training():
    rng = np.random.default_rng(1)
    n, C, E, S, k, hidden, seed = 240, 2, 4, 3, 2, 8, 7
    X = rng.normal(size=(n, C, E)).astype(np.float32)
    Y = np.tanh(X[:, 0, :k])[:, None, :] * np.arange(1, S + 1)[None, :, None]
    Y = (Y + rng.normal(scale=0.8, size=(n, S, k))).astype(np.float32)
    splits = split(n, seed=1)
    budget = {"epochs": 12, "batch_size": 32, "lr": 0.05, "patience": 2, "seed": seed}
    fit = fit_mlp_probes(
        X,
        Y,
        *splits,
        hidden=hidden,
        budget=TrainingBudget(**budget, restarts=0),  # one start: the reference's progress=False
    )
    module = BatchedMLP(range(C), S, E, hidden, k, seed=seed)
    stopped_early = 0
    for c in range(C):
        for s in range(S):
            init = {name: p.detach()[c, s] for name, p in module.named_parameters()}
            pred, best_epoch = per_probe_reference(X[:, c], Y[:, s], splits, init, **budget)
            assert fit.best_epoch[c, s] == best_epoch
            np.testing.assert_allclose(fit.test_pred[:, c, s], pred, atol=2e-4)
            stopped_early += best_epoch < budget["epochs"] - budget["patience"] - 1
    assert stopped_early > 0  # the per-probe stopping rule was exercised


def test_chunking_over_cells_does_not_change_the_result():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3, 5)).astype(np.float32)
    Y = np.stack([X[:, 0, :2] ** 2, X[:, 2, 1:3]], 1).astype(np.float32)
    splits = split(200, seed=2)
    budget = TrainingBudget(epochs=5, batch_size=32)
    kwargs = {"hidden": 8, "budget": budget, "progress": False}
    whole = fit_mlp_probes(X, Y, *splits, **kwargs)
    chunked = fit_mlp_probes(X, Y, *splits, max_memory_bytes=1, **kwargs)
    assert whole.engine.group == 3 and chunked.engine.group == 1
    np.testing.assert_allclose(chunked.test_pred, whole.test_pred, atol=1e-6)
    np.testing.assert_array_equal(chunked.best_epoch, whole.best_epoch)


def test_bad_input_raises_clear_errors():
    X = np.zeros((20, 2, 3), np.float32)
    Y = np.zeros((20, 1, 2), np.float32)
    train, val, test = np.arange(12), np.arange(12, 16), np.arange(16, 20)
    with pytest.raises(ProbeInputError, match=r"X: expected 3 axes"):
        fit_mlp_probes(X[:, 0], Y, train, val, test)
    with pytest.raises(ProbeInputError, match="same number of samples"):
        fit_mlp_probes(X[:10], Y, train[:6], val[:2], test[:2])
    with pytest.raises(ProbeInputError, match="train_idx and val_idx: expected disjoint"):
        fit_mlp_probes(X, Y, train, np.arange(10, 16), test)
    with pytest.raises(ProbeInputError, match=r"val_idx: expected indices in \[0, 20\)"):
        fit_mlp_probes(X, Y, train, np.array([12, 25]), test)
    with pytest.raises(SplitTooSmallError, match="val_idx"):
        fit_mlp_probes(X, Y, train, np.array([], dtype=int), test)
    with pytest.raises(ProbeInputError, match="hidden"):
        fit_mlp_probes(X, Y, train, val, test, hidden=0)
    bad = X.copy()
    bad[5, 1, 2] = np.nan
    with pytest.raises(NonFiniteActivationError, match=r"X\[:, 0:2, :\].*\(5, 1, 2\)"):
        fit_mlp_probes(bad, Y, train, val, test, progress=False)
