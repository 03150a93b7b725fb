"""The CPU accelerator of the MLP, query and critic probes: their steps through the fused
kernel of :mod:`infoprobe.probes.native`.

Each family's loss and gradients are defined once, in PyTorch, by its module
(:class:`~infoprobe.probes.batched_training.BatchedProbes`: autograd on any device). On
the CPU the kernel computes the same step without writing the ``[c, h, S, b]`` hidden
activations to memory; a family names its accelerator here
(:attr:`~infoprobe.probes.batched_training.BatchedProbes.accelerator`) and the engine
uses it where it serves (:func:`~infoprobe.probes.batched_training.train_step`). Without
a C compiler, with ``INFOPROBE_NATIVE=0`` or inside :func:`native.pytorch_steps`, the
autograd step runs: the same values up to float32 rounding. Why the kernel stays: the
engine's own step is several times slower on the CPU (docs/probes.md, "The engine").

The steps work on a module's parameters by name (``w_in``, ``b_in``, ``w_out``,
``b_out``; the query code ``w_query`` or ``embed``; the critic's content head, basis and
null); gradients are the kernel's, composed with the chain rule of the few operations
outside it.
"""

from __future__ import annotations

import math

import torch

from infoprobe.probes.batched_training import BatchedProbes, Workspace
from infoprobe.probes.native import GeluReadoutKernel, kernel

__all__ = ["CRITIC", "MLP", "QUERY", "cpu_kernel"]

LOG_2PI = math.log(2 * math.pi)


def cpu_kernel(device: torch.device, k: int) -> GeluReadoutKernel | None:
    """The fused kernel when it serves ``device`` and k readout rows, else None."""
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


def empty_grads(module: BatchedProbes) -> None:
    """Give every parameter a ``.grad`` buffer (kept from step to step)."""
    for p in module.parameters():
        if p.grad is None:
            p.grad = torch.empty_like(p)


class MLPSteps:
    """:class:`~infoprobe.probes.mlp.BatchedMLP` (``w_in [c, S, h, E]`` ...) in the kernel:
    each (cell, target) probe is one of its groups, reading target ``g mod S``."""

    def serves(self, module: BatchedProbes, device: torch.device) -> bool:
        return cpu_kernel(device, module.w_out.shape[2]) is not None

    def activation_bytes(self, module: BatchedProbes, batch: int) -> int:
        return 4 * module.w_in.shape[1] * module.w_in.shape[2] * batch  # pre-activations

    def pre(self, module: BatchedProbes, x: torch.Tensor, work: Workspace) -> torch.Tensor:
        """First layer of every probe without ``b_in`` (the kernel's offset), ``[c·S, h,
        b]``: one GEMM per cell, into ``work``."""
        c, n_targets, hidden, d_in = module.w_in.shape
        pre = work("pre", c * n_targets, hidden, x.shape[1])
        w_in = module.w_in.view(c, n_targets * hidden, d_in)
        torch.bmm(w_in, x.transpose(1, 2), out=pre.view(c, n_targets * hidden, -1))
        return pre

    @torch.no_grad()
    def eval_loss(self, module, x, y, work) -> torch.Tensor:
        c, n_targets, k, hidden = module.w_out.shape
        fused = cpu_kernel(x.device, k)
        w_out, b_out = module.w_out.view(-1, k, hidden), module.b_out.view(-1, k)
        pre, b_in = self.pre(module, x, work), module.b_in.view(-1, 1, hidden)
        loss = fused_readout(fused, pre, b_in, w_out, b_out, y, work)
        return loss.view(c, n_targets) / (k * x.shape[1])

    @torch.no_grad()
    def train_step(self, module, x, y, work) -> None:
        empty_grads(module)
        c, n_targets, hidden, d_in = module.w_in.shape
        k, b = module.w_out.shape[2], x.shape[1]
        fused = cpu_kernel(x.device, k)
        pre = self.pre(module, x, work)
        g_pre = work("g_pre", c * n_targets, hidden, b)
        w_out, b_out = module.w_out.view(-1, k, hidden), module.b_out.view(-1, k)
        b_in, g_b_in = module.b_in.view(-1, 1, hidden), module.b_in.grad.view(-1, 1, hidden)
        g_w_out, g_b_out = module.w_out.grad.view(-1, k, hidden), module.b_out.grad.view(-1, k)
        grads = (g_pre, g_b_in, g_w_out, g_b_out)
        fused_readout(fused, pre, b_in, w_out, b_out, y, work, grads, 2.0 / (k * b))
        g_pre = g_pre.view(c, n_targets * hidden, b)
        torch.bmm(g_pre, x, out=module.w_in.grad.view(c, n_targets * hidden, d_in))


def state_into(module: BatchedProbes, x: torch.Tensor, work: Workspace) -> torch.Tensor:
    """The first layer's contribution of the state, ``[c, h, b]``, into ``work``."""
    c, b, _ = x.shape
    out = work("state", c, module.w_in.shape[1], b)
    return torch.baddbmm(module.b_in.unsqueeze(2), module.w_in, x.transpose(1, 2), out=out)


