"""Observed-set instruments: each turns its results into one :class:`Observations`.

- **Decodability** (probe results): can a probe recover x(s) from h(t, l)? Per sample it is
  scored against that sample's own baseline (below), so selecting extreme inputs does not
  pass for information.
- **Flow** (influence files): does h(t, l) move when x(s) moves? Local sensitivity (a nudge)
  or resample ablation (x(s) redrawn); see docs/influence.md.

The comparison (:mod:`infoprobe.compare.core`) consumes any of them the same way; a further
instrument only needs a function here that returns :class:`Observations`.

Corrected per-sample decodability. A probe's per-sample error is e_i = ‖x̂_i − x_i‖² /
(SST / n), and its baseline on the same sample, the error of predicting the test mean, is
b_i = ‖x_i − x̄‖² / (SST / n). Under max retrieval the retrieved x(s) is an extreme input
(far from x̄), so e_i is large for exactly the positions a theory predicts, even for a
probe that learned nothing. The corrected score is the ratio r_i = e_i / b_i =
‖x̂_i − x_i‖² / ‖x_i − x̄‖²: 1 for the mean predictor on every sample whatever was
selected, 0 for a perfect probe. Membership: r_i < :data:`DEFAULT_DECODABLE_RATIO`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np

from infoprobe.base.errors import UserError
from infoprobe.base.fdr import benjamini_hochberg
from infoprobe.compare.fit_flags import flagged_cells
from infoprobe.compare.observations import Observations
from infoprobe.influence.sets import AGGREGATE_SHARE_LEVEL
from infoprobe.probes.families import family
from infoprobe.probes.observed import (
    DEFAULT_SHARE,
    DEFAULT_TAU_SAMPLE,
    PER_SAMPLE_RULE,
    corrected_errors,
)

ScoreKind = Literal["r2", "selectivity"]
TARGETS = "positions"

DEFAULT_DECODABLE_RATIO = DEFAULT_TAU_SAMPLE
"""Per-sample membership for decodability: the probes' one per-sample rule
(:data:`~infoprobe.probes.observed.DEFAULT_TAU_SAMPLE`: the error on the sample below half
the error of predicting the mean on that same sample). A probe with no information
predicts about the mean, has ratio ≈ 1 on every sample and passes on none, wherever x(s)
lies. A results file made by that rule at another ``tau_sample`` is compared at its own."""

RATIO_TAUS = np.geomspace(1e-2, 2.0, 24)
"""τ grid of the corrected-ratio sweep."""


class InstrumentError(UserError):
    """An instrument's results lack what the comparison needs."""


def pick_probe(results: Any, probe: str | None) -> str:
    present = sorted({key[1] for key in results.scores if key[0] == TARGETS})
    if not present:
        raise InstrumentError(
            f"probe results hold no '{TARGETS}' scores (targets present: "
            f"{sorted({k[0] for k in results.scores})}); run `infoprobe probe --targets positions`"
        )
    chosen = probe or results.settings.get("probe") or present[0]
    if chosen not in present:
        raise InstrumentError(f"--probe {chosen}: no scores for it; present: {present}")
    return chosen


CRITIC_SAMPLE_TAUS = np.geomspace(1e-2, 30.0, 25)
"""τ grid (nats) of the per-sample sweep of the critic's pointwise V-information."""
CRITIC_NULL = "mismatched pairs: rank of the sample's own x(s) among other samples' x(s)"


