"""Batched MLP probes: every (cell, target) probe trained at once as one module.

A *cell* c is one state we read from (for example one ``(layer, token)`` pair,
``h(t, l)``); a *target* s is one thing we try to decode (for example ``x(s)``
of one data position). Inputs ``X [n, C, E]`` hold every cell's state for
every sample, targets ``Y [n, S, k]`` every target. One probe per ``(c, s)``::

    x̂_{c,s} = W2_{c,s} · GELU(W1_{c,s} · h_c + b1_{c,s}) + b2_{c,s}
    h_c ∈ R^E  ->  hidden (default 64)  ->  R^k

All C·S probes live in grouped weight tensors (leading axes ``[C, S]``) and are
trained together with einsum/bmm, so one optimiser step updates every probe.
Every probe gets the same budget (hidden width plus a
:class:`~infoprobe.probes.batched_training.TrainingBudget`); training, early
stopping per probe, seeding and minibatch order follow
:mod:`infoprobe.probes.batched_training`, standardisation and memory-bounded
chunking :mod:`infoprobe.probes.chunked_fit`.

Metrics (per (c, s), on the test split, in original units; the definitions of
:mod:`infoprobe.probes.metrics`, shared with the ridge probes):

- ``r2 = 1 - SSE / SST``, pooled over the k coordinates of the target:
  ``SSE = Σ_i Σ_j (ŷ_ij - y_ij)²``, ``SST = Σ_i Σ_j (y_ij - ȳ_j)²`` with the
  test mean ȳ (``sklearn.metrics.r2_score(..., multioutput="variance_weighted")``).
- ``nmse = SSE / SST = 1 - r2`` (MSE relative to the target variance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from infoprobe.probes.batched_training import (
    BatchedProbes,
    TrainingBudget,
    Workspace,
    init_params,
)
from infoprobe.probes.chunked_fit import (
    DEFAULT_MAX_MEMORY_BYTES,
    BatchedProbeFit,
    ModuleFactory,
    ProbeDesign,
    ProbeShape,
    fit_batched,
)
from infoprobe.probes.native import GeluReadoutKernel, kernel
from infoprobe.probes.references import (
    REGRESSION_STATISTICS,
    judge_regression,
    regression_statistics,
)
from infoprobe.probes.validate import ArrayLike, check_positive_int

__all__ = [
    "BatchedMLP",
    "GeluReadout",
    "MLPProbeFit",
    "fit_mlp_probe_sets",
    "fit_mlp_probes",
    "mlp_bytes_per_cell",
    "mlp_design",
    "mlp_factory",
    "small_matmul_t",
]


# --------------------------------------------------------------------------- modules


SMALL_READOUT = 8
"""Up to this many outputs k, :class:`GeluReadout` forms ``wᵀ @ g`` as k
multiply-adds instead of a GEMM with inner size k."""


def small_matmul_t(w: torch.Tensor, g: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = wᵀ @ g`` for ``w [..., k, h]``, ``g [..., k, b]`` -> ``[..., h, b]``.

    For k <= :data:`SMALL_READOUT` as k fused multiply-adds: BLAS runs a GEMM with
    inner size k (4 for x(s) of a 4-d input) about 2x slower (measured on one core,
    c = 2 cells, h = 64, S·b = 4096: 0.15 ms instead of 0.30 ms).
    """
    k = w.shape[-2]
    if k > SMALL_READOUT:
        return torch.matmul(w.transpose(-1, -2), g, out=out)
    torch.mul(w[..., 0, :, None], g[..., 0:1, :], out=out)
    for j in range(1, k):
        out.addcmul_(w[..., j, :, None], g[..., j : j + 1, :])
    return out


