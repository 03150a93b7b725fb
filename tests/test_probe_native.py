"""The fused GELU-readout kernel: its values and gradients against float64 autograd, fits
with it against fits with the PyTorch steps, and the fallback when it cannot be built."""

from __future__ import annotations

import ctypes
import fnmatch
import shutil
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from probe_data import retrieval_data

from infoprobe.probes import native
from infoprobe.probes.batched_training import TrainingBudget, Workspace, train_step
from infoprobe.probes.fused import cpu_kernel
from infoprobe.probes.mlp import BatchedMLP, fit_mlp_probes
from infoprobe.probes.query import fit_query_probe

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def fused() -> native.GeluReadoutKernel:
    """The built kernel; CI has a C compiler, so a missing kernel there is a failure."""
    kernel = native.kernel()
    if kernel is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine: the fused kernel cannot be built")
    assert kernel is not None, "a C compiler exists but the fused kernel was not built"
    return kernel


def reference(base, off, w, bias, y, scale):
    """Float64 autograd of the kernel's contract: loss [G] and the four gradients."""
    G, Q = base.shape[0], 1 if off is None else off.shape[1]
    leaves = [None if t is None else t.double().requires_grad_() for t in (base, off, w, bias)]
    pre = leaves[0][:, None] + (0 if off is None else leaves[1][..., None])  # [G, Q, h, b]
    out = torch.einsum("gkh,gqhb->gqkb", leaves[2], torch.nn.functional.gelu(pre))
    out = out + leaves[3][:, None, :, None]
    targets = torch.stack([y[(g * Q + q) % len(y)] for g in range(G) for q in range(Q)])
    loss = ((out - targets.view(out.shape).double()) ** 2).sum(dim=(1, 2, 3))
    (loss.sum() * scale / 2).backward()
    return loss.detach(), [None if t is None else t.grad for t in leaves]


@pytest.mark.parametrize(
    ("G", "Q", "H", "B", "K", "S_y"),
    [
        (3, 16, 64, 256, 4, 16),  # the query probe's shapes
        (2, 5, 7, 37, 2, 5),  # odd width, a partial block of samples
        (3, 1, 9, 11, 1, 3),  # per-target MLP probes: one query, targets by group
        (1, 3, 16, 5, 16, 3),  # fewer samples than one block; the most outputs
    ],
)
def test_kernel_equals_float64_autograd(fused, G, Q, H, B, K, S_y):
    gen = torch.Generator().manual_seed(G * 100 + B)
    base = torch.randn(G, H, B, generator=gen) * 3
    base[0, 0, :3] = torch.tensor([-40.0, 40.0, 0.0])[: min(3, B)]  # exp's clamp, GELU's tails
    off = torch.randn(G, Q, H, generator=gen) if Q > 1 else None
    w, bias = torch.randn(G, K, H, generator=gen) / 4, torch.randn(G, K, generator=gen)
    y = torch.randn(S_y, K, B, generator=gen)
    scale = 2.0 / (Q * K * B)
    loss = torch.empty(G)
    grads = (torch.empty(G, H, B), None if off is None else torch.empty(G, Q, H))
    grads += (torch.empty(G, K, H), torch.empty(G, K))
    fused(base, off, w, bias, y, scale, loss, grads)
    expected_loss, expected = reference(base, off, w, bias, y, scale)
    torch.testing.assert_close(loss.double(), expected_loss, rtol=2e-6, atol=1e-5)
    for got, want in zip(grads, expected, strict=True):
        if want is not None:  # relative to the gradient's scale: sums of many terms
            torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6 * want.abs().max())
    forward_only = torch.empty(G)
    fused(base, off, w, bias, y, scale, forward_only)
    torch.testing.assert_close(forward_only, loss, rtol=1e-6, atol=0)


def test_gelu_and_its_slope_are_exact_to_float32_rounding(fused):
    """One unit per group, read out unchanged against a target of 0: loss = GELU(x)² and
    g_base = scale · GELU(x) · GELU'(x), against float64 over the whole range."""
    x = torch.cat([torch.linspace(-12, 12, 4801), torch.tensor([-100.0, -9.5, 9.5, 100.0])])
    G = len(x)
    loss, g_base = torch.empty(G), torch.empty(G, 1, 1)
    grads = (g_base, None, torch.empty(G, 1, 1), torch.empty(G, 1))
    fused(x.view(G, 1, 1), None, torch.ones(G, 1, 1), torch.zeros(G, 1), torch.zeros(G, 1, 1),
          2.0, loss, grads)  # fmt: skip
    x64 = x.double().requires_grad_()
    gelu = torch.nn.functional.gelu(x64)
    (slope,) = torch.autograd.grad(gelu.sum(), x64)
    tolerance = 2e-7 * x.abs().clamp(min=1).double()  # erf to 1.5e-7, scaled by |x|
    assert ((loss.double().sqrt() - gelu.detach().abs()).abs() <= tolerance).all()
    g_expected = 2 * gelu.detach() * slope  # and float32 rounding of the products
    assert ((g_base.flatten() - g_expected).abs() <= 2 * tolerance + 5e-7 * g_expected.abs()).all()