def critic_decodability(
    results: Any,
    *,
    probe: str = "critic",
    score: ScoreKind = "r2",
    provenance: dict[str, Any] | None = None,
) -> Observations:
    """A density family's results (the critic, :mod:`infoprobe.probes.critic`) as
    observations: per sample its Benjamini–Hochberg sets, its pointwise V-information
    (members above) and its rank p-values; aggregate the share of samples in the sets
    ("r2") or that share minus the largest control's ("selectivity")."""
    control = "none" if score == "r2" else "selectivity"
    key = (TARGETS, probe, control, "share")
    sample = (TARGETS, probe, "none")
    missing = [k for k in (key, (*sample, "pvi"), (*sample, "p_value"))
               if k not in results.scores and k not in results.sample_scores]  # fmt: skip
    if missing:
        raise InstrumentError(
            f"{probe} results lack {missing}; re-run `infoprobe probe --probe {probe}`"
        )
    thresholds = results.thresholds or {}
    return Observations(
        instrument="decodability",
        per_sample=results.observed.get((TARGETS, "per_sample")),
        sample_score=np.asarray(results.sample_scores[(*sample, "pvi")], dtype=np.float64),
        aggregate=results.observed.get((TARGETS, "aggregate")),
        score=np.asarray(results.scores[key], dtype=np.float64),
        member_when="above",
        sample_score_name=f"pointwise V-information (nats, {probe})",
        score_name="share of samples in the critic's sets"
        + ("" if score == "r2" else " − control"),
        tau_sample=None,
        tau=DEFAULT_SHARE if score == "r2" else thresholds.get("margin"),
        sample_taus=CRITIC_SAMPLE_TAUS,
        word="decodable",
        provenance=dict(provenance or {}),
        null_p=np.asarray(results.sample_scores[(*sample, "p_value")], dtype=np.float64),
        null_name=CRITIC_NULL,
        label=beside_name(probe),
        fit_failures=flagged_cells(results, probe),
    )


def decodability(
    results: Any,
    x_test: np.ndarray,
    *,
    probe: str | None = None,
    score: ScoreKind = "r2",
    ratio: float | None = None,
    provenance: dict[str, Any] | None = None,
) -> Observations:
    """Probe results (:class:`~infoprobe.probes.results.ProbeResults`) as observations.

    x_test: the inputs of the results' test samples ``[n_test, T, d]``, in ``test_index``
    order. probe: a family in the results (default: the one the results were run with; a
    density family such as the critic: :func:`critic_decodability`, which needs no
    inputs).
    score: aggregate score, test R² ("r2") or R² minus the largest control ("selectivity").
    ratio: per-sample membership threshold on the corrected error (see the module doc;
    default: the results file's ``tau_sample`` where its sets were made by the same rule,
    :data:`DEFAULT_DECODABLE_RATIO` for files written before it), so the per-sample sets
    here are those in the file.
    """
    probe = pick_probe(results, probe)
    if family(probe).kind == "density":
        return critic_decodability(results, probe=probe, score=score, provenance=provenance)
    control = "none" if score == "r2" else "selectivity"
    key = (TARGETS, probe, control, "r2")
    if key not in results.scores:
        raise InstrumentError(
            f"no {score} scores for probe {probe!r}; present: {sorted(results.scores)}"
        )
    errors = results.per_sample.get((TARGETS, probe, "none"))
    thresholds = results.thresholds or {}
    if ratio is None:
        same_rule = thresholds.get("per_sample_rule") == PER_SAMPLE_RULE
        ratio = float(thresholds["tau_sample"]) if same_rule else DEFAULT_DECODABLE_RATIO
    corrected = per_sample = None
    if errors is not None:
        corrected = corrected_errors(errors, x_test)
        per_sample = corrected < ratio
    return Observations(
        instrument="decodability",
        per_sample=per_sample,
        sample_score=corrected,
        aggregate=results.observed.get((TARGETS, "aggregate")),
        score=np.asarray(results.scores[key], dtype=np.float64),
        member_when="below",
        sample_score_name="error / own-sample baseline",
        score_name="R²" if score == "r2" else "selectivity (R² − control)",
        tau_sample=ratio if corrected is not None else None,
        tau=thresholds.get("tau") if score == "r2" else thresholds.get("margin"),
        sample_taus=RATIO_TAUS,
        no_per_sample=None
        if errors is not None
        else (
            f"probe {probe!r} gives aggregate scores only (one fit per layer, token and "
            "position over all samples, no per-sample errors); the linear and query probes "
            "have per-sample sets (--probe linear, query or critic)"
        ),
        word="decodable",
        provenance=dict(provenance or {}),
        label=beside_name(probe),
        fit_failures=flagged_cells(results, probe),
    )


