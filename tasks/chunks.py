"""Evaluate a per-sample function in sample chunks so large batches fit in memory."""

from collections.abc import Callable

import numpy as np

# Elements (float64) one chunk's largest temporary may hold: 2^22 ~ 32 MiB.
CHUNK_ELEMENTS = 1 << 22


def map_sample_chunks(
    fn: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    elements_per_sample: int,
    budget: int = CHUNK_ELEMENTS,
) -> np.ndarray:
    """Apply ``fn`` to slices of ``x`` along axis 0 and concatenate the results.

    ``fn`` maps ``[c, ...] -> [c, ...]`` row-wise (sample i's output depends only on
    sample i), so the result does not depend on the chunk size. The chunk holds
    ``budget // elements_per_sample`` samples (at least one), where
    ``elements_per_sample`` is the size of ``fn``'s largest temporary per sample.
    """
    n = x.shape[0]
    step = max(1, budget // max(1, elements_per_sample))
    if n <= step:
        return fn(x)
    return np.concatenate([fn(x[i : i + step]) for i in range(0, n, step)], axis=0)
