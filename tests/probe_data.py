"""Synthetic probe data with known answers (plain module: ``from probe_data import ...``)."""

from __future__ import annotations

import numpy as np


def retrieval_data(n: int, cells: int, S: int, k: int, seed: int = 0):
    """States ``X [n, cells, 6]`` and targets ``x [n, S, k]`` (float32): cell c carries x(s)
    for s ≡ c (mod cells) through a tanh map, plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, S, k))
    X = np.stack(
        [np.tanh(x[:, c::cells].reshape(n, -1) @ rng.normal(size=(k * len(range(c, S, cells)), 6)))
         for c in range(cells)], axis=1,
    ) + 0.3 * rng.normal(size=(n, cells, 6))  # fmt: skip
    return X.astype(np.float32), x.astype(np.float32)
