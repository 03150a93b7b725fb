"""Vectorised score functions the tasks declare in their comparison structures.

Each takes ``q`` ``[n, Q, r_q, d]`` (or None) and ``k`` ``[n, K, r_k, d]`` (chains of
inputs, see :mod:`.structure`) and returns scores ``[n, Q, K]``, higher is better.
"""

import numpy as np


def bilinear_query_key(q: np.ndarray, k: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """x(query)^T M x(key): reads one input on each side."""
    return (q[:, :, 0] @ matrix) @ np.swapaxes(k[:, :, 0], 1, 2)


def bilinear_key_pair(q: np.ndarray | None, k: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """x(key)^T M x(key's partner), the same for every query: reads two inputs of the key."""
    return ((k[:, :, 0] @ matrix) * k[:, :, 1]).sum(axis=2)[:, None, :]


def key_projection(q: np.ndarray | None, k: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """a^T x(key), the same for every query: reads one input of the key."""
    return (k[:, :, 0] @ direction)[:, None, :]
