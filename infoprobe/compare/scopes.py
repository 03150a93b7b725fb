"""What a comparison measured: one scope's per-sample and aggregate agreement, and the
:class:`SetComparison` of one predictor against one instrument (made by
:func:`infoprobe.compare.core.compare`, put in words by :mod:`infoprobe.compare.verdicts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from infoprobe.base.jsonable import jsonable
from infoprobe.compare.agreement import SetAgreement, TauSweep
from infoprobe.compare.observations import Observations

CAVEAT = (
    "Observed is not used. A probe that recovers x(s) from token t's state shows that the "
    "information can be read there; a state that moves when x(s) moves shows that x(s) "
    "flows into it; neither shows that the network uses it for its output. Omissions "
    "(predicted but not observed) are expected where a network compresses what it keeps; "
    "violations (observed but not predicted) are what contradicts a theory."
)


@dataclass(frozen=True)
class SampleScope:
    """Per-sample agreement over one scope's cells.

    samples: counts [L+1, n, T+1]; per_token [L+1, T+1] and per_layer [L+1], pooled;
    mean_sample_jaccard [L+1]: mean over (sample, token) of each set pair's Jaccard;
    auroc_per_layer [L+1] / auroc_per_token [L+1, T+1]: the score against predicted
    membership, pooled over (sample, token, position) / (sample, position);
    sweep: agreement as τ moves. Parts an instrument lacks are None.
    ``<name>_interval`` [..., 2]: the bootstrap interval (lo, hi) over samples of
    auroc_per_layer, auroc_per_token and the per-layer recall / violation rate
    (:mod:`infoprobe.compare.intervals`); None without intervals.
    """

    samples: SetAgreement | None
    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    mean_sample_jaccard: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None
    auroc_per_layer_interval: np.ndarray | None = None
    auroc_per_token_interval: np.ndarray | None = None
    recall_interval: np.ndarray | None = None
    violation_rate_interval: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """Everything but the per-sample counts (large), JSON-able."""
        return jsonable(
            {f.name: getattr(self, f.name) for f in fields(self) if f.name != "samples"}
        )


@dataclass(frozen=True)
class AggregateScope:
    """Aggregate agreement over one scope's cells (see the module docstring).

    per_token [L+1, T+1] / per_layer [L+1]: counts over "always" and "never" cells;
    sometimes_observed / sometimes_unobserved [L+1]: "sometimes" cells observed or not;
    auroc_per_layer [L+1], auroc_per_token [L+1, T+1]: score against always (positive)
    vs never (negative); sweep: agreement as the score threshold τ moves.
    auroc_per_layer_interval [L+1, 2] / auroc_per_token_interval [L+1, T+1, 2]: bootstrap
    intervals, the aggregate recomputed from the drawn samples; recall_interval /
    violation_rate_interval [L+1, 2]: those of per_layer's recall and violation rate, the
    aggregate set recomputed too (score >= tau). None where only an aggregate exists (it
    cannot be recomputed: a probe's pooled R²) or without intervals.
    """

    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    sometimes_observed: np.ndarray | None
    sometimes_unobserved: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None
    auroc_per_layer_interval: np.ndarray | None = None
    auroc_per_token_interval: np.ndarray | None = None
    recall_interval: np.ndarray | None = None
    violation_rate_interval: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """All fields, JSON-able."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class SetComparison:
    """Everything :func:`compare` measured for one predictor against one instrument.

    per_sample / aggregate: scope name ("others", "own") → its agreement; None when the
    observations lack that part. membership: float [L+1, T+1, T] aggregate predicted
    membership; verdicts: one sentence per layer (others; own apart); interval: how the
    intervals were made (:class:`~infoprobe.compare.intervals.IntervalSettings` as a dict),
    None without intervals.
    """

    name: str
    instrument: str
    n_layers: int
    T: int
    n_samples: int
    observations: Observations = field(repr=False)
    membership: np.ndarray = field(repr=False)
    per_sample: dict[str, SampleScope] | None
    aggregate: dict[str, AggregateScope] | None
    verdicts: tuple[str, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    caveat: str = CAVEAT
    interval: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """All numbers as JSON-able data (per-sample counts left out)."""
        obs = self.observations
        return jsonable(
            {
                "predictor": self.name,
                "instrument": self.instrument,
                "shape": {"layers": self.n_layers + 1, "samples": self.n_samples, "T": self.T},
                "sample_score_name": obs.sample_score_name,
                "score_name": obs.score_name,
                "member_when": obs.member_when,
                "tau_sample": obs.tau_sample,
                "tau": obs.tau,
                "verdicts": list(self.verdicts),
                "interval": None if self.interval is None else dict(self.interval),
                "caveat": self.caveat,
                "membership": self.membership,
                "per_sample": self.per_sample,
                "aggregate": self.aggregate,
                "provenance": dict(self.provenance),
            }
        )

    def auroc(self, layer: int, scope: str = "others") -> float:
        """The per-sample AUROC at ``layer`` (else the aggregate one); NaN if neither."""
        for part in (self.per_sample, self.aggregate):
            if part is not None and part[scope].auroc_per_layer is not None:
                return float(part[scope].auroc_per_layer[layer])
        return float("nan")

    def auroc_interval(self, layer: int, scope: str = "others") -> tuple[float, float] | None:
        """The interval of :meth:`auroc` at ``layer`` (same source); None if there is none."""
        for part in (self.per_sample, self.aggregate):
            if part is not None and part[scope].auroc_per_layer is not None:
                found = part[scope].auroc_per_layer_interval
                if found is None or not np.isfinite(found[layer]).all():
                    return None
                return float(found[layer][0]), float(found[layer][1])
        return None
