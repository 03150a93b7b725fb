"""Tasks whose target depends on token order: fixed-positions and aggregate-decode."""

import numbers
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .spec import Task
from .structure import Comparison, ComparisonStructure


@dataclass(frozen=True, kw_only=True)
class FixedPositions(Task):
    """Position-specific aggregation: F(X) = sum_{p in positions} x(p) (vector, d_out = d).

    x(t) ~ N(0, I_d) i.i.d. ``positions`` are 0-based code positions, default (0, 1, 2)
    = the paper's x(1) + x(2) + x(3); they must be distinct and < T. The target
    depends on order, so a model needs positional encoding (``needs_positions``).
    """

    name = "fixed-positions"
    needs_positions = True
    T: int = 10
    d: int = 2
    positions: tuple[int, ...] = (0, 1, 2)
    seed: int = 0

    def _validate(self) -> None:
        raw = self.positions
        if isinstance(raw, str | bytes) or not hasattr(raw, "__iter__"):
            raise self._fail("positions", "a non-empty list of distinct integers", raw)
        values = tuple(raw)
        if not values or any(
            isinstance(p, bool) or not isinstance(p, numbers.Integral) or p < 0 for p in values
        ):
            raise self._fail("positions", "a non-empty list of distinct integers >= 0", raw)
        if len(set(values)) != len(values):
            raise self._fail("positions", "distinct positions", raw)
        object.__setattr__(self, "positions", tuple(int(p) for p in values))
        self._require_int(
            "T", minimum=max(values) + 1, why=f"positions {list(values)} are 0-based and < T"
        )
        self._require_int("d", minimum=1)

    @property
    def d_out(self) -> int:
        return self.d

    def _target(self, x: np.ndarray) -> np.ndarray:
        return x[:, list(self.positions)].sum(axis=1)

    def structure(self) -> ComparisonStructure:
        """One positional comparison coupling the fixed positions P at CLS."""
        return positional_structure(self.positions, "the sum of the coupled inputs")


@dataclass(frozen=True, kw_only=True)
class AggregateDecode(Task):
    """Aggregate-then-decode (Theorem 3): a generic function of the first T0 tokens jointly.

    F(X) = sum_{j=1..m} c_j tanh(w_j^T z + b_j),  z = concat(x(0), ..., x(T0-1)) in R^{T0 d},
    x(t) ~ N(0, I_d) i.i.d.; w_j ~ N(0, I/(T0 d)), b_j ~ N(0, 1/4), c_j ~ N(0, 1/m), all
    fixed from ``seed``. Each ridge direction w_j mixes every coordinate of every coupled
    token, so F is not a sum of per-token terms g(x(t)) nor a function of a few per-token
    features: decoding it needs the whole T0*d-dimensional coupled input in one state
    (the coupled set of the cost law, alpha = T0 d / E - 1). Tokens T0..T-1 are
    distractors; the coupled tokens are identified by position (``needs_positions``).
    Scalar target. Needs T >= T0.
    """

    name = "aggregate-decode"
    needs_positions = True
    T: int = 8
    T0: int = 4
    d: int = 2
    m: int = 16
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T0", minimum=1)
        self._require_int("T", minimum=self.T0, why=f"the coupled tokens need T >= T0 = {self.T0}")
        self._require_int("d", minimum=1)
        self._require_int("m", minimum=1)

    @cached_property
    def readout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(w ``[m, T0*d]``, b ``[m]``, c ``[m]``), float64."""
        rng = self._parameter_rng()
        k = self.T0 * self.d
        w = rng.standard_normal((self.m, k)) / np.sqrt(k)
        b = rng.standard_normal(self.m) * 0.5
        c = rng.standard_normal(self.m) / np.sqrt(self.m)
        return w, b, c

    def _target(self, x: np.ndarray) -> np.ndarray:
        w, b, c = self.readout
        z = x[:, : self.T0].reshape(x.shape[0], self.T0 * self.d)
        return np.tanh(z @ w.T + b) @ c

    def structure(self) -> ComparisonStructure:
        """One positional comparison coupling positions 0..T0-1 at CLS."""
        return positional_structure(tuple(range(self.T0)), "a generic function of all of them")


def positional_structure(positions: tuple[int, ...], combine: str) -> ComparisonStructure:
    """A target that needs the inputs at fixed positions jointly, selected by position."""
    listed = ", ".join(f"x({p})" for p in positions)
    return ComparisonStructure(
        comparisons=(
            Comparison(
                label=f"positions{list(positions)}",
                order=len(positions),
                positions=positions,
                description=f"couple {listed} (selected by position)",
            ),
        ),
        combine=combine,
    )
