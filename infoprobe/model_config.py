"""The architecture of an :class:`~infoprobe.model.InfoFlowTransformer` as data: its
configuration, the checks of its fields, and the seed range every seed option shares."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Literal

import numpy as np

from infoprobe.base.errors import UserError

PosEncoding = Literal["none", "learned", "sinusoidal"]
POS_ENCODINGS = ("none", "learned", "sinusoidal")


class ConfigError(UserError):
    """A model configuration field has an invalid value."""


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
