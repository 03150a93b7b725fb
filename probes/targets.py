"""Probe targets: x(s) at fixed positions, and per-sample *role* targets.

A role target of token t is x at a position that changes from sample to sample: the key
that a head attends to k-th most from t (read from a cached attention pattern), or a
partner given by a rule (for example the InfoFlow engine's predicted partner). Role
partners are always data positions 0..T-1; the CLS key (position T) carries no input
vector and is excluded from the ranking *(our choice)*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infoprobe.probes.errors import ProbeInputError

Array = np.ndarray | torch.Tensor


@dataclass(frozen=True)
class AttentionRole:
    """The key that head ``head`` of block ``block`` attends to ``rank``-th most.

    ``rank`` 1 is the most attended data key (argmax), 2 the second, and so on.
    """

    block: int
    head: int
    rank: int = 1

    @property
    def name(self) -> str:
        """Stable label, e.g. ``"b0.h1.rank1"``."""
        return f"b{self.block}.h{self.head}.rank{self.rank}"


def position_targets(x: Array) -> np.ndarray:
    """Fixed-position targets: x(s) for every data position, ``[n, T, d]`` (a copy of x)."""
    arr = np.asarray(x)
    if arr.ndim != 3:
        raise ProbeInputError(f"x: expected [n, T, d], got shape {arr.shape}")
    return arr.copy()


def attention_rank_partners(pattern: Array, rank: int = 1) -> np.ndarray:
    """Index of the ``rank``-th most attended data key of every (sample, head, query).

    Args:
        pattern: attention pattern ``[n, h, T+1, T+1]`` (sample, head, query, key).
        rank: 1 = argmax; ties are broken towards the lower key index.

    Returns:
        int64 ``[n, h, T+1]`` with values in 0..T-1.
    """
    pat = torch.as_tensor(np.asarray(pattern)).float()
    if pat.ndim != 4 or pat.shape[-1] != pat.shape[-2]:
        raise ProbeInputError(f"pattern: expected [n, h, T+1, T+1], got {tuple(pat.shape)}")
    n_keys = pat.shape[-1] - 1
    if not 1 <= rank <= n_keys:
        raise ProbeInputError(f"rank: expected 1..{n_keys} (data keys), got {rank}")
    data_keys = pat[..., :n_keys]
    order = torch.sort(data_keys, dim=-1, descending=True, stable=True).indices
    return order[..., rank - 1].numpy().astype(np.int64)


def role_partners(patterns: dict[int, Array], roles: list[AttentionRole]) -> np.ndarray:
    """Partner indices of several attention roles, ``[n, R, T+1]``.

    Args:
        patterns: block index → that block's pattern ``[n, h, T+1, T+1]``.
        roles: the roles, in output order.
    """
    out = []
    for role in roles:
        if role.block not in patterns:
            raise ProbeInputError(
                f"role {role.name}: no attention pattern for block {role.block} "
                f"(have blocks {sorted(patterns)})"
            )
        pat = np.asarray(patterns[role.block])
        if not 0 <= role.head < pat.shape[1]:
            raise ProbeInputError(
                f"role {role.name}: head expected in 0..{pat.shape[1] - 1}, got {role.head}"
            )
        out.append(attention_rank_partners(pat[:, role.head : role.head + 1], role.rank)[:, 0])
    return np.stack(out, axis=1)


def gather_partner_inputs(x: Array, partners: Array) -> np.ndarray:
    """x at per-sample partner positions.

    Args:
        x: inputs ``[n, T, d]``.
        partners: indices in 0..T-1, ``[n, ...]`` (e.g. ``[n, R, T+1]``).

    Returns:
        ``[n, ..., d]``: ``out[i, ..., :] = x[i, partners[i, ...], :]``.
    """
    arr = np.asarray(x)
    idx = np.asarray(partners)
    if idx.shape[0] != arr.shape[0]:
        raise ProbeInputError(
            f"partners: expected {arr.shape[0]} samples on axis 0, got {idx.shape[0]}"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= arr.shape[1]):
        raise ProbeInputError(
            f"partners: expected indices in 0..{arr.shape[1] - 1}, "
            f"got range {idx.min()}..{idx.max()}"
        )
    flat = idx.reshape(idx.shape[0], -1)
    picked = np.take_along_axis(arr, flat[:, :, None], axis=1)
    return picked.reshape(*idx.shape, arr.shape[-1])