def test_kernel_refuses_what_it_cannot_compute(fused):
    too_many = fused.max_outputs + 1
    args = (torch.zeros(1, 2, 3), None, torch.zeros(1, too_many, 2), torch.zeros(1, too_many))
    with pytest.raises(MemoryError, match=f"k = {too_many}"):
        fused(*args, torch.zeros(1, too_many, 3), 1.0, torch.zeros(1))
    with pytest.raises(ValueError, match="float32, contiguous"):
        fused(torch.zeros(1, 3, 2).transpose(1, 2), None, *args[2:], torch.zeros(1, 2, 3), 1.0,
              torch.zeros(1))  # fmt: skip
    assert cpu_kernel(torch.device("cpu"), too_many) is None  # the PyTorch step serves it
    assert cpu_kernel(torch.device("meta"), 2) is None  # and every other device


@pytest.mark.parametrize("fit_fn", [fit_query_probe, fit_mlp_probes])
def test_fits_with_the_kernel_equal_fits_with_the_pytorch_steps(fused, fit_fn):
    n = 400
    X, Y = retrieval_data(n, 4, 6, 3)
    order = np.random.default_rng(1).permutation(n)
    splits = np.sort(order[160:]), np.sort(order[:80]), np.sort(order[80:160])
    budget = TrainingBudget(epochs=25, batch_size=50, lr=3e-3, patience=4)
    kwargs = {"hidden": 16, "budget": budget, "progress": False}
    with_kernel = fit_fn(X, Y, *splits, **kwargs)
    with native.pytorch_steps():
        assert native.kernel() is None
        with_torch = fit_fn(X, Y, *splits, **kwargs)
    np.testing.assert_array_equal(with_kernel.best_epoch, with_torch.best_epoch)
    np.testing.assert_allclose(with_kernel.test_pred, with_torch.test_pred, atol=2e-4)
    np.testing.assert_allclose(with_kernel.r2, with_torch.r2, atol=1e-4)
    assert with_kernel.r2.max() > 0.5  # the probes learned something worth comparing
    if fit_fn is fit_query_probe:
        np.testing.assert_allclose(with_kernel.errors, with_torch.errors, atol=2e-4)


def test_without_a_compiler_the_probes_warn_once_and_use_the_pytorch_steps(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    native._load.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built"):
            assert native.kernel() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once: later calls are silent
            assert native.kernel() is None
            module = BatchedMLP(range(1), 2, 3, 4, 2)
            x, y = torch.randn(1, 5, 3), torch.randn(5, 2, 2)
            train_step(module, x, y, Workspace(torch.device("cpu")))
        assert all(p.grad is not None for p in module.parameters())
    finally:
        native._load.cache_clear()


def test_the_switch_turns_the_kernel_off(monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.kernel() is None


def test_the_build_is_kept_per_source_and_left_complete(fused, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    library = native.build("cc")
    assert library.parent == tmp_path / "infoprobe" / "kernels"
    assert native.build("cc") == library  # built once
    assert [p.name for p in library.parent.iterdir()] == [library.name]  # no temp file left
    source = tmp_path / "changed.c"
    source.write_text(native.SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", source)
    assert native.build("cc") != library  # a changed source is built anew


def test_a_compiler_without_march_native_still_builds_the_kernel(fused, monkeypatch, tmp_path):
    compiler = tmp_path / "cc-without-native"
    compiler.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = -march=native ] && exit 1; done\nexec cc "$@"\n'
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    portable = native.GeluReadoutKernel(ctypes.CDLL(str(native.build(str(compiler)))))
    gen = torch.Generator().manual_seed(5)
    base, w = torch.randn(2, 8, 20, generator=gen), torch.randn(2, 3, 8, generator=gen)
    bias, y = torch.randn(2, 3, generator=gen), torch.randn(2, 3, 20, generator=gen)
    args = (base, None, w, bias, y, 1.0)
    losses = torch.empty(2), torch.empty(2)
    portable(*args, losses[0])
    fused(*args, losses[1])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=0)


def test_the_kernel_source_ships_with_the_package():
    """A non-editable install must carry the C file (pyproject's package data)."""
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["infoprobe.probes"]
    assert native.SOURCE.exists()
    assert any(fnmatch.fnmatch(native.SOURCE.name, pattern) for pattern in patterns)
