"""The hooked InfoFlow Transformer: continuous inputs, a CLS token, per-layer head counts.

Read top to bottom: ``ModelConfig`` (:mod:`infoprobe.model_config`) → ``Embed`` →
``Attention`` → ``MLP`` → ``Block`` → ``InfoFlowTransformer``. Every intermediate tensor
passes through a ``transformer_lens.hook_points.HookPoint`` named exactly as in
TransformerLens, so ``run_with_cache``, ``names_filter``, ``ActivationCache`` and
``cache["resid_post", 0]`` work unchanged. Shapes: ``b`` batch, ``p`` = T+1 positions
(data tokens 0..T-1, CLS at T), ``e`` = d_model, ``h`` heads, ``n`` = d_head.
"""

from __future__ import annotations

import math

import einops
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.base.errors import UserError
from infoprobe.hooks.reader import CheckedActivationCache
from infoprobe.model_config import (  # noqa: F401 - part of this module's interface
    MAX_SEED,
    POS_ENCODINGS,
    ConfigError,
    ModelConfig,
    PosEncoding,
    check_seed,
)


class ModelInputError(UserError):
    """The input of a forward pass has the wrong type, dtype or shape."""


def _normal(
    shape: tuple[int, ...], fan_in: int, cfg: ModelConfig, gen: torch.Generator
) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, generator=gen) / (math.sqrt(fan_in) / cfg.init_gain))


def _zeros(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(shape))


