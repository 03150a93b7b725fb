"""The hooked InfoFlow Transformer: continuous inputs, a CLS token, per-layer head counts.

Read top to bottom: ``ModelConfig`` → ``Embed`` → ``Attention`` → ``MLP`` → ``Block`` →
``InfoFlowTransformer``. Every intermediate tensor passes through a
``transformer_lens.hook_points.HookPoint`` named exactly as in TransformerLens, so
``run_with_cache``, ``names_filter``, ``ActivationCache`` and ``cache["resid_post", 0]``
work unchanged. Shapes: ``b`` batch, ``p`` = T+1 positions (data tokens 0..T-1, CLS at
T), ``e`` = d_model, ``h`` heads, ``n`` = d_head.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Literal

import einops
import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.base.errors import UserError
from infoprobe.hooks.reader import CheckedActivationCache

PosEncoding = Literal["none", "learned", "sinusoidal"]
POS_ENCODINGS = ("none", "learned", "sinusoidal")


class ConfigError(UserError):
    """A model configuration field has an invalid value."""


class ModelInputError(UserError):
    """The input of a forward pass has the wrong type, dtype or shape."""


MAX_SEED = 2**63 - 1
"""The largest seed accepted anywhere: int64's largest value (torch's generators take
seeds up to 2**64 - 1, numpy's any size; seeds are written as int64 to files)."""