class GeluReadout(torch.autograd.Function):
    """``w @ GELU(pre) + bias``: the hidden nonlinearity and output layer of the probes.

    ``pre [..., h, b]``, ``w [..., k, h]`` and ``bias [..., k, 1]`` (both
    broadcastable against ``pre``'s leading axes) -> ``[..., k, b]``. Same
    values and gradients as autograd through ``gelu`` and ``matmul``, but the
    gradient w.r.t. the activations, ``wᵀ @ g``, is a GEMM with inner size k
    (4 for x(s) of a 4-d input) that BLAS runs slowly; for k <=
    :data:`SMALL_READOUT` it is formed as k fused multiply-adds. Measured on
    one CPU core (c = 2 cells, S = 32, h = 64, b = 256, k = 4): 1.5 ms instead
    of 3.7 ms for this block's forward and backward.
    """

    @staticmethod
    def forward(ctx, pre: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        act = nn.functional.gelu(pre)
        ctx.save_for_backward(pre, act, w)
        ctx.bias_shape = bias.shape
        return torch.matmul(w, act) + bias

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pre, act, w = ctx.saved_tensors
        grad_w = torch.matmul(grad_out, act.transpose(-1, -2)).sum_to_size(w.shape)
        grad_bias = grad_out.sum(-1, keepdim=True).sum_to_size(ctx.bias_shape)
        k = w.shape[-2]
        if k <= SMALL_READOUT:
            grad_act = w[..., 0, :, None] * grad_out[..., 0:1, :]
            for j in range(1, k):
                grad_act = grad_act.addcmul_(w[..., j, :, None], grad_out[..., j : j + 1, :])
            grad_act = grad_act.expand(pre.shape)
        else:
            grad_act = torch.matmul(w.transpose(-1, -2), grad_out)
        grad_pre = torch.ops.aten.gelu_backward(grad_act.contiguous(), pre)
        return grad_pre, grad_w, grad_bias


def cpu_kernel(device: torch.device, k: int) -> GeluReadoutKernel | None:
    """The fused kernel (:mod:`infoprobe.probes.native`) when it serves ``device`` and k
    outputs, else None (the PyTorch step runs)."""
    fused = kernel() if torch.device(device).type == "cpu" else None
    return fused if fused is not None and k <= fused.max_outputs else None


def fused_readout(
    fused: GeluReadoutKernel,
    base: torch.Tensor,
    off: torch.Tensor | None,
    w_out: torch.Tensor,
    b_out: torch.Tensor,
    y: torch.Tensor,
    work: Workspace,
    grads: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor] | None = None,
    scale: float = 0.0,
) -> torch.Tensor:
    """Sum of squared residuals ``[G]`` of ``GELU(base + off)`` read out by ``w_out``, ``b_out``
    against ``y [b, S, k]``, and with ``grads`` the gradients of ``scale/2`` times their
    sum (shapes in :class:`~infoprobe.probes.native.GeluReadoutKernel`)."""
    y_t = work("y_t", y.shape[1], y.shape[2], y.shape[0])
    y_t.copy_(y.permute(1, 2, 0))
    loss = work("loss", base.shape[0])
    fused(base, off, w_out, b_out, y_t, scale, loss, grads)
    return loss