def beside_name(family: str) -> str:
    """The instrument name of probe results of ``family`` compared beside the main ones:
    "decodability (linear probe)"."""
    return f"decodability ({family} probe)"


def probe_family_of(name: str) -> str | None:
    """The family in a beside instrument's name (:func:`beside_name`), else None."""
    if name.startswith("decodability (") and name.endswith(" probe)"):
        return name[len("decodability (") : -len(" probe)")]
    return None


def random_init_control(
    results: Any, *, of: str = "decodability", provenance: dict[str, Any] | None = None
) -> Observations | None:
    """The critic's random-init control (the same critic fitted on an untrained model's
    cache, the same test samples) as a per-sample instrument controlling ``of``: its PVI,
    p-values and sets at ``q`` as recorded; None for results without it (another probe
    family, whose controls are aggregate R² only, or a run without --control)."""
    probe = (results.settings or {}).get("probe", "critic")
    key = (TARGETS, probe, "random_init")
    if (*key, "pvi") not in results.sample_scores:
        return None
    main = critic_decodability(results, probe=probe, provenance=provenance)
    p_value = np.asarray(results.sample_scores[(*key, "p_value")], dtype=np.float64)
    q = (results.thresholds or {}).get("q")
    return replace(
        main,
        instrument=f"{of} (random-init)",
        per_sample=None if q is None else benjamini_hochberg(p_value, q, axis=1),  # per cell
        sample_score=np.asarray(results.sample_scores[(*key, "pvi")], dtype=np.float64),
        aggregate=None,
        score=np.asarray(results.scores[(*key, "share")], np.float64),
        null_p=p_value,
        control_of=of,
        fit_failures=flagged_cells(results, probe, "random_init"),
    )


def flow_name(method: str, random_init_seed: int | None) -> tuple[str, str | None]:
    """(instrument name, the instrument it controls or None) of an influence file made
    with ``method`` ("local" or "resample") on trained or random-init weights."""
    base = "flow" if method == "local" else "flow (resample)"
    if random_init_seed is None:
        return base, None
    return f"{base} (random-init)", base


FLOW_SHARE_NAME = "flow-set share"
"""The flow instrument's aggregate score: the share of samples in which x(s) is in the flow
set of h(t, l) (:func:`infoprobe.influence.membership_share`)."""


def flow(
    scores: np.ndarray,
    aggregate: np.ndarray | None = None,
    *,
    threshold: float,
    share_level: float = AGGREGATE_SHARE_LEVEL,
    name: str = "flow",
    control_of: str | None = None,
    provenance: dict[str, Any] | None = None,
) -> Observations:
    """Flow scores as observations.

    scores: g ``[L+1, n, T+1, T]`` (docs/influence.md); threshold: per-sample membership
    g ≥ threshold, fixed before any comparison. The aggregate score is the membership share,
    the fraction of these n samples in which g ≥ threshold, and the aggregate set holds the
    cells whose share is at least ``share_level``. aggregate: the mean of g over samples; not
    used (a few near-tie samples decide it; docs/influence.md, *The aggregate score*), still
    accepted so that callers passing it keep working.
    """
    del aggregate  # the mean g is not the aggregate score
    scores = np.asarray(scores, dtype=np.float64)
    member = scores >= threshold
    share = member.mean(axis=1, dtype=np.float64)
    return Observations(
        instrument=name,
        per_sample=member,
        sample_score=scores,
        aggregate=share >= share_level,
        score=share,
        member_when="above",
        sample_score_name="flow g (share of the state's variance)",
        score_name=FLOW_SHARE_NAME,
        tau_sample=threshold,
        tau=share_level,
        word="carried",
        control_of=control_of,
        provenance=dict(provenance or {}),
    )


def take_samples(obs: Observations, index: np.ndarray) -> Observations:
    """The same observations on a subset of their samples (``index`` into the n axis)."""
    index = np.asarray(index, dtype=np.int64)
    return replace(
        obs,
        per_sample=None if obs.per_sample is None else obs.per_sample[:, index],
        sample_score=None if obs.sample_score is None else obs.sample_score[:, index],
        null_p=None if obs.null_p is None else obs.null_p[:, index],
    )
