"""Attention rollout (Abnar & Zuidema 2020): a second predictor of information sets.

For block b with attention patterns A_b [n, h, T+1, T+1] (sample, head, query, key):

1. fuse the heads: Ā_b = mean, max or min over h (``head_fusion``);
2. add the residual: A'_b = a·Ā_b + (1 − a)·I (``attention_weight`` a, 0.5 in the paper);
3. renormalise every row of A'_b to sum 1;
4. multiply: R_0 = I, R_l = A'_{l−1} · R_{l−1}, so R_l[t, s] is the share of position s
   in token t's state after layer l (layer convention of docs/conventions.md).

Sets: s ∈ I_rollout(t, l) iff R_l[t, s] ≥ ``threshold_ratio`` / (T+1), i.e. at least
that fraction of the uniform share (our choice; default 0.25). With one-hot (hard)
attention and 0 < a < 1 the rule reproduces the union semantics of max-position retrieval,
I(t, l+1) = I(t, l) ∪ ⋃_heads I(argmax, l), for any ratio ≤ min(a/h, 1 − a)^L·(T+1)
with mean fusion of h heads; identity attention gives {t}; uniform attention gives every
position at layers ≥ 1 (ratio < a).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from einops import reduce

from infoprobe.base.errors import UserError

HeadFusion = Literal["mean", "max", "min"]
HEAD_FUSIONS: tuple[str, ...] = ("mean", "max", "min")
ROW_SUM_TOLERANCE = 1e-3


class RolloutError(UserError):
    """Attention patterns or rollout parameters that cannot be rolled out."""


@dataclass(frozen=True)
class RolloutConfig:
    """Parameters of attention rollout (defaults: the paper's, threshold: ours).

    attention_weight: a in A' = a·A + (1 − a)·I, in [0, 1].
    head_fusion: how heads of one block are fused: "mean", "max" or "min".
    threshold_ratio: s is in the set when its rollout weight is ≥ ratio / (T+1).
    """

    attention_weight: float = 0.5
    head_fusion: HeadFusion = "mean"
    threshold_ratio: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 <= self.attention_weight <= 1.0:
            raise RolloutError(
                f"attention_weight: expected a value in [0, 1], got {self.attention_weight}"
            )
        if self.head_fusion not in HEAD_FUSIONS:
            raise RolloutError(
                f"head_fusion: expected one of {HEAD_FUSIONS}, got {self.head_fusion!r}"
            )
        if not self.threshold_ratio > 0.0:
            raise RolloutError(f"threshold_ratio: expected > 0, got {self.threshold_ratio}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rollout:
    """Rollout weights [L+1, n, T+1, T+1] float64, their sets (same shape, bool), config."""

    weights: np.ndarray
    sets: np.ndarray
    config: RolloutConfig


def _check_patterns(patterns: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(patterns) == 0:
        raise RolloutError("patterns: expected one array per block, got none")
    arrays = []
    for block, pattern in enumerate(patterns):
        array = np.asarray(pattern, dtype=np.float64)
        name = f"patterns[{block}] (blocks.{block}.attn.hook_pattern)"
        if array.ndim != 4 or array.shape[-1] != array.shape[-2]:
            raise RolloutError(f"{name}: expected [n, h, T+1, T+1], got shape {array.shape}")
        if arrays and (array.shape[0], array.shape[-1]) != (
            arrays[0].shape[0],
            arrays[0].shape[-1],
        ):
            raise RolloutError(
                f"{name}: shape {array.shape} disagrees with patterns[0] {arrays[0].shape} "
                "on samples or tokens"
            )
        if not np.isfinite(array).all() or (array < 0).any():
            raise RolloutError(f"{name}: expected finite non-negative attention weights")
        worst = float(np.abs(array.sum(axis=-1) - 1.0).max(initial=0.0))
        if worst > ROW_SUM_TOLERANCE:
            raise RolloutError(
                f"{name}: rows must sum to 1 (softmax probabilities), worst deviation {worst:.3g}; "
                "pass hook_pattern, not hook_attn_scores"
            )
        arrays.append(array)
    return arrays


def fuse_heads(pattern: np.ndarray, head_fusion: HeadFusion) -> np.ndarray:
    """Fuse the heads of one block: [n, h, T+1, T+1] → [n, T+1, T+1]."""
    return reduce(pattern, "n h q k -> n q k", head_fusion)


def attention_rollout(
    patterns: Sequence[np.ndarray],
    *,
    attention_weight: float = 0.5,
    head_fusion: HeadFusion = "mean",
) -> np.ndarray:
    """Rollout weights per layer.

    patterns: one array per block b = 0..L-1, each [n, h_b, T+1, T+1] (head counts may
    differ between blocks), rows summing to 1. Returns float64 [L+1, n, T+1, T+1]
    (layer, sample, token, position); layer 0 is the identity. Memory: (L+1)·n·(T+1)²·8
    bytes; vectorised over samples (one batched matmul per block).
    """
    config = RolloutConfig(attention_weight, head_fusion)
    arrays = _check_patterns(patterns)
    n, tokens = arrays[0].shape[0], arrays[0].shape[-1]
    eye = np.eye(tokens)
    out = np.empty((len(arrays) + 1, n, tokens, tokens))
    out[0] = eye
    for block, pattern in enumerate(arrays):
        mixed = config.attention_weight * fuse_heads(pattern, head_fusion)
        mixed += (1.0 - config.attention_weight) * eye
        row_sums = mixed.sum(axis=-1, keepdims=True)
        if (row_sums <= 0).any():
            raise RolloutError(
                f"patterns[{block}]: a fused row is all zeros after '{head_fusion}' fusion; "
                "use attention_weight < 1 or another head_fusion"
            )
        out[block + 1] = np.matmul(mixed / row_sums, out[block])
    return out


def rollout_sets(weights: np.ndarray, threshold_ratio: float = 0.25) -> np.ndarray:
    """Threshold rollout weights [L+1, n, T+1, T+1] into sets (same shape, bool).

    s ∈ I(t, l) iff weights[l, :, t, s] ≥ threshold_ratio / (T+1), T+1 = weights.shape[-1].
    A row of weights sums to 1, so a ratio above T+1 would leave every set empty: it is
    refused (:class:`RolloutError`), as is a ratio of 0 or below.
    """
    if not threshold_ratio > 0.0:
        raise RolloutError(f"threshold_ratio: expected > 0, got {threshold_ratio}")
    positions = weights.shape[-1]
    if threshold_ratio > positions:
        raise RolloutError(
            f"threshold_ratio: expected at most T+1 = {positions} (the weights of a row sum "
            f"to 1, so a larger ratio leaves every set empty), got {threshold_ratio}"
        )
    return weights >= threshold_ratio / positions


def predict_rollout(patterns: Sequence[np.ndarray], config: RolloutConfig | None = None) -> Rollout:
    """Rollout weights and sets from per-block patterns; see :func:`attention_rollout`."""
    config = RolloutConfig() if config is None else config
    weights = attention_rollout(
        patterns, attention_weight=config.attention_weight, head_fusion=config.head_fusion
    )
    return Rollout(weights, rollout_sets(weights, config.threshold_ratio), config)