class BatchedMLP(BatchedProbes):
    """C·S independent MLPs ``E -> hidden -> GELU -> k``, one per (cell, target).

    Parameters (``nn.Linear`` orientation): ``w_in [c, S, hidden, E]``,
    ``b_in [c, S, hidden]``, ``w_out [c, S, k, hidden]``, ``b_out [c, S, k]``.
    ``cells`` are the global
    cell indices this module holds (they seed the initial weights).
    """

    loss_dims = (2, 3)

    def __init__(
        self,
        cells: range,
        n_targets: int,
        d_in: int,
        hidden: int,
        d_out: int,
        *,
        seed: int = 0,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        shapes = {
            "w_in": (n_targets, hidden, d_in),
            "b_in": (n_targets, hidden),
            "w_out": (n_targets, d_out, hidden),
            "b_out": (n_targets, d_out),
        }
        fan_in = {"w_in": d_in, "b_in": d_in, "w_out": hidden, "b_out": hidden}
        init_params(self, cells, shapes, fan_in, seed, arrays)
        self.probe_shape = (len(cells), n_targets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [c, b, E]`` (standardised) -> predictions ``[c, S, k, b]`` (standardised)."""
        c, n_targets, hidden, d_in = self.w_in.shape
        # first layer of all S probes of a cell as one GEMM: [S·h, E] @ [E, b]
        hid = torch.baddbmm(
            self.b_in.reshape(c, n_targets * hidden, 1),
            self.w_in.reshape(c, n_targets * hidden, d_in),
            x.transpose(1, 2),
        )
        pre = hid.view(c, n_targets, hidden, -1)
        return GeluReadout.apply(pre, self.w_out, self.b_out.unsqueeze(3))

    def _forward_into(
        self, x: torch.Tensor, y: torch.Tensor, work: Workspace
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pre-activations, activations ``[c·S, h, b]`` and the residual ``x̂ - y``
        ``[c, S, k, b]``, written into ``work`` (no autograd)."""
        c, n_targets, hidden, _ = self.w_in.shape
        b, k = x.shape[1], self.w_out.shape[2]
        pre = self._pre_into(x, work)
        act = torch.ops.aten.gelu.out(pre, out=work("act", c * n_targets, hidden, b))
        out = work("out", c * n_targets, k, b)
        torch.baddbmm(
            self.b_out.view(c * n_targets, k, 1), self.w_out.view(-1, k, hidden), act, out=out
        )
        residual = out.view(c, n_targets, k, b).sub_(y.permute(1, 2, 0))
        return pre, act, residual

    def _pre_into(self, x: torch.Tensor, work: Workspace, bias: bool = True) -> torch.Tensor:
        """First layer of every probe, ``[c·S, h, b]`` (one GEMM per cell), into ``work``;
        ``bias=False`` leaves out ``b_in`` (the fused kernel adds it)."""
        c, n_targets, hidden, d_in = self.w_in.shape
        pre = work("pre", c * n_targets, hidden, x.shape[1])
        w_in, out = self.w_in.view(c, n_targets * hidden, d_in), pre.view(c, n_targets * hidden, -1)
        if bias:
            torch.baddbmm(self.b_in.reshape(c, -1, 1), w_in, x.transpose(1, 2), out=out)
        else:
            torch.bmm(w_in, x.transpose(1, 2), out=out)
        return pre

    @torch.no_grad()
    def eval_loss(self, x: torch.Tensor, y: torch.Tensor, work: Workspace) -> torch.Tensor:
        """Mean squared error per probe ``[c, S]`` over samples and coordinates."""
        c, n_targets, k, hidden = self.w_out.shape
        fused = cpu_kernel(x.device, k)
        if fused is None:
            return self._forward_into(x, y, work)[2].square_().mean(dim=(2, 3))
        w_out, b_out = self.w_out.view(-1, k, hidden), self.b_out.view(-1, k)
        pre, b_in = self._pre_into(x, work, bias=False), self.b_in.view(-1, 1, hidden)
        loss = fused_readout(fused, pre, b_in, w_out, b_out, y, work)
        return loss.view(c, n_targets) / (k * x.shape[1])

    @torch.no_grad()
    def train_step(self, x: torch.Tensor, y: torch.Tensor, work: Workspace) -> None:
        """Gradients of the summed per-probe loss, by hand, into reused buffers."""
        for p in self.parameters():
            if p.grad is None:
                p.grad = torch.empty_like(p)
        c, n_targets, hidden, d_in = self.w_in.shape
        k, b = self.w_out.shape[2], x.shape[1]
        fused = cpu_kernel(x.device, k)
        if fused is not None:  # b_in is the kernel's offset: it also sums its gradient
            pre = self._pre_into(x, work, bias=False)
            g_pre = work("g_pre", c * n_targets, hidden, b)
            w_out, b_out = self.w_out.view(-1, k, hidden), self.b_out.view(-1, k)
            b_in, g_b_in = self.b_in.view(-1, 1, hidden), self.b_in.grad.view(-1, 1, hidden)
            grads = (
                g_pre,
                g_b_in,
                self.w_out.grad.view(-1, k, hidden),
                self.b_out.grad.view(-1, k),
            )
            fused_readout(fused, pre, b_in, w_out, b_out, y, work, grads, 2.0 / (k * b))
        else:
            g_pre = self._eager_gradients(x, y, work)
            torch.sum(g_pre, dim=2, out=self.b_in.grad.view(-1, hidden))
        g_pre = g_pre.view(c, n_targets * hidden, b)
        torch.bmm(g_pre, x, out=self.w_in.grad.view(c, n_targets * hidden, d_in))

    def _eager_gradients(self, x: torch.Tensor, y: torch.Tensor, work: Workspace) -> torch.Tensor:
        """The PyTorch step's readout gradients; returns d loss / d pre ``[c·S, h, b]``."""
        pre, act, residual = self._forward_into(x, y, work)
        c, n_targets, k, b = residual.shape
        hidden = self.w_in.shape[2]
        g_out = residual.mul_(2.0 / (k * b)).view(c * n_targets, k, b)
        torch.bmm(g_out, act.transpose(1, 2), out=self.w_out.grad.view(-1, k, hidden))
        torch.sum(g_out, dim=2, out=self.b_out.grad.view(-1, k))
        small_matmul_t(self.w_out.view(-1, k, hidden), g_out, out=act)  # d loss / d act
        return torch.ops.aten.gelu_backward.grad_input(act, pre, grad_input=pre)


# --------------------------------------------------------------------------- memory


def mlp_bytes_per_cell(
    n: int, n_targets: int, d_in: int, hidden: int, d_out: int, batch: int, eval_batch: int
) -> int:
    """float32 bytes one cell of :class:`BatchedMLP` needs during a fit.

    ``4 · [5·S·P + n·E + 2·b·(E + 3·S·h + 2·S·k) + 2·b_eval·S·(h + k)]`` with
    ``P = E·h + h + h·k + k`` parameters per probe (weights, gradients, two
    Adam moments, best copy), the cell's standardised inputs for all n
    samples, a training minibatch's activations with their gradients, and an
    evaluation batch's activations.
    """
    per_probe = d_in * hidden + hidden + hidden * d_out + d_out
    floats = (
        5 * n_targets * per_probe
        + n * d_in
        + 2 * batch * (d_in + 3 * n_targets * hidden + 2 * n_targets * d_out)
        + 2 * eval_batch * n_targets * (hidden + d_out)
    )
    return 4 * floats


# --------------------------------------------------------------------------- public API


@dataclass
class MLPProbeFit(BatchedProbeFit):
    """Fitted batched MLP probes (all arrays numpy; :class:`BatchedProbeFit`).

    ``best_val_loss [C, S]``: standardised validation MSE at each probe's best epoch;
    ``best_epoch [C, S]`` (0-based). ``params``: ``w_in [C, S, h, E]``, ``b_in [C, S, h]``,
    ``w_out [C, S, k, h]``, ``b_out [C, S, k]`` acting on standardised inputs/targets.
    """

    probe = "mlp"

    def factory(self) -> ModuleFactory:
        """The module factory that rebuilds these probes from their weights."""
        n_targets, k = self.engine.y_stats.mean.shape
        return mlp_factory(n_targets, self.engine.x_stats.mean.shape[1], self.hidden, k, 0)


def mlp_factory(n_targets: int, d_in: int, hidden: int, d_out: int, seed: int) -> ModuleFactory:
    """A :data:`ModuleFactory` building :class:`BatchedMLP` probes for a range of cells."""

    def make(cells: range, arrays: dict[str, np.ndarray] | None) -> BatchedProbes:
        return BatchedMLP(cells, n_targets, d_in, hidden, d_out, seed=seed, arrays=arrays)

    return make


def mlp_design(shape: ProbeShape, hidden: int, budget: TrainingBudget) -> ProbeDesign:
    """The :class:`ProbeDesign` of MLP probes of width ``hidden`` for these sizes."""
    S, k, b = shape.n_targets, shape.d_out, budget.batch_size
    return ProbeDesign(
        make_module=mlp_factory(S, shape.d_in, hidden, k, budget.seed),
        bytes_per_cell=mlp_bytes_per_cell(shape.n, S, shape.d_in, hidden, k, b, b),
        activation_bytes_per_cell=4 * S * hidden * b,
        desc="MLP probes",
        validate=regression_statistics,
        statistics=REGRESSION_STATISTICS,
        judge=judge_regression,
    )


def fit_mlp_probe_sets(
    datasets: Sequence[tuple[ArrayLike, ArrayLike]],
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> list[MLPProbeFit]:
    """:func:`fit_mlp_probes` on several ``(X [n, C, E], Y [n, S, k])`` datasets of the
    same shapes (a probe and its controls) with the same splits and budget, trained in
    one worker pool; one fit per dataset, each equal to its own :func:`fit_mlp_probes`.
    Memory: the chunk of cells is shared by the datasets (``bytes_per_cell`` times their
    number)."""
    hidden = check_positive_int(hidden, "hidden")
    budget = TrainingBudget() if budget is None else budget
    held = fit_batched(
        datasets,
        (train_idx, val_idx, test_idx),
        lambda shape: mlp_design(shape, hidden, budget),
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )
    return [MLPProbeFit(**h.fields(budget, hidden)) for h in held]


def fit_mlp_probes(
    X: ArrayLike,
    Y: ArrayLike,
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> MLPProbeFit:
    """Fit one MLP probe ``E -> hidden -> GELU -> k`` per (cell c, target s), all at once.

    ``X [n, C, E]``: states (numpy, torch, or any array with numpy slicing such
    as an h5py dataset; read ``chunk`` cells at a time). ``Y [n, S, k]``:
    targets. ``train_idx``/``val_idx``/``test_idx``: disjoint sample indices;
    probes train on train, early-stop per probe on val, are scored on test
    (``test_idx`` may be empty: ``r2``/``nmse`` are then NaN).
    Every probe gets the same budget: the width ``hidden`` and ``budget`` (a
    :class:`~infoprobe.probes.batched_training.TrainingBudget`: epochs, batch size,
    optimiser, learning rate, weight decay, patience, seed; default ``TrainingBudget()``).

    Memory: cells are processed in chunks of
    ``c = max_memory_bytes // bytes_per_cell`` with ``bytes_per_cell =
    4·[5·S·P + n·E + 2·b·(E + 3·S·h + 2·S·k) + 2·b·S·(h + k)]``,
    ``P = E·h + h + h·k + k`` (see :func:`mlp_bytes_per_cell`); the result
    ``test_pred`` adds ``4·n_test·C·S·k`` bytes. On the CPU a chunk is trained
    in cache-sized groups of cells (:data:`CPU_STEP_ACTIVATION_BYTES`).
    Results do not depend on the chunking or grouping.

    Raises :class:`ProbeInputError` on bad shapes, splits, budget or non-finite values.
    """
    return fit_mlp_probe_sets(
        [(X, Y)],
        train_idx,
        val_idx,
        test_idx,
        hidden=hidden,
        budget=budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )[0]