class QuerySteps:
    """:class:`~infoprobe.probes.query.BatchedQueryMLP` in the kernel: a cell is a group,
    its S query offsets the kernel's offsets; a step streams only through the state and
    its gradient, ``[c, h, b]`` each."""

    def serves(self, module: BatchedProbes, device: torch.device) -> bool:
        return cpu_kernel(device, module.w_out.shape[1]) is not None

    def activation_bytes(self, module: BatchedProbes, batch: int) -> int:
        return 4 * 2 * module.w_in.shape[1] * batch

    @torch.no_grad()
    def eval_loss(self, module, x, y, work) -> torch.Tensor:
        fused = cpu_kernel(x.device, y.shape[2])
        offsets = module.query_offsets().contiguous()
        loss = fused_readout(
            fused, state_into(module, x, work), offsets, module.w_out, module.b_out, y, work
        )
        return loss / y.numel()

    @torch.no_grad()
    def train_step(self, module, x, y, work) -> None:
        empty_grads(module)
        c, b, _ = x.shape
        n_pos, k = y.shape[1:]
        hidden = module.w_in.shape[1]
        fused = cpu_kernel(x.device, k)
        g_state = work("g_state", c, hidden, b)
        g_offsets = work("g_offsets", c, n_pos, hidden)  # [c, S, h]
        grads = (g_state, g_offsets, module.w_out.grad, module.b_out.grad)
        offsets = module.query_offsets().contiguous()
        state = state_into(module, x, work)
        scale = 2.0 / y.numel()
        fused_readout(fused, state, offsets, module.w_out, module.b_out, y, work, grads, scale)
        torch.bmm(g_state, x, out=module.w_in.grad)
        torch.sum(g_state, dim=2, out=module.b_in.grad)
        if module.query == "onehot":
            module.w_query.grad.copy_(g_offsets)
        else:
            torch.bmm(g_offsets, module.w_query.transpose(1, 2), out=module.embed.grad)
            torch.bmm(module.embed.transpose(1, 2), g_offsets, out=module.w_query.grad)


