"""Observed information sets I_obs(t, l) from probe scores, with thresholds fixed up front.

Aggregate: s ∈ I_obs(t, l) iff R²(l, t, s) ≥ τ **and** R² − control(l, t, s) ≥ margin, where
control is the largest of the *gating* controls (``Thresholds.gate``, default: the shuffled
pairing only). The random-init control is reported beside every score (and in the stored
selectivity) but does not gate membership by default: a randomly initialised network with
residual connections keeps x(t) in h(t, l) at every layer, and information a random network
makes accessible is still accessible (InfoFlow sets are about access, not learning), so
gating on it would remove every token's own position from its set.

Per sample: s ∈ I_obs(i, t, l) iff the per-sample normalised error e_i(l, t, s) < τ_sample
(e = 1 is "no better than predicting the mean"; see :mod:`infoprobe.probes.metrics`). The
critic probe instead marks the Benjamini–Hochberg rejections of its per-sample p-values at
the false discovery rate ``q`` (:mod:`infoprobe.probes.critic`).

The defaults below are fixed before any comparison with theory; results files keep the
continuous scores, so the comparison can sweep τ. Sets have a position axis of length T+1
(the conventions); probe scores cover only the T data positions, so the CLS column
(position T) is never measured and is always False.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from infoprobe.base.fdr import FDR_Q, FDRLevelError, check_fdr_level

from .errors import ProbeError

DEFAULT_TAU = 0.5
"""Aggregate membership: minimum test R² (pooled over the d coordinates)."""
DEFAULT_MARGIN = 0.2
"""Aggregate membership: minimum selectivity (R² above the largest control)."""
DEFAULT_TAU_SAMPLE = 0.5
"""Per-sample membership: the largest corrected error r_i = e_i / b_i (the probe's error
on a sample over the error of predicting the mean on that same sample, :func:`corrected_errors`)
of a member: a per-sample R² above 0.5, the level the aggregate rule asks of the pooled R².

A raw error e_i would not do: under max retrieval the retrieved x(s) is an extreme input,
far from the mean, so e_i is large for exactly the positions a theory predicts even for a
probe that learned nothing, and a sample whose x(s) happens to lie near the mean gets a
small e_i from a probe that only predicts the mean. r_i is 1 for the mean predictor on
every sample, wherever x(s) lies, and 0 for a perfect probe."""
PER_SAMPLE_RULE = "error / own-sample baseline < tau_sample"
"""The per-sample rule, recorded in a results file's thresholds (``per_sample_rule``), so a
comparison applies the rule the file's sets were made with."""
BASELINE_FLOOR = 1e-12
"""Smallest per-sample baseline (a sample exactly at the mean would divide by zero)."""
DEFAULT_SHARE = 0.5
"""Aggregate membership for the critic: at least this share of the test samples are in its
per-sample sets (and the share is ``margin`` above the gating controls')."""
DEFAULT_GATE = ("shuffled",)
"""Controls whose score gates aggregate membership (``shuffled``, ``random_init``)."""
GATE_CONTROLS = ("shuffled", "random_init")


class ThresholdError(ProbeError):
    """A membership threshold is not finite or outside its meaningful range."""


