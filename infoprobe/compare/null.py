"""Membership against a null: the null rule beside the fixed thresholds.

The fixed rules (flow: g ≥ 0.25/T; decodability: corrected ratio < 0.5) put a cell in the
observed set when its score passes a number chosen in advance. The null rule instead asks,
per (layer, token, position) cell, whether the instrument's per-sample scores on the
trained model are larger than they would be without information, gives each cell a
p-value and controls the false discovery rate over the whole grid with Benjamini–Hochberg
at :data:`NULL_Q` (fixed in advance). Which null, per instrument:

- **flow**: the same cell of the same instrument on the random-init control (the same
  architecture and samples, untrained: ``flow-random-init.h5``). The question is what
  training added: the control's g shows what the architecture carries without learning
  (the embedding's own position, the mixing of untrained attention). Aggregate p-value: a
  one-sided Mann–Whitney test (normal approximation, tie-corrected) of trained > control
  over the samples, a rank test, so neither the scale nor the tail of g matters. Per
  sample: the empirical p-value of the sample's g against the control's n values at the
  cell, (1 + #{control ≥ g}) / (n + 1). A cell the architecture carries as much untrained
  as trained (the embedding's own position, g = 1 in both) is not marked: the null rule
  answers "carried beyond the untrained model", not "carried".
- **decodability**: the mean predictor on the same sample, the baseline the corrected ratio
  r = error / own-sample baseline already divides by (a probe with no information about
  x(s) does no better than the test mean). Aggregate p-value: a one-sided sign test of
  r < 1 over the samples (exact binomial, ties r = 1 dropped). A probe whose prediction is
  independent of x(s) and symmetric about the mean gets r < 1 on at most half of the
  samples, whatever the tails of r (a mean or t-test would be ruled by the samples near
  the mean, where r is huge). The random-init probe control is not the null here: probe
  results store its aggregate R² per cell only, no per-sample errors, so it has no
  distribution to rank against. Per-sample null sets are not defined for decodability (one
  ratio per sample and no per-sample null distribution at the cell).

The two families (aggregate cells [L+1, T+1, T]; per-sample cells [L+1, n, T+1, T]) are
corrected separately, each over its whole grid, own positions included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from infoprobe.base.errors import CompareInputError
from infoprobe.base.fdr import FDR_Q, benjamini_hochberg
from infoprobe.compare.core import aggregate_membership
from infoprobe.compare.observations import Observations, scope_masks

NULL_Q = FDR_Q
"""False discovery rate of the null rule (Benjamini–Hochberg over the whole grid), fixed
before any comparison."""

FLOW_NULL = "random-init control, one-sided Mann–Whitney over samples (trained > control)"
DECODABILITY_NULL = "own-sample mean predictor, one-sided sign test of r < 1 over samples"


def mann_whitney_greater(trained: np.ndarray, control: np.ndarray) -> np.ndarray:
    """One-sided Mann–Whitney p-values of trained > control per cell.

    trained [L+1, n, T+1, T], control [L+1, m, T+1, T] (samples on axis 1) →
    [L+1, T+1, T]; a cell whose values are all tied has p = 1.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        result = stats.mannwhitneyu(
            trained, control, alternative="greater", axis=1, method="asymptotic"
        )
    p = np.asarray(result.pvalue, dtype=np.float64)
    return np.where(np.isfinite(p), p, 1.0)


def empirical_greater(trained: np.ndarray, control: np.ndarray) -> np.ndarray:
    """Per-sample empirical p-values (1 + #{control ≥ value}) / (m + 1) against the same
    cell's control values: trained [L+1, n, T+1, T], control [L+1, m, T+1, T] → trained's
    shape."""
    m = control.shape[1]
    ordered = np.sort(np.moveaxis(control, 1, -1), axis=-1)  # [L+1, T+1, T, m]
    values = np.moveaxis(trained, 1, -1)  # [L+1, T+1, T, n]
    at_least = np.empty(values.shape, dtype=np.int64)
    for cell in np.ndindex(values.shape[:-1]):
        at_least[cell] = m - np.searchsorted(ordered[cell], values[cell], side="left")
    return np.moveaxis((1.0 + at_least) / (m + 1.0), -1, 1)


def sign_test_below(ratio: np.ndarray, level: float = 1.0) -> np.ndarray:
    """One-sided sign-test p-values of ratio < ``level`` per cell: [L+1, n, T+1, T] →
    [L+1, T+1, T] (exact binomial, ties dropped; p = 1 where every value ties)."""
    below = (ratio < level).sum(axis=1)
    untied = (ratio != level).sum(axis=1)
    p = stats.binom.sf(below - 1, untied, 0.5)
    return np.where(untied > 0, p, 1.0)


@dataclass(frozen=True)
class NullSets:
    """The null rule's sets of one instrument.

    p: aggregate p-values [L+1, T+1, T]; aggregate: BH-marked cells, same shape;
    per_sample: BH-marked per-sample cells [L+1, n, T+1, T], or None where not defined;
    null: which null (text); q: the false discovery rate.
    """

    instrument: str
    null: str
    q: float
    p: np.ndarray
    aggregate: np.ndarray
    per_sample: np.ndarray | None = None