def check_seed(value: object, name: str = "seed") -> int:
    """``value`` as an int if it is an integer seed in 0..:data:`MAX_SEED`, else
    :class:`ConfigError` naming ``name``, the range and the value."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name}: expected an integer in 0..2**63-1, got {value!r}")
    if not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{name}: expected an integer in 0..2**63-1, got {value}")
    return int(value)


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of an :class:`InfoFlowTransformer`.

    Args:
        d_in: d, dimension of each input vector x(t).
        n_ctx: T, number of data tokens (the CLS token is appended at position T).
        d_model: E, width of the residual stream.
        heads: (h_1, ..., h_L), heads of each layer; ``len(heads)`` is the depth L.
        d_head: per-head dimension (the paper's n); ``None`` means E / h_l in each layer
            (E must then be divisible by every h_l).
        pos_encoding: ``"none"`` (the paper's default), ``"learned"`` or ``"sinusoidal"``.
        residual: keep the residual connections (on in the paper).
        layer_norm: pre-LayerNorm before attention, FFN and readout (our choice: off).
        d_mlp: hidden width of each block's FFN; 0 removes the FFN.
        d_readout: hidden width of the 2-layer GELU readout MLP on CLS.
        d_out: output dimension (1 for scalar targets).
        init_gain: every weight matrix starts N(0, (init_gain / sqrt(fan_in))^2); 1.0 is
            LeCun-normal, 1/sqrt(3) matches the standard deviation of PyTorch's
            ``nn.Linear`` default. Biases start at 0.
    """

    d_in: int
    n_ctx: int
    d_model: int = 32
    heads: tuple[int, ...] = (2, 2)
    d_head: int | None = None
    pos_encoding: PosEncoding = "none"
    residual: bool = True
    layer_norm: bool = False
    d_mlp: int = 128
    d_readout: int = 32
    d_out: int = 1
    init_gain: float = 1.0

    def __post_init__(self) -> None:
        self._check_types()
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        for name in ("d_in", "n_ctx", "d_model", "d_readout", "d_out"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.init_gain) and self.init_gain > 0):
            raise ConfigError(f"ModelConfig.init_gain must be > 0, got {self.init_gain}")
        if self.d_mlp < 0:
            raise ConfigError(f"ModelConfig.d_mlp must be >= 0, got {self.d_mlp}")
        if not self.heads or min(self.heads) < 1:
            raise ConfigError(f"ModelConfig.heads must be >= 1 head per layer, got {self.heads}")
        if self.pos_encoding not in POS_ENCODINGS:
            raise ConfigError(
                f"ModelConfig.pos_encoding must be one of {POS_ENCODINGS}, "
                f"got {self.pos_encoding!r}"
            )
        if self.d_head is None:
            for layer, h in enumerate(self.heads):
                if self.d_model % h:
                    raise ConfigError(
                        f"ModelConfig: d_model E={self.d_model} is not divisible by the "
                        f"{h} heads of layer {layer + 1}; choose E = n*h or set d_head"
                    )
        elif self.d_head < 1:
            raise ConfigError(f"ModelConfig.d_head must be >= 1, got {self.d_head}")

    def _check_types(self) -> None:
        """Refuse fields of the wrong type (a config read from a damaged JSON file)."""

        def is_int(v: object) -> bool:
            return isinstance(v, int | np.integer) and not isinstance(v, bool)

        def bad(name: str, expected: str) -> ConfigError:
            value = getattr(self, name)
            return ConfigError(
                f"ModelConfig.{name} must be {expected}, got {value!r} ({type(value).__name__})"
            )

        for name in ("d_in", "n_ctx", "d_model", "d_mlp", "d_readout", "d_out"):
            if not is_int(getattr(self, name)):
                raise bad(name, "an integer")
        if self.d_head is not None and not is_int(self.d_head):
            raise bad("d_head", "None or an integer")
        if isinstance(self.heads, str | bytes) or not isinstance(self.heads, tuple | list):
            raise bad("heads", "a list of head counts per layer, like [2, 2]")
        if not all(is_int(h) for h in self.heads):
            raise bad("heads", "a list of integer head counts per layer, like [2, 2]")
        for name in ("residual", "layer_norm"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise bad(name, "true or false")
        if not isinstance(self.pos_encoding, str):
            raise bad("pos_encoding", f"one of {POS_ENCODINGS}")
        if not isinstance(self.init_gain, int | float | np.number) or isinstance(
            self.init_gain, bool
        ):
            raise bad("init_gain", "a number")

    @property
    def n_layers(self) -> int:
        """L, the number of blocks."""
        return len(self.heads)

    # --- fields TransformerLens's ActivationCache reads from ``model.cfg`` -------------
    @property
    def n_heads(self) -> int:
        """Heads per layer when every layer has the same count (TransformerLens's field).

        Raises :class:`ConfigError` when heads differ per layer: TransformerLens utilities
        that read it (``ActivationCache.stack_head_results``) assume one count for all.
        """
        if len(set(self.heads)) != 1:
            raise ConfigError(
                f"ModelConfig.n_heads: heads differ per layer ({list(self.heads)}), so there "
                "is no single n_heads; use cfg.heads[layer] (TransformerLens utilities that "
                "assume one head count, such as stack_head_results, do not apply)"
            )
        return self.heads[0]

    @property
    def attn_only(self) -> bool:
        """True when the blocks have no FFN (``d_mlp == 0``), as in TransformerLens."""
        return self.d_mlp == 0

    @property
    def normalization_type(self) -> str | None:
        """None without LayerNorm. With ``layer_norm`` the LayerNorms record no
        ``hook_scale``, so TransformerLens's ``apply_ln=True`` cannot be served."""
        if not self.layer_norm:
            return None
        raise ConfigError(
            "ModelConfig.normalization_type: this model's LayerNorms record no hook_scale, "
            "so TransformerLens's apply_ln=True is not supported; use apply_ln=False"
        )

    def d_head_of(self, block: int) -> int:
        """n for block ``block`` (0-based)."""
        return self.d_head if self.d_head is not None else self.d_model // self.heads[block]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["heads"] = list(self.heads)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        if not isinstance(d, Mapping):
            raise TypeError(
                f"ModelConfig.from_dict: d: expected a dict of config fields, got "
                f"{type(d).__name__} {d!r:.80}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"ModelConfig: unknown field(s) {unknown}; valid: {sorted(known)}")
        missing = [n for n in ("d_in", "n_ctx") if n not in d]
        if missing:
            raise ConfigError(f"ModelConfig: missing field(s) {missing}")
        heads = d.get("heads", (2, 2))
        return cls(**{**d, "heads": tuple(heads) if isinstance(heads, list) else heads})


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