def sinusoidal_table(n_pos: int, d_model: int) -> torch.Tensor:
    """Fixed sinusoidal position table [n_pos, d_model] (Vaswani et al. 2017)."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)
    table = torch.zeros(n_pos, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return table


class Embed(nn.Module):
    """x [b, T, d] → [b, T+1, e]: linear embedding of each x(t), CLS appended at T."""

    def __init__(self, cfg: ModelConfig, gen: torch.Generator):
        super().__init__()
        self.W_E = _normal((cfg.d_in, cfg.d_model), cfg.d_in, cfg, gen)
        self.b_E = _zeros(cfg.d_model)
        self.cls = nn.Parameter(torch.randn(cfg.d_model, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x @ self.W_E + self.b_E
        cls = einops.repeat(self.cls, "e -> b 1 e", b=x.shape[0])
        return torch.cat([tokens, cls], dim=1)


class PosEmbed(nn.Module):
    """Position table [T+1, e] (learned or sinusoidal), broadcast to [b, T+1, e]."""

    def __init__(self, cfg: ModelConfig, gen: torch.Generator):
        super().__init__()
        n_pos = cfg.n_ctx + 1
        if cfg.pos_encoding == "learned":
            self.W_pos = nn.Parameter(0.5 * torch.randn(n_pos, cfg.d_model, generator=gen))
        else:
            self.register_buffer("W_pos", sinusoidal_table(n_pos, cfg.d_model), persistent=False)

    def forward(self, batch: int) -> torch.Tensor:
        return einops.repeat(self.W_pos, "p e -> b p e", b=batch)


class Attention(nn.Module):
    """Full bidirectional softmax attention with TransformerLens weight layout."""

    def __init__(self, cfg: ModelConfig, block: int, gen: torch.Generator):
        super().__init__()
        h, e, n = cfg.heads[block], cfg.d_model, cfg.d_head_of(block)
        self.n_heads, self.d_head = h, n
        self.W_Q = _normal((h, e, n), e, cfg, gen)
        self.W_K = _normal((h, e, n), e, cfg, gen)
        self.W_V = _normal((h, e, n), e, cfg, gen)
        self.W_O = _normal((h, n, e), h * n, cfg, gen)
        self.b_Q, self.b_K, self.b_V = _zeros(h, n), _zeros(h, n), _zeros(h, n)
        self.b_O = _zeros(e)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_scores, self.hook_pattern, self.hook_z = (
            HookPoint(),
            HookPoint(),
            HookPoint(),
        )

    def forward(self, resid: torch.Tensor, cls_only: bool = False) -> torch.Tensor:
        """resid [b, p, e] → attention output [b, p, e]; with ``cls_only`` only the CLS
        token queries (keys and values still come from every position): [b, 1, e]."""
        query = resid[:, -1:] if cls_only else resid
        q = self.hook_q(torch.einsum("bpe,hen->bphn", query, self.W_Q) + self.b_Q)
        k = self.hook_k(torch.einsum("bpe,hen->bphn", resid, self.W_K) + self.b_K)
        v = self.hook_v(torch.einsum("bpe,hen->bphn", resid, self.W_V) + self.b_V)
        scores = torch.einsum("bqhn,bkhn->bhqk", q, k) / math.sqrt(self.d_head)
        pattern = self.hook_pattern(torch.softmax(self.hook_attn_scores(scores), dim=-1))
        z = self.hook_z(torch.einsum("bhqk,bkhn->bqhn", pattern, v))
        return torch.einsum("bqhn,hne->bqe", z, self.W_O) + self.b_O


class MLP(nn.Module):
    """Position-wise FFN e → d_mlp → e with GELU."""

    def __init__(self, cfg: ModelConfig, gen: torch.Generator):
        super().__init__()
        self.W_in = _normal((cfg.d_model, cfg.d_mlp), cfg.d_model, cfg, gen)
        self.b_in = _zeros(cfg.d_mlp)
        self.W_out = _normal((cfg.d_mlp, cfg.d_model), cfg.d_mlp, cfg, gen)
        self.b_out = _zeros(cfg.d_model)
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(resid @ self.W_in + self.b_in)
        return self.hook_post(nn.functional.gelu(pre)) @ self.W_out + self.b_out


class Block(nn.Module):
    """resid_pre → (+ attention) → resid_mid → (+ FFN) → resid_post."""

    def __init__(self, cfg: ModelConfig, block: int, gen: torch.Generator):
        super().__init__()
        self.residual = cfg.residual
        self.ln1 = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()
        self.attn = Attention(cfg, block, gen)
        self.mlp = MLP(cfg, gen) if cfg.d_mlp else None
        self.ln2 = nn.LayerNorm(cfg.d_model) if cfg.layer_norm and cfg.d_mlp else nn.Identity()
        self.hook_resid_pre, self.hook_attn_out = HookPoint(), HookPoint()
        self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint()
        if self.mlp is not None:
            self.hook_mlp_out = HookPoint()

    def _add(self, resid: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        return resid + update if self.residual else update

    def forward(self, resid: torch.Tensor, cls_only: bool = False) -> torch.Tensor:
        """resid [b, p, e] → [b, p, e]; with ``cls_only`` the block is computed for the
        CLS token alone (the other positions still serve as keys and values): [b, 1, e]."""
        resid = self.hook_resid_pre(resid)
        attn_out = self.hook_attn_out(self.attn(self.ln1(resid), cls_only))
        if cls_only:
            resid = resid[:, -1:]
        resid = self.hook_resid_mid(self._add(resid, attn_out))
        if self.mlp is not None:
            resid = self._add(resid, self.hook_mlp_out(self.mlp(self.ln2(resid))))
        return self.hook_resid_post(resid)


class Readout(nn.Module):
    """2-layer GELU MLP on the final CLS state: [b, e] → [b, d_out].

    The output is de-standardised with the buffers ``y_mean`` and ``y_scale`` [d_out]
    (set by training from the target distribution), so the network itself works in
    standardised units while ``model(x)`` answers in the task's units.
    """

    def __init__(self, cfg: ModelConfig, gen: torch.Generator):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()
        self.W_1 = _normal((cfg.d_model, cfg.d_readout), cfg.d_model, cfg, gen)
        self.b_1 = _zeros(cfg.d_readout)
        self.W_2 = _normal((cfg.d_readout, cfg.d_out), cfg.d_readout, cfg, gen)
        self.b_2 = _zeros(cfg.d_out)
        self.register_buffer("y_mean", torch.zeros(cfg.d_out))
        self.register_buffer("y_scale", torch.ones(cfg.d_out))

    def forward(self, cls_state: torch.Tensor) -> torch.Tensor:
        hidden = nn.functional.gelu(self.ln(cls_state) @ self.W_1 + self.b_1)
        return (hidden @ self.W_2 + self.b_2) * self.y_scale + self.y_mean


def is_hooked(module: nn.Module) -> bool:
    """Whether a forward or backward hook would see a tensor inside ``module``: a hook
    on it or on any of its submodules (TransformerLens hooks are torch module hooks), or
    a global module hook."""
    global_hooks = (
        torch_module._global_forward_hooks,
        torch_module._global_forward_pre_hooks,
        torch_module._global_backward_hooks,
        torch_module._global_backward_pre_hooks,
    )
    if any(global_hooks):
        return True
    return any(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
        for m in module.modules()
    )


class InfoFlowTransformer(HookedRootModule):
    """The paper's model: x(1..T) ∈ R^d, CLS at position T, L blocks, readout on CLS.

    ``model(x)`` maps x [b, T, d_in] to [b, d_out]; ``model(x, stop_at_layer=k)`` returns
    the residual stream [b, T+1, d_model] entering block k (TransformerLens semantics;
    k = 0 gives the embedding). Weights are initialised from ``seed`` with a local
    generator (no global RNG state is touched).

    ``model(x)`` computes the last block for the CLS token alone (its other positions
    serve only as keys and values), since the readout reads nothing else: the same
    function with about 40 % fewer FLOPs in a two-block model, equal to the full
    computation within float32 rounding. Any hook in the last block (``run_with_cache``,
    ``hooks``, a torch module hook) or a ``stop_at_layer`` gives the full computation, so
    every hook sees every position. Set the class attribute ``trim_last_block = False``
    for the full computation always.
    """

    trim_last_block: bool = True

    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg: expected a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        gen = torch.Generator().manual_seed(check_seed(seed))
        self.embed = Embed(cfg, gen)
        self.hook_embed = HookPoint()
        self.pos_embed = PosEmbed(cfg, gen) if cfg.pos_encoding != "none" else None
        if self.pos_embed is not None:
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg, i, gen) for i in range(cfg.n_layers))
        self.readout = Readout(cfg, gen)
        self.setup()

    def forward(self, x: torch.Tensor, stop_at_layer: int | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x: expected a torch.Tensor [batch, T, d], got {type(x).__name__}")
        if x.ndim != 3 or x.shape[1:] != (self.cfg.n_ctx, self.cfg.d_in):
            raise ModelInputError(
                f"input x must have shape [batch, T={self.cfg.n_ctx}, d={self.cfg.d_in}], "
                f"got {list(x.shape)}"
            )
        if x.dtype != self.embed.W_E.dtype:
            raise ModelInputError(
                f"input x has dtype {x.dtype}, expected the weights' dtype "
                f"{self.embed.W_E.dtype} (convert it with x.to({self.embed.W_E.dtype}))"
            )
        resid = self.hook_embed(self.embed(x))
        if self.pos_embed is not None:
            resid = resid + self.hook_pos_embed(self.pos_embed(x.shape[0]))
        if stop_at_layer is not None:
            for block in self.blocks[:stop_at_layer]:
                resid = block(resid)
            return resid
        *first, last = self.blocks
        for block in first:
            resid = block(resid)
        resid = last(resid, cls_only=self.trim_last_block and not is_hooked(last))
        return self.readout(resid[:, -1])

    def run_with_cache(
        self,
        *model_args,
        return_cache_object: bool = True,
        remove_batch_dim: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, ActivationCache | dict[str, torch.Tensor]]:
        """Run the model and return ``(output, cache)``, as TransformerLens's models do.

        The cache is a ``transformer_lens.ActivationCache`` (``cache["resid_post", 0]``,
        ``decompose_resid()``, ``accumulated_resid()``, ``stack_head_results()`` when every
        layer has the same head count); ``return_cache_object=False`` gives the plain dict
        ``{hook name: tensor}``. Other keywords (``names_filter``, ``device``, ...) are
        ``HookedRootModule.run_with_cache``'s.
        """
        out, cache = super().run_with_cache(
            *model_args, remove_batch_dim=remove_batch_dim, **kwargs
        )
        if not return_cache_object:
            return out, cache
        return out, CheckedActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
