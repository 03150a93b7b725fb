"""Two instruments crossed on the same samples: :class:`Crosstab`, :func:`crosstab`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from infoprobe.base.errors import CompareInputError
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.provenance import ProvenanceError


@dataclass(frozen=True)
class Crosstab:
    """Per layer, the cells (sample, token, position s ≠ t) counted by what two
    instruments observed: ``both``, ``first_only``, ``second_only``, ``neither`` [L+1].

    For flow (first) against decodability (second): first_only is information that flows
    but cannot be decoded (the network keeps a function of x(s): compressed); second_only
    is decodable without flow, which should be near zero and checks both instruments.
    """

    first: str
    second: str
    both: np.ndarray
    first_only: np.ndarray
    second_only: np.ndarray
    neither: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.both + self.first_only + self.second_only + self.neither

    def share(self, part: str) -> np.ndarray:
        """``part``'s count over all cells, per layer (NaN for an empty layer)."""
        total = self.total.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, getattr(self, part) / total, np.nan)

    def to_dict(self) -> dict[str, Any]:
        parts = ("both", "first_only", "second_only", "neither")
        return jsonable(
            {
                "first": self.first,
                "second": self.second,
                **{p: getattr(self, p) for p in parts},
                "share": {p: self.share(p) for p in parts},
            }
        )


def crosstab(first: Observations, second: Observations) -> Crosstab:
    """Cross the per-sample sets of two instruments on the same samples (own left out)."""
    for obs in (first, second):
        if obs.per_sample is None:
            raise CompareInputError(f"crosstab: {obs.instrument} has no per-sample sets")
    if first.per_sample.shape != second.per_sample.shape:
        raise ProvenanceError(
            f"crosstab: {first.instrument} sets {first.per_sample.shape} and "
            f"{second.instrument} sets {second.per_sample.shape} are not on the same samples"
        )
    a, b = first.per_sample, second.per_sample
    others = np.broadcast_to(scope_masks(a.shape[-1])["others"], a.shape)

    def count(cells: np.ndarray) -> np.ndarray:
        return (cells & others).sum(axis=(1, 2, 3))

    return Crosstab(
        first.instrument,
        second.instrument,
        both=count(a & b),
        first_only=count(a & ~b),
        second_only=count(~a & b),
        neither=count(~a & ~b),
    )