def flow_null(trained: Observations, control: Observations, q: float = NULL_Q) -> NullSets:
    """The null rule for flow: ``trained``'s per-sample g against ``control``'s (the
    random-init model's) at the same cell (module doc)."""
    a, b = trained.sample_score, control.sample_score
    if a is None or b is None:
        raise CompareInputError(
            f"null rule: {trained.instrument} and {control.instrument} need per-sample scores"
        )
    if a.shape[0] != b.shape[0] or a.shape[2:] != b.shape[2:]:
        raise CompareInputError(
            f"null rule: {trained.instrument} {a.shape} and {control.instrument} {b.shape} "
            "disagree on (layers, tokens, positions)"
        )
    p = mann_whitney_greater(a, b)
    per_sample = benjamini_hochberg(empirical_greater(a, b), q)
    return NullSets(trained.instrument, FLOW_NULL, q, p, benjamini_hochberg(p, q), per_sample)


def decodability_null(obs: Observations, q: float = NULL_Q) -> NullSets:
    """The null rule for decodability: the corrected ratios against the own-sample mean
    predictor (ratio 1), a sign test per cell; no per-sample sets (module doc)."""
    if obs.sample_score is None or obs.member_when != "below":
        raise CompareInputError(
            f"null rule: {obs.instrument} needs per-sample corrected ratios (members below)"
        )
    p = sign_test_below(obs.sample_score)
    return NullSets(obs.instrument, DECODABILITY_NULL, q, p, benjamini_hochberg(p, q))


def own_null(obs: Observations, q: float = NULL_Q) -> NullSets:
    """The null rule of an instrument with per-sample p-values of its own (the critic's
    rank test against mismatched pairs): per sample their Benjamini–Hochberg rejections
    among the samples of each cell (the family the critic's own sets use);
    per cell a one-sided sign test of p < 1/2 over the samples (under the null P(p < 1/2)
    ≤ 1/2; the samples share mismatched partners, so the binomial is an approximation)."""
    assert obs.null_p is not None
    p = sign_test_below(obs.null_p, 0.5)
    per_sample = benjamini_hochberg(obs.null_p, q, axis=1)
    null = f"{obs.null_name}; per cell a sign test of p < 1/2 over samples"
    return NullSets(obs.instrument, null, q, p, benjamini_hochberg(p, q), per_sample)


def null_sets(instruments: Mapping[str, Observations], q: float = NULL_Q) -> dict[str, NullSets]:
    """The null rule of every instrument it is defined for: a flow instrument with its
    random-init control among ``instruments``, decodability with per-sample ratios."""
    found = {}
    for name, obs in instruments.items():
        if obs.control_of is not None or obs.sample_score is None:
            continue
        control = next((o for o in instruments.values() if o.control_of == name), None)
        if obs.null_p is not None:
            found[name] = own_null(obs, q)
        elif obs.member_when == "above" and control is not None:
            if control.sample_score is not None:
                found[name] = flow_null(obs, control, q)
        elif name.startswith("decodability"):  # the main probe and any beside it
            found[name] = decodability_null(obs, q)
    return found


def _agreement(marked: np.ndarray, always: np.ndarray, never: np.ndarray) -> dict[str, Any]:
    """Per layer (sum over the last two axes, after any sample axis): cells marked, and
    their share among InfoFlow's predicted cells and among the others."""
    axes = tuple(range(1, marked.ndim))
    n_pred, n_other = always.sum(axis=axes), never.sum(axis=axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "marked": marked.sum(axis=axes),
            "predicted_cells": n_pred,
            "other_cells": n_other,
            "share_predicted_marked": (marked & always).sum(axis=axes) / n_pred,
            "share_others_marked": (marked & never).sum(axis=axes) / n_other,
        }


def null_summary(
    instruments: Mapping[str, Observations], predicted: np.ndarray, found: Mapping[str, NullSets]
) -> dict[str, Any]:
    """What comparison.json stores under ``null_rule``: q, and per instrument its null and,
    per layer and rule ("fixed", "null"), the aggregate cells marked (positions s ≠ t) and
    their agreement with InfoFlow (share of the always-predicted cells marked, share of the
    never-predicted ones); the same per sample where the rule has per-sample sets.

    predicted: bool [L+1, n, T+1, T+1] InfoFlow's sets on the compared samples.
    """
    membership = aggregate_membership(predicted)
    others = scope_masks(predicted.shape[-1] - 1)["others"]
    always, never = (membership == 1.0) & others, (membership == 0.0) & others
    sample_pred = predicted[..., :-1] & others
    sample_never = ~predicted[..., :-1] & others
    out: dict[str, Any] = {"q": next(iter(found.values())).q if found else NULL_Q}
    by_inst = {}
    for name, sets in found.items():
        obs = instruments[name]
        entry: dict[str, Any] = {"null": sets.null, "scope": "others"}
        rules = {"null": sets.aggregate}
        if obs.aggregate is not None:
            rules = {"fixed": obs.aggregate, **rules}
        entry["aggregate"] = {k: _agreement(v & others, always, never) for k, v in rules.items()}
        if sets.per_sample is not None and obs.per_sample is not None:
            entry["per_sample"] = {
                k: _agreement(v & others, sample_pred, sample_never)
                for k, v in (("fixed", obs.per_sample), ("null", sets.per_sample))
            }
        else:
            entry["per_sample"] = None
        by_inst[name] = entry
    out["instruments"] = by_inst
    return out


def null_rule(
    instruments: Mapping[str, Observations], predicted: np.ndarray, q: float = NULL_Q
) -> tuple[dict[str, NullSets], dict[str, Any]]:
    """(:func:`null_sets`, :func:`null_summary`) of a comparison's instruments."""
    found = null_sets(instruments, q)
    summary = null_summary(instruments, predicted, found)
    summary["q"] = q
    return found, summary
