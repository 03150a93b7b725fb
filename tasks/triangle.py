"""The triangle-centre task: an order-3 comparison."""

from dataclasses import dataclass

import numpy as np

from .chunks import map_sample_chunks
from .spec import Task
from .structure import Comparison, ComparisonStructure

NORM_MIN = 0.2
NORM_MAX = 4.0


@dataclass(frozen=True, kw_only=True)
class Triangle(Task):
    """Triangle centre: F(X) = min_{t1,t2,t3} ||x(t1) + x(t2) + x(t3)||.

    x(t) ~ N(0, 2 I_d) rescaled so its norm is clamped to [0.2, 4] (direction kept).
    ``distinct`` (default True): t1, t2, t3 pairwise different; False lets indices
    repeat. ``squared`` (default False): the squared norm instead of the norm.
    The min runs over C(T, 3) unordered triples (~41.7k at T = 64; C(T + 2, 3) with
    repeats), computed from the Gram matrix in O(T^2) memory per sample.
    Scalar target.
    """

    name = "triangle"
    T: int = 16
    d: int = 2
    distinct: bool = True
    squared: bool = False
    seed: int = 0

    def _validate(self) -> None:
        self._require_bool("distinct")
        self._require_bool("squared")
        need = 3 if self.distinct else 1
        why = "three distinct tokens form a triple" if self.distinct else "one token"
        self._require_int("T", minimum=need, why=why)
        self._require_int("d", minimum=1)

    def _draw_inputs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        g = rng.standard_normal((n, self.T, self.d)) * np.sqrt(2.0)
        norm = np.linalg.norm(g, axis=2, keepdims=True)
        safe = np.where(norm > 0, norm, 1.0)
        scale = np.where(norm > 0, np.clip(norm, NORM_MIN, NORM_MAX) / safe, 1.0)
        if np.any(norm == 0):  # measure zero; give such a token the minimum norm
            g = np.where(norm > 0, g, np.eye(self.d)[0] * NORM_MIN)
        return (g * scale).astype(np.float32)

    def _target(self, x: np.ndarray) -> np.ndarray:
        best = np.maximum(map_sample_chunks(self._min_triple_sq, x, 4 * self.T * self.T), 0.0)
        return best if self.squared else np.sqrt(best)

    def structure(self) -> ComparisonStructure:
        """One order-3 comparison over all triples. It has no max-retrieval chain: the best
        partner of a token depends on the third token, so no pairwise score picks it."""
        n = self.T
        tuples = n * (n - 1) * (n - 2) // 6 if self.distinct else (n + 2) * (n + 1) * n // 6
        return ComparisonStructure(
            comparisons=(
                Comparison(
                    label="triple-min",
                    order=3,
                    tuples=tuples,
                    description="min over triples of ||x(t1) + x(t2) + x(t3)||",
                ),
            ),
            combine="the smallest triple norm",
        )

    def _min_triple_sq(self, x: np.ndarray) -> np.ndarray:
        """min over triples of ||x(t1)+x(t2)+x(t3)||^2: ``[n, T, d] -> [n]``.

        With the Gram matrix G, ||x_i + x_j + x_k||^2 = S_ij + G_kk + 2 G_ik + 2 G_jk where
        S_ij = ||x_i + x_j||^2. Loop over the largest index k (T steps, each vectorised over
        samples and the pairs i < j < k), so memory is O(n T^2) instead of O(n T^3).
        """
        T = self.T
        gram = x @ np.swapaxes(x, 1, 2)
        sq = np.einsum("ntt->nt", gram)
        allowed = np.triu(np.ones((T, T), dtype=bool), k=1 if self.distinct else 0)
        pair_sq = sq[:, :, None] + sq[:, None, :] + 2.0 * gram + np.where(allowed, 0.0, np.inf)
        best = np.full(x.shape[0], np.inf)
        for k in range(2 if self.distinct else 0, T):
            m = k if self.distinct else k + 1  # i < j < k, or i <= j <= k
            cross = 2.0 * gram[:, :m, k]
            block = pair_sq[:, :m, :m] + cross[:, :, None] + cross[:, None, :]
            best = np.minimum(best, block.min(axis=(1, 2)) + sq[:, k])
        return best
