"""First-order retrieval tasks: d-retrieval and kth-largest."""

from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np

from .scores import key_projection
from .spec import Task, unit_vectors
from .structure import Comparison, ComparisonStructure, Stage


@dataclass(frozen=True, kw_only=True)
class DRetrieval(Task):
    """Generalised D-retrieval (predecessor paper): F(X) = sum_{i=1..D} max_t a_i^T x(t).

    x(t) ~ N(0, I_d) i.i.d.; a_1..a_D are fixed random unit vectors drawn from ``seed``.
    Scalar target.
    """

    name = "d-retrieval"
    T: int = 16
    D: int = 4
    d: int = 4
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T", minimum=1)
        self._require_int("D", minimum=1)
        self._require_int("d", minimum=1)

    @cached_property
    def directions(self) -> np.ndarray:
        """The vectors a_i: float64 ``[D, d]`` (unit norm)."""
        return unit_vectors(self._parameter_rng(), self.D, self.d)

    def token_scores(self, x: np.ndarray) -> np.ndarray:
        """a_i^T x(t): ``[n, T, d] -> [n, D, T]``."""
        return np.einsum("ntd,id->nit", x, self.directions)

    def _target(self, x: np.ndarray) -> np.ndarray:
        return self.token_scores(x).max(axis=2).sum(axis=1)

    def structure(self) -> ComparisonStructure:
        """D first-order comparisons, each one CLS retrieval of argmax_t a_i^T x(t)."""
        return ComparisonStructure(
            comparisons=tuple(
                token_ranking(f"max[a_{i + 1}]", a, rank=1, T=self.T)
                for i, a in enumerate(self.directions)
            ),
            combine="sum of the D retrieved scores",
        )


@dataclass(frozen=True, kw_only=True)
class KthLargest(Task):
    """k-th largest retrieval (Theorem 2): F(X) = x(t_k), t_k = position of the k-th
    largest score a^T x(t).

    x(t) ~ N(0, I_d) i.i.d.; a is a fixed random unit vector drawn from ``seed``. The
    target is the whole vector, so d_out = d. k = 1 is plain max retrieval. Ties (measure
    zero for continuous inputs) go to the lower position. Needs T >= k.
    """

    name = "kth-largest"
    T: int = 16
    k: int = 2
    d: int = 2
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("k", minimum=1)
        self._require_int("T", minimum=self.k, why=f"the k-th largest needs T >= k = {self.k}")
        self._require_int("d", minimum=1)

    @property
    def d_out(self) -> int:
        return self.d

    @cached_property
    def direction(self) -> np.ndarray:
        """The vector a: float64 ``[d]`` (unit norm)."""
        return unit_vectors(self._parameter_rng(), 1, self.d)[0]

    def token_scores(self, x: np.ndarray) -> np.ndarray:
        """a^T x(t): ``[n, T, d] -> [n, T]``."""
        return x @ self.direction

    def kth_position(self, x: np.ndarray) -> np.ndarray:
        """0-based position of the k-th largest score: ``[n, T, d] -> [n]`` int."""
        order = np.argsort(-self.token_scores(x), axis=1, kind="stable")
        return order[:, self.k - 1]

    def _target(self, x: np.ndarray) -> np.ndarray:
        return x[np.arange(x.shape[0]), self.kth_position(x)]

    def structure(self) -> ComparisonStructure:
        """One first-order comparison: CLS retrieves the token of rank k under a^T x(t)."""
        return ComparisonStructure(
            comparisons=(token_ranking(f"rank-{self.k}[a]", self.direction, self.k, self.T),),
            combine="the retrieved vector itself",
        )


def token_ranking(label: str, direction: np.ndarray, rank: int, T: int) -> Comparison:
    """A first-order comparison resolved by one CLS retrieval of the rank-th best token."""
    which = "argmax_t" if rank == 1 else f"the token of rank {rank} under"
    return Comparison(
        label=label,
        order=1,
        tuples=T,
        description=f"rank the tokens by a^T x(t), keep rank {rank}",
        stages=(
            Stage(
                group="cls",
                score=partial(key_projection, direction=direction),
                reads_key=1,
                rank=rank,
                description=f"CLS retrieves {which} a^T x(t)",
            ),
        ),
    )
