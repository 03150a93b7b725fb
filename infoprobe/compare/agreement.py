"""Counts of predicted (P) against observed (O) set membership, and how they move with τ.

For one (layer l, sample, token t), with P = I_pred(t, l) and O = I_obs(t, l) over the
data positions: ``agree`` = |P ∩ O|, ``violations`` = |O \\ P| (observed where the
predictor says the information cannot be), ``omissions`` = |P \\ O| (accessible in theory,
not observed), ``absent`` = |¬P ∩ ¬O|. Rates are computed from the counts, so pooling
("micro" averaging: sum the counts, divide once) is exact. A ratio with an empty
denominator is NaN. Violations and omissions are never folded into one number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from infoprobe.base.errors import CompareInputError
from infoprobe.base.jsonable import jsonable

MemberWhen = Literal["below", "above"]
"""How a continuous score makes a set: members are the values below τ (errors) or at least τ
(scores)."""


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


@dataclass(frozen=True)
class SetAgreement:
    """Counts of predicted (P) vs observed (O) membership; all four fields share one shape.

    Rates are computed from the counts, so pooling (:meth:`pooled`) is exact.
    """

    agree: np.ndarray  # |P ∩ O|
    violations: np.ndarray  # |O \ P|
    omissions: np.ndarray  # |P \ O|
    absent: np.ndarray  # |¬P ∩ ¬O|

    @classmethod
    def from_sets(
        cls, predicted: np.ndarray, observed: np.ndarray, valid: np.ndarray | None = None
    ) -> SetAgreement:
        """Count over the last axis. predicted, observed, valid: bool [..., m] → int [...]."""
        keep = np.ones(predicted.shape, bool) if valid is None else valid
        p, o = predicted & keep, observed & keep
        return cls(
            agree=(p & o).sum(axis=-1),
            violations=(o & ~predicted & keep).sum(axis=-1),
            omissions=(p & ~observed).sum(axis=-1),
            absent=(keep & ~predicted & ~observed).sum(axis=-1),
        )

    def pooled(self, axis: int | tuple[int, ...]) -> SetAgreement:
        """Sum the counts over ``axis`` (micro-averaging)."""
        return SetAgreement(*(np.sum(c, axis=axis) for c in self._counts()))

    def _counts(self) -> tuple[np.ndarray, ...]:
        return (self.agree, self.violations, self.omissions, self.absent)

    @property
    def n_predicted(self) -> np.ndarray:
        return self.agree + self.omissions

    @property
    def n_observed(self) -> np.ndarray:
        return self.agree + self.violations

    @property
    def n_not_predicted(self) -> np.ndarray:
        return self.violations + self.absent

    @property
    def precision(self) -> np.ndarray:
        """Share of observed positions that are predicted: agree / |O|."""
        return _ratio(self.agree, self.n_observed)

    @property
    def recall(self) -> np.ndarray:
        """Share of predicted positions that are observed: agree / |P|."""
        return _ratio(self.agree, self.n_predicted)

    @property
    def jaccard(self) -> np.ndarray:
        """agree / |P ∪ O|."""
        return _ratio(self.agree, self.agree + self.violations + self.omissions)

    @property
    def violation_rate(self) -> np.ndarray:
        """Share of non-predicted positions that are observed: violations / |¬P|."""
        return _ratio(self.violations, self.n_not_predicted)

    @property
    def omission_rate(self) -> np.ndarray:
        """Share of predicted positions that are not observed: omissions / |P|."""
        return _ratio(self.omissions, self.n_predicted)

    def to_dict(self) -> dict[str, Any]:
        """Counts and rates as (nested) lists, NaN as None."""
        names = ("precision", "recall", "jaccard", "violation_rate", "omission_rate")
        out = {
            "agree": self.agree,
            "violations": self.violations,
            "omissions": self.omissions,
            "absent": self.absent,
        }
        out.update({name: getattr(self, name) for name in names})
        return jsonable(out)


@dataclass(frozen=True)
class TauSweep:
    """Agreement as the membership threshold τ moves.

    taus: float [k]; member_when: "below" (errors: a member iff value < τ) or "above"
    (scores: a member iff value ≥ τ); agreement: counts [k, L+1] pooled per layer.
    """

    taus: np.ndarray
    member_when: MemberWhen
    agreement: SetAgreement
    fixed_tau: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "taus": self.taus,
                "member_when": self.member_when,
                "fixed_tau": self.fixed_tau,
                "per_layer": self.agreement.to_dict(),
            }
        )


def tau_sweep(
    predicted: np.ndarray,
    values: np.ndarray,
    taus: Sequence[float] | np.ndarray,
    *,
    member_when: MemberWhen,
    valid: np.ndarray | None = None,
    fixed_tau: float | None = None,
) -> TauSweep:
    """Pooled per-layer agreement for every τ.

    predicted, valid: bool [L+1, ...]; values: float [L+1, ...] of the same shape.
    One sort per layer and class, then every τ is a ``searchsorted``: exact and fast.
    """
    taus = np.asarray(sorted({float(t) for t in taus}), dtype=np.float64)
    keep = np.ones(predicted.shape, bool) if valid is None else valid
    shape = (taus.size, predicted.shape[0])
    agree, violations, omissions, absent = (np.zeros(shape, np.int64) for _ in range(4))
    for layer in range(predicted.shape[0]):
        v, p, k = values[layer], predicted[layer], keep[layer]
        pos, neg = np.sort(v[p & k]), np.sort(v[~p & k])
        pos_hits = _n_members(pos, taus, member_when)
        neg_hits = _n_members(neg, taus, member_when)
        agree[:, layer], omissions[:, layer] = pos_hits, pos.size - pos_hits
        violations[:, layer], absent[:, layer] = neg_hits, neg.size - neg_hits
    agreement = SetAgreement(agree, violations, omissions, absent)
    return TauSweep(taus, member_when, agreement, fixed_tau)


def _n_members(sorted_values: np.ndarray, taus: np.ndarray, member_when: MemberWhen) -> np.ndarray:
    """How many of ``sorted_values`` are members at each τ (< τ, or ≥ τ)."""
    n_below = np.searchsorted(sorted_values, taus, side="left")
    if member_when == "below":
        return n_below
    if member_when == "above":
        return sorted_values.size - n_below
    raise CompareInputError(f"member_when: expected 'below' or 'above', got {member_when!r}")
