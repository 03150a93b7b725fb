"""A hand-wired one-block InfoFlowTransformer whose information sets are known exactly.

Plain module (no pytest fixtures): ``from handset import handset_model, true_sets``.

Residual stream of width E = 3d + T + 1, four slots:

    [0, d)          content: x(t) for data tokens, the fixed vector c for CLS
    [d, 2d)         slot A: head 0 writes x(p(t)) here (or a^T x(p(t)) in its first coordinate)
    [2d, 3d)        slot B: head 1 writes x(position) here
    [3d, 3d+T+1)    one-hot of the token's own position (the learned position table)

Head 0, max retrieval: score(t, s) = beta * q(t)^T M x(s), q(t) = x(t) (c for CLS), minus
BIG when s = t (self) or s = T (CLS key). With beta large the softmax is (near) hard, so
token t reads x(p(t)), p(t) = argmax_{s != t, s < T} q(t)^T M x(s).
Head 1, position-specific: score(t, s) = BIG * [s = position], whatever the content; every
token (CLS too) copies x(position).
So I(t, 0) = {t} (CLS: {T}) and I(t, 1) = {t, p(t), position} (CLS: {T, p(T), position}).
With ``offset`` head 1 is relative instead: data token t copies x((t + offset) mod T), CLS
still x(position).
Only with a near tie (top-2 scores closer than ``delta``) is the attention not hard; tests
leave such queries out (``near_ties``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from infoprobe.model import InfoFlowTransformer, ModelConfig

DEFAULT_BETA = 100.0
"""Score scale of head 0: a top-2 gap of delta leaves the runner-up weight exp(-beta*delta)."""
NEAR_TIE = 0.1
"""Documented near-tie tolerance: queries whose top-2 raw scores differ by less are left out."""
BIG = 1e5
"""Positional score that excludes (head 0) or forces (head 1) a key."""


def cls_content(d: int) -> np.ndarray:
    """The fixed content vector c of CLS [d]: its head-0 query (content-dependent retrieval)."""
    return np.ones(d) / math.sqrt(d)


def value_direction(d: int) -> np.ndarray:
    """a [d]: with ``value_rank=1`` head 0 copies only a^T x(p(t))."""
    return np.arange(1, d + 1) / np.linalg.norm(np.arange(1, d + 1))


def handset_model(
    T: int = 8,
    d: int = 4,
    *,
    beta: float = DEFAULT_BETA,
    position: int = 0,
    value_rank: int | None = None,
    M: np.ndarray | None = None,
    offset: int | None = None,
) -> InfoFlowTransformer:
    """The hand-set model (see the module docstring); ``M`` [d, d] defaults to the identity."""
    if not 0 <= position < T or value_rank not in (None, 1) or offset not in (None, *range(1, T)):
        raise ValueError(
            f"need 0 <= position < T={T} and value_rank in (None, 1), "
            f"and offset in 1..T-1 or None, got position={position}, value_rank={value_rank}, "
            f"offset={offset}"
        )
    M = np.eye(d) if M is None else np.asarray(M)
    E, n = 3 * d + T + 1, d + T + 2  # d_head n: content | self one-hot (T+1) | CLS flag
    cfg = ModelConfig(
        d_in=d, n_ctx=T, d_model=E, heads=(2,), d_head=n, pos_encoding="learned",
        residual=True, layer_norm=False, d_mlp=0,
    )  # fmt: skip
    model = InfoFlowTransformer(cfg)
    content, slot_a, slot_b, pos = (slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d), 3 * d)
    eye, root = torch.eye(d), math.sqrt(n)  # root undoes the attention's 1/sqrt(n)
    W_E, cls, W_pos = torch.zeros(d, E), torch.zeros(E), torch.zeros(T + 1, E)
    W_E[:, content] = eye  # x(t) → content slot
    cls[content] = torch.tensor(cls_content(d), dtype=torch.float32)
    W_pos[:, pos:] = torch.eye(T + 1)  # one-hot of the own position
    W_Q, W_K = torch.zeros(2, E, n), torch.zeros(2, E, n)
    W_V, W_O, b_Q = torch.zeros(2, E, n), torch.zeros(2, n, E), torch.zeros(2, n)
    # head 0: content score beta * x(t)^T M x(s); -BIG on the own position and on CLS
    W_Q[0, content, :d] = beta * root * eye
    W_K[0, content, :d] = torch.tensor(M.T, dtype=torch.float32)
    W_Q[0, pos:, d : d + T + 1] = root * torch.eye(T + 1)  # query: own one-hot
    W_K[0, pos:, d : d + T + 1] = -BIG * torch.eye(T + 1)  # key: -BIG at the same position
    b_Q[0, d + T + 1] = root  # constant query coordinate ...
    W_K[0, pos + T, d + T + 1] = -BIG  # ... meets -BIG at the CLS key
    if value_rank is None:
        W_V[0, content, :d], W_O[0, :d, slot_a] = eye, eye  # copy x(p(t)) into slot A
    else:
        W_V[0, content, 0] = torch.tensor(value_direction(d), dtype=torch.float32)
        W_O[0, 0, d] = 1.0  # a^T x(p(t)) into slot A's first coordinate
    # head 1: constant query meets +BIG at key `position`; copies x(position) into slot B
    if offset is None:
        b_Q[1, 0] = root
        W_K[1, pos + position, 0] = BIG
    else:  # query: the one-hot of (t + offset) mod T (CLS: of position); key: own one-hot
        for t in range(T + 1):
            W_Q[1, pos + t, (t + offset) % T if t < T else position] = root
        W_K[1, pos : pos + T, :T] = BIG * torch.eye(T)
    W_V[1, content, :d], W_O[1, :d, slot_b] = eye, eye
    attn = model.blocks[0].attn
    with torch.no_grad():
        for param, value in [
            (model.embed.W_E, W_E), (model.embed.cls, cls), (model.pos_embed.W_pos, W_pos),
            (attn.W_Q, W_Q), (attn.W_K, W_K), (attn.W_V, W_V), (attn.W_O, W_O),
            (attn.b_Q, b_Q),
        ]:  # fmt: skip
            param.copy_(value)
        for param in (model.embed.b_E, attn.b_K, attn.b_V, attn.b_O):
            param.zero_()
    return model.eval()


def _scores(x: np.ndarray, M: np.ndarray | None) -> np.ndarray:
    """Raw head-0 scores q(t)^T M x(s) [n, T+1, T], self excluded (-inf)."""
    x = np.asarray(x, dtype=np.float64)
    n, T, d = x.shape
    M = np.eye(d) if M is None else np.asarray(M, dtype=np.float64)
    queries = np.concatenate([x, np.broadcast_to(cls_content(d), (n, 1, d))], axis=1)
    scores = np.einsum("nqi,ij,nkj->nqk", queries, M, x)
    scores[:, np.arange(T), np.arange(T)] = -np.inf
    return scores


def true_partners(x: np.ndarray, *, M: np.ndarray | None = None) -> np.ndarray:
    """p(t) by brute force: int [n, T+1] (the key each token's head 0 retrieves)."""
    return np.argmax(_scores(x, M), axis=-1)


def near_ties(x: np.ndarray, delta: float = NEAR_TIE, *, M: np.ndarray | None = None):
    """bool [n, T+1]: queries whose two best raw scores differ by less than ``delta``."""
    top2 = np.sort(_scores(x, M), axis=-1)[..., -2:]
    return (top2[..., 1] - top2[..., 0]) < delta


def true_sets(
    x: np.ndarray, *, position: int = 0, M: np.ndarray | None = None, offset: int | None = None
) -> np.ndarray:
    """bool [2, n, T+1, T+1] (layer, sample, token, position).

    I(t, 0) = {t} (CLS: its own position T); I(t, 1) = I(t, 0) ∪ {p(t), position} (with
    ``offset``: (t + offset) mod T instead of position for data tokens).
    """
    n, T, _ = np.shape(x)
    sets = np.zeros((2, n, T + 1, T + 1), dtype=bool)
    tokens = np.arange(T + 1)
    sets[:, :, tokens, tokens] = True
    sets[1, np.arange(n)[:, None], tokens[None, :], true_partners(x, M=M)] = True
    if offset is None:
        sets[1, :, :, position] = True
    else:
        sets[1, :, np.arange(T), (np.arange(T) + offset) % T] = True
        sets[1, :, T, position] = True
    return sets
