"""A Transformer written in plain PyTorch, independently of infoprobe's model.py.

Plain module (no pytest fixtures): ``from foreign_models import PreLNTransformer``.
Pre-LayerNorm blocks with their own module names (``layers.{i}.mix.softmax`` holds the
attention pattern), a CLS token appended last, a linear readout on it. ``handset`` wires
one block by hand so that its information sets are known: with the norms off, token t
retrieves p(t) = argmax_s score(t, s) (a near-hard softmax; CLS is never a key), so
I(t, 1) = {t, p(t)} and CLS's I(T, 1) = {p(T)}.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

SITES = {"embed": "layers.0:input", "blocks": "layers.{l}", "pattern": "layers.{l}.mix.softmax"}
BETA = 100.0
"""Score scale of the hand-set head: a top-2 gap g leaves the runner-up weight exp(-BETA g)."""
BIG = 1e4
"""Score removed from the CLS key."""


class SelfAttention(nn.Module):
    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, width // n_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.softmax = nn.Softmax(dim=-1)
        self.out = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, p, _ = h.shape
        q, k, v = self.qkv(h).view(b, p, 3, self.n_heads, self.d_head).unbind(dim=2)
        scores = torch.einsum("bqhn,bkhn->bhqk", q, k) / math.sqrt(self.d_head)
        weights = self.softmax(scores)
        mixed = torch.einsum("bhqk,bkhn->bqhn", weights, v).reshape(b, p, -1)
        return self.out(mixed)


class Layer(nn.Module):
    def __init__(self, width: int, n_heads: int, d_ff: int, norm: bool):
        super().__init__()
        self.norm1 = nn.LayerNorm(width) if norm else nn.Identity()
        self.mix = SelfAttention(width, n_heads)
        self.norm2 = nn.LayerNorm(width) if norm else nn.Identity()
        self.ff = nn.Sequential(nn.Linear(width, d_ff), nn.GELU(), nn.Linear(d_ff, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.mix(self.norm1(h))
        return h + self.ff(self.norm2(h))


class PreLNTransformer(nn.Module):
    """x [b, T, d] → y [b, d_out]; pre-LN blocks over T data tokens and CLS (last)."""

    def __init__(self, d_in, width=16, n_heads=2, n_layers=2, d_ff=32, d_out=1, norm=True):
        super().__init__()
        self.tokens = nn.Linear(d_in, width)
        self.cls = nn.Parameter(torch.randn(width) * 0.5)
        self.layers = nn.ModuleList(Layer(width, n_heads, d_ff, norm) for _ in range(n_layers))
        self.final = nn.LayerNorm(width) if norm else nn.Identity()
        self.readout = nn.Linear(width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.tokens(x), self.cls.expand(x.shape[0], 1, -1)], dim=1)
        for layer in self.layers:
            h = layer(h)
        return self.readout(self.final(h[:, -1]))


def build(**kwargs) -> PreLNTransformer:
    """The factory named in the checkpoints: ``foreign_models:build``."""
    return PreLNTransformer(**kwargs)


def hand_set(d: int) -> PreLNTransformer:
    """A factory that builds the model with its weights set (``foreign_models:hand_set``):
    it has no random-init control, every seed gives :func:`handset`'s weights."""
    return handset(d)


def handset_kwargs(d: int) -> dict:
    """Residual layout [content d | CLS flag 1 | copy slot d]: width 2d + 1, one head."""
    return {"d_in": d, "width": 2 * d + 1, "n_heads": 1, "n_layers": 1, "d_ff": 4, "norm": False}


def handset(d: int) -> PreLNTransformer:
    """One block, one head, norms off: token t copies x(p(t)) into its slot (module doc).

    score(t, s) = -BETA <u(t), x(s)> - BIG [s = CLS], u(t) = x(t) (CLS: the vector c), so a
    data token retrieves the input least aligned with its own (never itself)."""
    model = PreLNTransformer(**handset_kwargs(d))
    width = 2 * d + 1
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tokens.weight[:d] = torch.eye(d)
        model.cls[:d] = torch.as_tensor(cls_query(d), dtype=torch.float32)
        model.cls[d] = 1.0
        W, b = model.layers[0].mix.qkv.weight, model.layers[0].mix.qkv.bias
        scale = math.sqrt(width)  # undo the 1/sqrt(d_head) of the scores
        W[:d, :d] = BETA * scale * torch.eye(d)  # q = BETA sqrt(n) content
        b[d] = BIG * scale  # q's flag coordinate is constant
        W[width : width + d, :d] = -torch.eye(d)  # k = -content, -flag
        W[width + d, d] = -1.0
        W[2 * width + d + 1 :, :d] = torch.eye(d)  # v: content into the slot coordinates
        model.layers[0].mix.out.weight[d + 1 :, d + 1 :] = torch.eye(d)
        model.readout.weight[0, d + 1] = 1.0
    return model


def cls_query(d: int) -> np.ndarray:
    """CLS's query content c [d]."""
    return np.ones(d) / math.sqrt(d)


def handset_scores(x: np.ndarray) -> np.ndarray:
    """Raw retrieval scores -<u(t), x(s)> of the hand-set head over data keys: [n, T+1, T]."""
    n, _, d = x.shape
    queries = np.concatenate([x, np.broadcast_to(cls_query(d), (n, 1, d))], axis=1)
    return -np.einsum("nqd,nkd->nqk", queries.astype(np.float64), x.astype(np.float64))


def handset_sets(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(true sets bool [n, 2, T+1, T] over layers 0 and 1, near-tie queries bool [n, T+1]).

    A query is a near tie when its top-2 scores differ by less than 0.1 (runner-up
    weight above exp(-10))."""
    n, T, _ = x.shape
    scores = handset_scores(x)
    sets = np.zeros((n, 2, T + 1, T), dtype=bool)
    sets[:, :, np.arange(T), np.arange(T)] = True
    partner = scores.argmax(axis=-1)
    sets[np.arange(n)[:, None], 1, np.arange(T + 1)[None, :], partner] = True
    top2 = np.sort(scores, axis=-1)[..., -2:]
    return sets, (top2[..., 1] - top2[..., 0]) < 0.1


def native(**config) -> torch.nn.Module:
    """A factory returning a HookedRootModule with TransformerLens names (infoprobe's own)."""
    from infoprobe.model import InfoFlowTransformer, ModelConfig

    return InfoFlowTransformer(ModelConfig.from_dict(config))


def broken(**kwargs) -> torch.nn.Module:
    """A factory that fails."""
    raise RuntimeError("broken on purpose")


class FlatOutput(PreLNTransformer):
    """The same Transformer returning one number per sample: y [b], not [b, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)[:, 0]


def build_flat(**kwargs) -> FlatOutput:
    """The factory of :class:`FlatOutput` (``foreign_models:build_flat``)."""
    return FlatOutput(**kwargs)


def handset_flat(d: int) -> FlatOutput:
    """:func:`handset`'s weights in a :class:`FlatOutput`."""
    model = FlatOutput(**handset_kwargs(d))
    model.load_state_dict(handset(d).state_dict())
    return model
