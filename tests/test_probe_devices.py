"""The engine on every device present: each trained family fitted with the engine's own
autograd step (the CPU with the kernel switched off; CUDA where there is one) equals the
same fit with the CPU kernel, to float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from probe_data import retrieval_data

from infoprobe.probes import native
from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.chunked_fit import DEFAULT_MAX_MEMORY_BYTES, memory_budget
from infoprobe.probes.critic import fit_critic_probe
from infoprobe.probes.mlp import fit_mlp_probes
from infoprobe.probes.query import fit_query_probe

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
BUDGET = TrainingBudget(epochs=6, batch_size=64, lr=3e-3, patience=6)  # no early stop
"""A fixed number of epochs: rounding cannot move a best epoch across a stop."""


def splits(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.random.default_rng(1).permutation(n)
    return np.sort(order[500:]), np.sort(order[:150]), np.sort(order[150:500])


def fit(family: str, device: str):
    """One small fit of ``family`` on ``device`` (its numbers, as numpy)."""
    X, Y = retrieval_data(900, 3, 4, 2)
    kwargs = {"hidden": 16, "budget": BUDGET, "device": device, "progress": False}
    if family == "critic":
        result = fit_critic_probe(X, Y, *splits(len(X)), **kwargs)
        return {"pvi": result.pvi, "best_val_loss": result.best_val_loss}
    fit_fn = fit_mlp_probes if family == "mlp" else fit_query_probe
    result = fit_fn(X, Y, *splits(len(X)), **kwargs)
    return {"test_pred": result.test_pred, "r2": result.r2, "best_val_loss": result.best_val_loss}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["mlp", "query", "critic"])
def test_the_engine_on_each_device_equals_the_kernel(family, device):
    if native.kernel() is None:
        pytest.skip("the fused kernel is not built on this machine")
    with_kernel = fit(family, "cpu")
    with native.pytorch_steps():
        engine = fit(family, device)
    for name, expected in with_kernel.items():
        got = engine[name]
        assert got.shape == expected.shape, name
        # six epochs of Adam from the same start (on the CPU the largest difference was
        # 2.4e-6, in the critic's PVI): rounding and summation order only
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4, err_msg=name)
    if family != "critic":
        assert with_kernel["r2"].max() > 0.3  # the fits learned something worth comparing


def test_the_memory_budget_follows_the_device(monkeypatch):
    """The CPU keeps the budget asked for; a CUDA device's default is half its free memory
    (read from the device), an explicit budget stays as given."""
    free = 10 * 1024**3
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert memory_budget(cpu, DEFAULT_MAX_MEMORY_BYTES) == DEFAULT_MAX_MEMORY_BYTES
    assert memory_budget(cuda, DEFAULT_MAX_MEMORY_BYTES) == free // 2
    assert memory_budget(cuda, 12345) == 12345
