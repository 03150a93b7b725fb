"""The accelerated training steps (the fused kernel), the dropping of early-stopped probes
and the worker threads change nothing: gradients equal autograd's,
and a query probe trained with them equals one MLP per cell trained alone with
``nn.Linear`` layers and ``torch.optim.Adam``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from probe_data import retrieval_data
from torch import nn

from infoprobe.cli import build_parser
from infoprobe.commands.run import run_settings_from_args
from infoprobe.pipeline.probing import ProbeSettings
from infoprobe.probes import chunked_fit, native
from infoprobe.probes.batched_training import (
    TrainingBudget,
    Workspace,
    autograd_step,
    eval_loss,
    train_step,
)
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.mlp import BatchedMLP, fit_mlp_probe_sets, fit_mlp_probes
from infoprobe.probes.query import BatchedQueryMLP, fit_query_probe, fit_query_probe_sets

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(params=["fused kernel", "pytorch steps"])
def steps(request):
    """Each test below runs with the compiled kernel (where it builds) and without it."""
    if request.param == "pytorch steps":
        with native.pytorch_steps():
            yield
    elif native.kernel() is None:
        pytest.skip("the fused kernel is not built on this machine")
    else:
        yield


def split(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.random.default_rng(1).permutation(n)
    n_eval = n // 5
    return np.sort(order[2 * n_eval :]), np.sort(order[:n_eval]), np.sort(order[n_eval:][:n_eval])


@pytest.mark.parametrize(
    ("make", "S", "k"),
    [
        (lambda: BatchedQueryMLP(range(3), 5, 6, 7, 2, query="onehot", seed=1), 5, 2),
        (lambda: BatchedQueryMLP(range(3), 5, 6, 7, 2, query="learned", embed_dim=4), 5, 2),
        (lambda: BatchedMLP(range(3), 5, 6, 7, 2, seed=1), 5, 2),
        (lambda: BatchedMLP(range(2), 3, 6, 7, 10, seed=1), 3, 10),  # k > 8: the GEMM branch
    ],
)
def test_the_accelerated_step_equals_autograd(make, S, k):
    if native.kernel() is None:
        pytest.skip("the fused kernel is not built on this machine")
    module = make()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(module.w_in.shape[0], 11, module.w_in.shape[-1], generator=gen)
    y = torch.randn(11, S, k, generator=gen)
    autograd_step(module, x, y)
    expected = {name: p.grad.clone() for name, p in module.named_parameters()}
    work = Workspace(x.device)
    for _ in range(2):  # the second step reuses the workspace's buffers
        train_step(module, x, y, work)
        for name, p in module.named_parameters():
            torch.testing.assert_close(p.grad, expected[name], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(eval_loss(module, x, y, work), module.per_probe_loss(x, y))


def per_cell_reference(X, Y, splits, init, *, query, epochs, batch_size, lr, patience, seed):
    """One query probe trained alone: nn.Linear on [h; code(s)], GELU, nn.Linear, Adam,
    the documented data order and early stopping on the validation loss over all s.
    ``X [n, E]``, ``Y [n, S, k]``; returns (test predictions [n_test, S, k], best epoch)."""
    train, val, test = splits
    mx, sx = X[train].astype(np.float64).mean(0), X[train].astype(np.float64).std(0)
    my, sy = Y[train].astype(np.float64).mean(0), Y[train].astype(np.float64).std(0)
    x = torch.tensor(((X - mx) / sx).astype(np.float32))
    y = torch.tensor(((Y - my) / sy).astype(np.float32))
    n_pos, hidden = Y.shape[1], init["w_in"].shape[0]
    code = nn.Identity() if query == "onehot" else nn.Embedding(n_pos, init["embed"].shape[1])
    w_first = torch.cat([init["w_in"], init["w_query"].T], dim=1)  # acts on [h; code(s)]
    first, last = nn.Linear(w_first.shape[1], hidden), nn.Linear(hidden, init["w_out"].shape[0])
    with torch.no_grad():
        first.weight.copy_(w_first)
        first.bias.copy_(init["b_in"])
        last.weight.copy_(init["w_out"])
        last.bias.copy_(init["b_out"])
        if query == "learned":
            code.weight.copy_(init["embed"])
    codes = torch.eye(n_pos) if query == "onehot" else torch.arange(n_pos)
    modules = nn.ModuleList([code, first, last])

    def predict(rows: torch.Tensor) -> torch.Tensor:  # [b, E] -> [b, S, k]
        c = code(codes).expand(len(rows), -1, -1)
        h = torch.cat([rows[:, None, :].expand(-1, n_pos, -1), c], dim=-1)
        return last(nn.functional.gelu(first(h)))

    optimizer = torch.optim.Adam(modules.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    best, best_epoch, best_state = np.inf, -1, None
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), batch_size):
            idx = torch.as_tensor(train)[order[start : start + batch_size]]
            optimizer.zero_grad()
            ((predict(x[idx]) - y[idx]) ** 2).mean().backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = float(((predict(x[val]) - y[val]) ** 2).mean())
        if val_loss < best:
            best, best_epoch = val_loss, epoch
            best_state = {k: v.clone() for k, v in modules.state_dict().items()}
        if epoch - best_epoch >= patience:
            break
    modules.load_state_dict(best_state)
    with torch.no_grad():
        return predict(x[test]).numpy() * sy + my, best_epoch


@pytest.mark.parametrize("query", ["onehot", "learned"])
@pytest.mark.usefixtures("steps")
def test_query_probe_equals_per_cell_training(query):
    n, cells, S, k, hidden, seed = 300, 4, 5, 2, 8, 3
    X, Y = retrieval_data(n, cells, S, k)
    X[:, -1] = np.random.default_rng(9).normal(size=X[:, -1].shape)  # carries nothing
    splits = split(n)
    budget = {"epochs": 30, "batch_size": 32, "lr": 0.005, "patience": 3, "seed": seed}
    fit = fit_query_probe(
        X,
        Y,
        *splits,
        hidden=hidden,
        query=query,
        embed_dim=3,
        budget=TrainingBudget(**budget, restarts=0),  # one start: the reference's
        progress=False,
    )
    module = BatchedQueryMLP(range(cells), S, 6, hidden, k, query=query, embed_dim=3, seed=seed)
    stopped_early = 0
    for c in range(cells):
        init = {name: p.detach()[c] for name, p in module.named_parameters()}
        pred, best_epoch = per_cell_reference(X[:, c], Y, splits, init, query=query, **budget)
        assert fit.best_epoch[c] == best_epoch
        np.testing.assert_allclose(fit.test_pred[:, c], pred, atol=2e-4)
        stopped_early += best_epoch < budget["epochs"] - budget["patience"] - 1
    assert 0 < stopped_early < cells  # probes were dropped while others still trained


@pytest.mark.parametrize("fit_fn", [fit_query_probe, fit_mlp_probes])
def test_worker_threads_and_grouping_do_not_change_results(fit_fn, monkeypatch):
    X, Y = retrieval_data(240, 5, 4, 2, seed=2)
    budget = TrainingBudget(epochs=6, batch_size=32, patience=2)
    kwargs = {"hidden": 8, "budget": budget, "progress": False}
    alone = fit_fn(X, Y, *split(240), **kwargs)
    assert alone.engine.group == 5
    monkeypatch.setattr(chunked_fit, "CPU_STEP_ACTIVATION_BYTES", 1)  # groups of one cell
    torch.set_num_threads(2)  # trained by two worker threads
    threaded = fit_fn(X, Y, *split(240), **kwargs)
    assert torch.get_num_threads() == 2  # the workers' one-thread setting is not left behind
    assert threaded.engine.group == 1
    np.testing.assert_allclose(threaded.test_pred, alone.test_pred, atol=1e-6)
    np.testing.assert_array_equal(threaded.best_epoch, alone.best_epoch)


def test_run_offers_the_query_probe():
    argv = ["run", "--task", "intrinsic-dim", "--D", "2", "--T", "16", "--out", "x"]
    args = build_parser().parse_args([*argv, "--probe", "query"])
    assert run_settings_from_args(args).probe == "query"


@pytest.mark.parametrize(
    ("fit_sets", "fit_one"),
    [(fit_query_probe_sets, fit_query_probe), (fit_mlp_probe_sets, fit_mlp_probes)],
)
def test_datasets_fitted_in_one_pass_equal_their_own_fits(fit_sets, fit_one, monkeypatch):
    """A probe, its shuffled control (the same states object) and a control of other states,
    trained by two workers in one pool, equal three separate fits, chunked or not."""
    X, Y = retrieval_data(240, 5, 4, 2, seed=3)
    other = np.random.default_rng(4).normal(size=X.shape).astype(np.float32)
    shuffled = Y[np.random.default_rng(5).permutation(len(Y))]
    datasets = [(X, Y), (other, Y), (X, shuffled)]
    budget = TrainingBudget(epochs=6, batch_size=32, patience=2, seed=1)
    kwargs = {"hidden": 8, "budget": budget, "progress": False}
    monkeypatch.setattr(chunked_fit, "CPU_STEP_ACTIVATION_BYTES", 1)  # groups of one cell
    alone = [fit_one(x, y, *split(240), **kwargs) for x, y in datasets]  # one thread
    torch.set_num_threads(2)
    for memory in (chunked_fit.DEFAULT_MAX_MEMORY_BYTES, 1):  # one chunk; one cell per chunk
        together = fit_sets(datasets, *split(240), max_memory_bytes=memory, **kwargs)
        assert len(together) == 3
        for one, fit in zip(alone, together, strict=True):
            np.testing.assert_array_equal(fit.test_pred, one.test_pred)
            np.testing.assert_array_equal(fit.best_epoch, one.best_epoch)
            for name, value in one.params.items():
                np.testing.assert_array_equal(fit.params[name], value)
    assert not np.array_equal(together[0].test_pred, together[2].test_pred)


def test_datasets_of_other_shapes_are_refused():
    X, Y = retrieval_data(120, 3, 4, 2)
    with pytest.raises(ProbeInputError, match=r"datasets\[1\]: expected X \[120, 3, 6\]"):
        fit_query_probe_sets([(X, Y), (X[:, :2], Y)], *split(120), progress=False)


def test_the_budget_is_one_object_with_clear_errors():
    X, Y = retrieval_data(120, 3, 4, 2)
    with pytest.raises(ProbeInputError, match="epochs must be an int >= 1, got 0"):
        TrainingBudget(epochs=0)
    with pytest.raises(ProbeInputError, match="optimizer must be 'adam' or 'adamw', got 'sgd'"):
        TrainingBudget(optimizer="sgd")
    with pytest.raises(ProbeInputError, match="budget: expected a TrainingBudget, got dict"):
        fit_mlp_probes(X, Y, *split(120), budget={"epochs": 3}, progress=False)
    with pytest.raises(ProbeInputError, match="budget: expected a TrainingBudget, got dict"):
        ProbeSettings(probe="mlp", budget={"epochs": 3})


def test_settings_record_the_budget_in_the_documented_layout():
    """The results file's settings keep the flat ``mlp_*`` layout of docs/probes.md; budget
    fields without a flag appear only where they differ from the default."""
    budget = TrainingBudget(epochs=7, patience=3, batch_size=16, lr=0.5)
    record = ProbeSettings(probe="query", mlp_hidden=9, budget=budget).to_dict()
    budget_keys = [k for k in record if k.startswith("mlp_")]
    assert budget_keys == ["mlp_hidden", "mlp_epochs", "mlp_patience", "mlp_batch_size", "mlp_lr"]
    assert [record[k] for k in budget_keys] == [9, 7, 3, 16, 0.5]
    assert list(record)[-1] == "device"
    decayed = ProbeSettings(budget=TrainingBudget(weight_decay=0.1, optimizer="adamw")).to_dict()
    assert decayed["mlp_weight_decay"] == 0.1 and decayed["mlp_optimizer"] == "adamw"
    assert "mlp_seed" not in decayed