@dataclass(frozen=True)
class Thresholds:
    """Membership thresholds, fixed before comparing with theory.

    Ranges (checked on construction, :class:`ThresholdError` otherwise), all finite:
    ``0 < tau <= 1`` (a test R²; τ <= 0 would admit probes no better than the mean),
    ``0 <= margin <= 1`` (R² above the control; a negative margin would admit scores
    below the control), ``0 < tau_sample <= 1`` (a corrected error, :data:`DEFAULT_TAU_SAMPLE`;
    0 admits nothing, above 1 admits errors worse than the mean predictor's), ``gate`` a subset of
    :data:`GATE_CONTROLS`.
    """

    tau: float = DEFAULT_TAU
    margin: float = DEFAULT_MARGIN
    tau_sample: float = DEFAULT_TAU_SAMPLE
    gate: tuple[str, ...] = field(default=DEFAULT_GATE)
    q: float = FDR_Q

    def __post_init__(self) -> None:
        try:
            check_fdr_level(self.q, "Thresholds.q")
        except FDRLevelError as err:
            raise ThresholdError(str(err)) from None
        for name, low, low_open in (("tau", 0.0, True), ("margin", 0.0, False),
                                    ("tau_sample", 0.0, True)):  # fmt: skip
            value = getattr(self, name)
            ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
            ok = ok and math.isfinite(value) and (value > low if low_open else value >= low)
            if not ok or value > 1:
                bound = "0 <" if low_open else "0 <="
                raise ThresholdError(
                    f"Thresholds.{name}: expected a finite number with {bound} {name} <= 1, "
                    f"got {value!r}"
                )
        gate = (self.gate,) if isinstance(self.gate, str) else tuple(self.gate)
        unknown = [c for c in gate if c not in GATE_CONTROLS]
        if unknown:
            raise ThresholdError(
                f"Thresholds.gate: expected controls from {GATE_CONTROLS}, got {list(gate)}"
            )
        object.__setattr__(self, "gate", gate)

    def to_dict(self) -> dict[str, object]:
        """Plain dict for provenance (with the per-sample rule the sets were made by)."""
        out = asdict(self)
        out["gate"] = list(self.gate)
        out["per_sample_rule"] = PER_SAMPLE_RULE
        return out


def pad_cls(member: np.ndarray) -> np.ndarray:
    """Append the never-measured CLS column: ``[..., T] -> [..., T+1]``."""
    pad = np.zeros((*member.shape[:-1], 1), dtype=bool)
    return np.concatenate([member.astype(bool), pad], axis=-1)


def aggregate_observed(
    r2: np.ndarray, control: np.ndarray, tau: float = DEFAULT_TAU, margin: float = DEFAULT_MARGIN
) -> np.ndarray:
    """Aggregate observed sets.

    Args:
        r2: test R² ``[L+1, T+1, T]`` (layer, token, position).
        control: the control level (max over controls), same shape.
        tau, margin: thresholds.

    Returns:
        bool ``[L+1, T+1, T+1]`` (layer, token, position); NaN scores are not members.
    """
    score = np.asarray(r2, dtype=np.float64)
    sel = score - np.asarray(control, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        member = (score >= tau) & (sel >= margin)
    return pad_cls(member)


def sample_baseline(x: np.ndarray) -> np.ndarray:
    """The mean predictor's normalised error on each sample: ``[n, T, d] -> [n, T]``.

    b_i(s) = ‖x_i(s) − x̄(s)‖² / mean_j ‖x_j(s) − x̄(s)‖², x̄ the mean over these n samples
    (the probes' SST / n of the test split).
    """
    x = np.asarray(x, dtype=np.float64)
    dev = ((x - x.mean(axis=0)) ** 2).sum(axis=-1)
    scale = dev.mean(axis=0)
    return dev / np.where(scale > 0, scale, 1.0)


def corrected_errors(errors: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-sample errors over their own baseline (:data:`DEFAULT_TAU_SAMPLE`):
    ``[L+1, n, T+1, T]`` float64.

    errors: normalised errors ``[L+1, n, T+1, T]`` of the n test samples; x: their inputs
    ``[n, T, d]``.
    """
    baseline = np.maximum(sample_baseline(x), BASELINE_FLOOR)  # [n, T]
    return np.asarray(errors, dtype=np.float64) / baseline[None, :, None, :]


def per_sample_observed(
    errors: np.ndarray, x: np.ndarray, tau_sample: float = DEFAULT_TAU_SAMPLE
) -> np.ndarray:
    """Per-sample observed sets by the one per-sample rule: s is a member for sample i when
    its corrected error (:func:`corrected_errors`) is below ``tau_sample``.

    Args:
        errors: per-sample normalised errors ``[L+1, n, T+1, T]`` of the test samples.
        x: their inputs ``[n, T, d]``.
        tau_sample: the largest corrected error of a member.

    Returns:
        bool ``[L+1, n, T+1, T+1]``; NaN errors are not members.
    """
    with np.errstate(invalid="ignore"):
        member = corrected_errors(errors, x) < tau_sample
    return pad_cls(member)
