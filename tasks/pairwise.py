"""Pairwise-comparison tasks: intrinsic-dim and pairwise-min."""

import dataclasses
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np

from .chunks import map_sample_chunks
from .scores import bilinear_key_pair, bilinear_query_key
from .spec import Task
from .structure import Comparison, ComparisonStructure, Stage


@dataclass(frozen=True, kw_only=True)
class IntrinsicDim(Task):
    """Intrinsic dimension: F(X) = sum_{i=1..D} max_{s,t} x(s)^T A_i x(t).

    x(t) ~ N(0, I_d) i.i.d.; A_1..A_D are fixed random d x d matrices with entries
    N(0, 1/d), drawn from ``seed``. The max runs over all ordered pairs (s, t), s = t
    included (our reading of the paper's max_{s,t}; default); ``distinct=True`` keeps
    s != t only, so every maximum needs a partner token. Scalar target.
    """

    name = "intrinsic-dim"
    T: int = 64
    D: int = 2
    d: int = 4
    distinct: bool = False
    seed: int = 0

    def _validate(self) -> None:
        self._require_bool("distinct")
        need, why = (2, "a pair needs two distinct tokens") if self.distinct else (1, "")
        self._require_int("T", minimum=need, why=why)
        self._require_int("D", minimum=1)
        self._require_int("d", minimum=1)

    @cached_property
    def matrices(self) -> np.ndarray:
        """The matrices A_i: float64 ``[D, d, d]``."""
        return self._parameter_rng().standard_normal((self.D, self.d, self.d)) / np.sqrt(self.d)

    def pair_scores(self, x: np.ndarray) -> np.ndarray:
        """x(s)^T A_i x(t) for every i, s, t: ``[n, T, d] -> [n, D, T(s), T(t)]``;
        with ``distinct`` the pairs s = t score -inf."""
        xa = np.einsum("nsa,iab->nisb", x, self.matrices)
        scores = xa @ np.swapaxes(x, 1, 2)[:, None]
        if self.distinct:
            diagonal = np.arange(self.T)
            scores[..., diagonal, diagonal] = -np.inf
        return scores

    def _target(self, x: np.ndarray) -> np.ndarray:
        def best_pairs(chunk: np.ndarray) -> np.ndarray:
            return self.pair_scores(chunk).max(axis=(2, 3)).sum(axis=1)

        return map_sample_chunks(best_pairs, x, self.D * self.T * self.T)

    def structure(self) -> ComparisonStructure:
        """D pairwise comparisons; each: every token t retrieves its partner
        argmax_s x(t)^T A_i x(s), then CLS retrieves the token with the best pair value."""
        return ComparisonStructure(
            comparisons=tuple(
                pairwise_chain(
                    label=f"pair-max[A_{i + 1}]",
                    matrix=a,
                    tuples=self.T * (self.T - 1) if self.distinct else self.T * self.T,
                    exclude_self=self.distinct,
                    words=f"x(t)^T A_{i + 1} x(s)",
                )
                for i, a in enumerate(self.matrices)
            ),
            combine="sum of the D best pair values",
        )


@dataclass(frozen=True, kw_only=True)
class PairwiseMin(Task):
    """Pairwise minimum (depth separation): F(X) = min_{s != t} <x(s), x(t)>.

    x(t) ~ N(0, I_d) i.i.d. Scalar target. Needs T >= 2.
    """

    name = "pairwise-min"
    T: int = 16
    d: int = 2
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T", minimum=2, why="a pair needs two distinct tokens")
        self._require_int("d", minimum=1)

    def _target(self, x: np.ndarray) -> np.ndarray:
        def min_pair(chunk: np.ndarray) -> np.ndarray:
            gram = chunk @ np.swapaxes(chunk, 1, 2)
            gram[:, np.arange(self.T), np.arange(self.T)] = np.inf
            return gram.min(axis=(1, 2))

        return map_sample_chunks(min_pair, x, self.T * self.T)

    def structure(self) -> ComparisonStructure:
        """One pairwise comparison: each token t retrieves argmin_{s != t} <x(t), x(s)>,
        then CLS retrieves the token with the smallest pair value."""
        return ComparisonStructure(
            comparisons=(
                pairwise_chain(
                    label="pair-min",
                    matrix=-np.eye(self.d),
                    tuples=self.T * (self.T - 1) // 2,
                    exclude_self=True,
                    words="-<x(t), x(s)>",
                ),
            ),
            combine="the smallest pair value",
        )


def pairwise_chain(
    label: str, matrix: np.ndarray, tuples: int, exclude_self: bool, words: str
) -> Comparison:
    """The two-stage max-retrieval chain resolving max_{t,s} x(t)^T M x(s).

    Stage 1 (data tokens): t retrieves p(t) = argmax_s x(t)^T M x(s).
    Stage 2 (CLS): retrieves argmax_t x(t)^T M x(p(t)), reading the key's chain [t, p(t)].
    Its mirror (unless M is symmetric) is the chain for M^T, in words with s and t
    swapped: t retrieves argmax_s x(s)^T M x(t); the same maximum.
    """
    mirror = None
    if not np.array_equal(matrix, matrix.T):
        swapped = words.replace("x(t)", "x(@)").replace("x(s)", "x(t)").replace("x(@)", "x(s)")
        mirror = _chain(label, matrix.T, tuples, exclude_self, swapped)
    return dataclasses.replace(_chain(label, matrix, tuples, exclude_self, words), mirror=mirror)


def _chain(
    label: str, matrix: np.ndarray, tuples: int, exclude_self: bool, words: str
) -> Comparison:
    return Comparison(
        label=label,
        order=2,
        tuples=tuples,
        description=f"max over pairs (t, s) of {words}",
        stages=(
            Stage(
                group="data",
                score=partial(bilinear_query_key, matrix=matrix),
                reads_query=1,
                reads_key=1,
                exclude_self=exclude_self,
                description=f"each token t retrieves its partner p(t) = argmax_s {words}",
            ),
            Stage(
                group="cls",
                score=partial(bilinear_key_pair, matrix=matrix),
                reads_key=2,
                description=f"CLS retrieves the token t with the best pair value {words}".replace(
                    "x(s)", "x(p(t))"
                ),
            ),
        ),
    )