class CriticSteps:
    """:class:`~infoprobe.probes.critic.BatchedCritic` in the kernel: the hidden layer, its
    readout, the mixture's per-sample terms (softmax, scale floor, basis) and their
    backward in one pass (``critic_pass``), the null's statistics in another
    (``critic_null``); the content head's scales and the basis are differentiated here.
    The module supplies ``components`` (K), ``scale_floor`` and ``log_scale``."""

    def serves(self, module: BatchedProbes, device: torch.device) -> bool:
        return cpu_kernel(device, module.w_out.shape[1]) is not None

    def activation_bytes(self, module: BatchedProbes, batch: int) -> int:
        # the state and its gradient [h, b], the content head's values and gradients
        # [4, K, k, b] and the null's values [S, b]
        hidden, n_pos = module.w_in.shape[1], module.w_query.shape[1]
        return 4 * batch * (2 * hidden + 4 * module.components * module.k + n_pos)

    def readout(self, module: BatchedProbes, x: torch.Tensor) -> torch.Tensor:
        """The hidden layer's outputs ``[c, S, K+3+k, b]`` without writing the ``[c, h, S,
        b]`` activations (no gradients)."""
        c, b, _ = x.shape
        fused = cpu_kernel(x.device, module.w_out.shape[1])
        out = torch.empty(c, module.w_query.shape[1], module.w_out.shape[1], b)
        fused.forward(module.state(x), module.w_query.contiguous(), module.w_out.contiguous(),
                      module.b_out.contiguous(), out)  # fmt: skip
        return out

    def train_step(self, module, x, y, work) -> None:
        fused = cpu_kernel(x.device, module.w_out.shape[1])
        c, b, _ = x.shape
        n_pos, K = module.w_query.shape[1], module.components
        with torch.no_grad():
            z = y.permute(1, 2, 0).contiguous()  # [S, k, b]
            null = self.null(module, fused, z)  # [c, S, b]; the null's gradients set
            hidden, mixture, content = self.mixture_inputs(module, x, z, null)
            civ, rotation = mixture[1], mixture[4]
            g_state = work("g_state", c, module.w_in.shape[1], b)
            g_cm, g_civ, g_cn = torch.empty_like(civ), torch.empty_like(civ), torch.empty(c, K, b)
            g_rotation, g_ld = torch.empty_like(rotation), torch.empty(c)
            grads = (g_state, *(torch.empty_like(t) for t in hidden[1:]), g_cm, g_civ, g_cn,
                     g_rotation, g_ld)  # fmt: skip
            fused.critic_pass(hidden, mixture, module.scale_floor, -1.0 / (b * n_pos), grads)
            module.w_in.grad = torch.bmm(g_state, x)
            module.b_in.grad = g_state.sum(dim=2)
            module.w_query.grad, module.w_out.grad, module.b_out.grad = grads[1:4]
            g_content = torch.empty_like(content)
            g_content[:, 0] = g_cm
            floor = torch.sigmoid(content[:, 1] - module.scale_floor)  # d log σ / d raw
            g_content[:, 1] = (-2.0 * civ * g_civ - g_cn.unsqueeze(2)) * floor
            g_content = g_content.view(c, 2 * K * module.k, b)
            module.w_content.grad = torch.bmm(g_content, x)
            module.b_content.grad = g_content.sum(dim=2)
            g_rotation += g_ld.view(c, 1, 1) * torch.linalg.inv(rotation).transpose(1, 2)
            module.rotation.grad = g_rotation

    def eval_loss(self, module, x, y, work) -> torch.Tensor:
        fused = cpu_kernel(x.device, module.w_out.shape[1])
        with torch.no_grad():
            z = y.permute(1, 2, 0).contiguous()  # [S, k, b]
            null = self.null(module, fused, z, grad=False)
            hidden, mixture, _ = self.mixture_inputs(module, x, z, null)
            log_q = torch.empty(x.shape[0])
            fused.critic_pass(hidden, mixture, module.scale_floor, ll=log_q)
            return -(log_q + null.sum(dim=(1, 2))) / (z.shape[0] * z.shape[2])

    @staticmethod
    def mixture_inputs(
        module: BatchedProbes, x: torch.Tensor, z: torch.Tensor, null: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], torch.Tensor]:
        """What the kernel's critic pass reads, for standardised states ``x [c, b, E]``,
        targets ``z [S, k, b]`` and the null's values ``[c, S, b]``: the hidden layer's
        (state ``[c, h, b]``, ``w_query``, ``w_out``, ``b_out``), the mixture's (cm, civ,
        cn, z, basis, null, log |det basis|; native.GeluReadoutKernel.critic_pass) and the
        content head's raw outputs ``[c, 2, K, k, b]``."""
        c, b, _ = x.shape
        K, k = module.components, module.k
        content = torch.baddbmm(module.b_content.unsqueeze(2), module.w_content, x.transpose(1, 2))
        content = content.view(c, 2, K, k, b)
        cls = module.log_scale(content[:, 1])  # [c, K, k, b]
        rotation = module.rotation.contiguous()
        log_det = torch.linalg.slogdet(rotation)[1].contiguous()
        mixture = (content[:, 0].contiguous(), torch.exp(-2.0 * cls),
                   -cls.sum(dim=2) - 0.5 * k * LOG_2PI, z, rotation, null, log_det)  # fmt: skip
        hidden = tuple(t.contiguous() for t in (module.w_query, module.w_out, module.b_out))
        return (module.state(x), *hidden), mixture, content

    @staticmethod
    def null(
        module: BatchedProbes, fused: GeluReadoutKernel, z: torch.Tensor, grad: bool = True
    ) -> torch.Tensor:
        """log q0(y | s) ``[c, S, b]`` of targets ``z [S, k, b]``, and (``grad``) the
        gradients of the null's own loss −Σ_c mean over (b, S) of it written into the
        null's parameters, from the sums of the responsibilities γ of its components
        against the features [y², y, 1] (the kernel's ``critic_null``)."""
        c, n_pos, K0, k = module.null_mean.shape
        b = z.shape[2]
        log_scale = module.log_scale(module.null_log_scale)  # [c, S, K0, k]
        a, m = torch.exp(-2.0 * log_scale), module.null_mean
        log_w = torch.log_softmax(module.null_logit, dim=-1)  # [c, S, K0]
        const = log_w - log_scale.sum(-1) - 0.5 * k * LOG_2PI
        out, stats = torch.empty(c, n_pos, b), torch.empty(c, n_pos, K0, 2 * k + 1)
        fused.null(z, (m.contiguous(), a.contiguous(), const.contiguous()), out, stats)
        if not grad:
            return out
        stats *= -1.0 / (b * n_pos)  # d loss / d ψ (critic_scores.coefficients)
        g_quad, g_lin, g_const = stats[..., :k], stats[..., k : 2 * k], stats[..., -1:]
        module.null_mean.grad = a * (g_lin - g_const * m)
        g_log_scale = a * (g_quad - 2.0 * m * g_lin + g_const * m.square()) - g_const
        floor = torch.sigmoid(module.null_log_scale - module.scale_floor)  # d log σ / d raw
        module.null_log_scale.grad = g_log_scale * floor
        total = g_const.squeeze(-1)  # [c, S, K0]
        module.null_logit.grad = total - torch.exp(log_w) * total.sum(dim=-1, keepdim=True)
        return out


MLP, QUERY, CRITIC = MLPSteps(), QuerySteps(), CriticSteps()
"""The accelerators the MLP, query and critic families name."""
