"""Compare predicted information sets I_pred(t, l) with what an instrument observed.

An *instrument* observes I(t, l): decodability (probes recover x(s) from h(t, l)) or flow
(h(t, l) moves when x(s) is nudged or resampled). Whatever it is, it hands the comparison
one :class:`Observations`: per-sample sets and/or a continuous per-sample score
``[L+1, n, T+1, T]``, aggregate sets and/or an aggregate score ``[L+1, T+1, T]``, the
thresholds that made the sets and its provenance. A third instrument plugs in the same way.

The predicted sets are the reference and the observed sets the measurement (counts and
rates: :mod:`infoprobe.compare.agreement`). Each token's own position s = t is in every predicted
set (I(t, 0) = {t} and sets only grow), so it would inflate every agreement number: it is
reported apart (scope ``own``) and every headline number is about the other positions
(scope ``others``). CLS has no own data position.

Aggregate comparison (no sample axis): the predicted membership of s in I_pred(t, l) is
the fraction of samples in which s ∈ I_pred(t, l): ``always`` (1), ``never`` (0) or
``sometimes``. Violations are observed cells that are never predicted, omissions
unobserved cells that are always predicted; sometimes cells are counted on their own.

AUROC (threshold-free): how well the continuous score ranks predicted positions above the
others (errors enter with a minus sign). Observed is not used: see :data:`CAVEAT`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
from einops import rearrange

from infoprobe.base.atomic import atomic_output
from infoprobe.base.errors import CompareInputError
from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.agreement import MemberWhen, SetAgreement, TauSweep, tau_sweep
from infoprobe.compare.auroc import auroc
from infoprobe.compare.provenance import ProvenanceError

CAVEAT = (
    "Observed is not used. A probe that recovers x(s) from token t's state shows that the "
    "information can be read there; a state that moves when x(s) moves shows that x(s) "
    "flows into it; neither shows that the network uses it for its output. Omissions "
    "(predicted but not observed) are expected where a network compresses what it keeps; "
    "violations (observed but not predicted) are what contradicts a theory."
)

SCOPES = ("others", "own")
"""``others``: positions s ≠ t (every headline number); ``own``: s = t, reported apart."""

DEFAULT_ERROR_TAUS = np.geomspace(1e-2, 1.0, 21)
"""τ grid of a per-sample sweep of errors (members below τ)."""

DEFAULT_SAMPLE_SCORE_TAUS = np.geomspace(1e-4, 1.0, 41)
"""τ grid of a per-sample sweep of scores such as flow (members at or above τ)."""

DEFAULT_SCORE_TAUS = np.linspace(0.0, 1.0, 21)
"""τ grid of the aggregate sweep: scores such as R², members when at least τ."""


def scope_masks(T: int) -> dict[str, np.ndarray]:
    """Which (token, position) cells each scope holds: bool ``[T+1, T]`` per scope."""
    own = np.eye(T + 1, T, dtype=bool)
    return {"others": ~own, "own": own}


# ----------------------------------------------------------------------------- inputs


def _as_array(value: Any, name: str, kind: Literal["bool", "float"], ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim:
        raise CompareInputError(f"{name}: expected {ndim} axes, got shape {array.shape}")
    if kind == "bool":
        if array.dtype != np.bool_:
            raise CompareInputError(f"{name}: expected dtype bool, got {array.dtype}")
        return array
    if not np.issubdtype(array.dtype, np.floating):
        raise CompareInputError(f"{name}: expected a float dtype, got {array.dtype}")
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise CompareInputError(f"{name}: non-finite value at index {first}")
    return array


@dataclass(frozen=True)
class Observations:
    """What one instrument observed, in the conventions of docs/conventions.md.

    instrument: its name ("decodability", "flow", "flow (random-init)", ...).
    per_sample: bool [L+1, n, T+1, T] per-sample observed sets (layer, sample, token,
        position); sets with a T+1 position axis are accepted, their CLS column dropped.
    sample_score: float [L+1, n, T+1, T] continuous per-sample score; ``member_when`` says
        whether small ("below": errors) or large ("above": flow) values mean observed.
    aggregate: bool [L+1, T+1, T] (or [L+1, T+1, T+1]) aggregate observed sets.
    score: float [L+1, T+1, T] aggregate score, higher = more observed (R², mean flow).
    tau_sample / tau: the thresholds that made ``per_sample`` from ``sample_score`` and
        ``aggregate`` from ``score``; shown in the τ sweeps.
    sample_taus: τ grid of the per-sample sweep (default by ``member_when``).
    word: how the report says "observed" for this instrument ("decodable", "carried").
    control_of: for a control (e.g. the random-init model), the instrument it controls.
    provenance: where these came from.
    Any array may be None, but at least one of the four must be given.
    """

    instrument: str = "decodability"
    per_sample: np.ndarray | None = None
    sample_score: np.ndarray | None = None
    aggregate: np.ndarray | None = None
    score: np.ndarray | None = None
    member_when: MemberWhen = "below"
    sample_score_name: str = "normalised error"
    score_name: str = "R²"
    tau_sample: float | None = None
    tau: float | None = None
    sample_taus: np.ndarray | None = None
    word: str = "observed"
    control_of: str | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.member_when not in ("below", "above"):
            raise CompareInputError(
                f"observations.member_when: expected 'below' or 'above', got {self.member_when!r}"
            )
        specs = {
            "per_sample": ("bool", 4),
            "sample_score": ("float", 4),
            "aggregate": ("bool", 3),
            "score": ("float", 3),
        }
        shapes: dict[str, tuple[int, ...]] = {}
        for name, (kind, ndim) in specs.items():
            value = getattr(self, name)
            if value is not None:
                array = _as_array(value, f"{self.instrument}.{name}", kind, ndim)
                if kind == "bool" and array.shape[-1] == array.shape[-2]:
                    array = array[..., :-1]  # sets with the CLS column: it carries no input
                object.__setattr__(self, name, array)
                shapes[name] = array.shape
        if not shapes:
            raise CompareInputError(
                f"{self.instrument}: give at least one of per_sample, sample_score, "
                "aggregate, score"
            )
        # every array reduces to (layers, tokens, positions); per-sample ones also to n
        grids = {name: (s[0], *s[-2:]) for name, s in shapes.items()}
        samples = {name: s[1] for name, s in shapes.items() if len(s) == 4}
        for label, found in (("(layers, tokens, positions)", grids), ("samples", samples)):
            if len(set(found.values())) > 1:
                raise ProvenanceError(f"{self.instrument}: arrays disagree on {label}: {found}")
        _, tokens, positions = next(iter(grids.values()))
        if tokens != positions + 1:
            raise CompareInputError(
                f"{self.instrument}: token axis must be T+1 and position axis T, got {tokens} "
                f"tokens and {positions} positions (shapes {shapes})"
            )

    def _arrays(self) -> list[np.ndarray]:
        found = (self.per_sample, self.sample_score, self.aggregate, self.score)
        return [a for a in found if a is not None]

    @property
    def shape(self) -> tuple[int, int | None, int]:
        """(L+1, n or None, T)."""
        arrays = self._arrays()
        n = next((a.shape[1] for a in arrays if a.ndim == 4), None)
        return arrays[0].shape[0], n, arrays[0].shape[-1]

    def signed_sample_score(self) -> np.ndarray | None:
        """``sample_score`` with the sign that makes higher = more observed."""
        if self.sample_score is None:
            return None
        return -self.sample_score if self.member_when == "below" else self.sample_score

    def sample_grid(self) -> np.ndarray:
        """The per-sample τ grid, including the fixed ``tau_sample``."""
        default = DEFAULT_ERROR_TAUS if self.member_when == "below" else DEFAULT_SAMPLE_SCORE_TAUS
        grid = default if self.sample_taus is None else np.asarray(self.sample_taus, float)
        return grid if self.tau_sample is None else np.append(grid, self.tau_sample)


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SampleScope:
    """Per-sample agreement over one scope's cells.

    samples: counts [L+1, n, T+1]; per_token [L+1, T+1] and per_layer [L+1], pooled;
    mean_sample_jaccard [L+1]: mean over (sample, token) of each set pair's Jaccard;
    auroc_per_layer [L+1] / auroc_per_token [L+1, T+1]: the score against predicted
    membership, pooled over (sample, token, position) / (sample, position);
    sweep: agreement as τ moves. Parts an instrument lacks are None.
    """

    samples: SetAgreement | None
    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    mean_sample_jaccard: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None

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
    """

    per_token: SetAgreement | None
    per_layer: SetAgreement | None
    sometimes_observed: np.ndarray | None
    sometimes_unobserved: np.ndarray | None
    auroc_per_layer: np.ndarray | None
    auroc_per_token: np.ndarray | None
    sweep: TauSweep | None

    def to_dict(self) -> dict[str, Any]:
        """All fields, JSON-able."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` measured for one predictor against one instrument.

    per_sample / aggregate: scope name ("others", "own") → its agreement; None when the
    observations lack that part. membership: float [L+1, T+1, T] aggregate predicted
    membership; verdicts: one sentence per layer (others; own apart).
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


def _check_predicted(predicted: Any, observations: Observations) -> np.ndarray:
    pred = _as_array(predicted, "predicted sets", "bool", 4)
    layers, n, tokens, positions = pred.shape
    if tokens != positions:
        raise CompareInputError(
            f"predicted sets: expected [L+1, n, T+1, T+1], got shape {pred.shape}"
        )
    obs_layers, obs_n, obs_T = observations.shape
    found = {"L+1": (layers, obs_layers), "T": (positions - 1, obs_T)}
    if obs_n is not None:
        found["n samples"] = (n, obs_n)
    wrong = [f"{k}: predicted {a}, observed {b}" for k, (a, b) in found.items() if a != b]
    if wrong:
        raise ProvenanceError(
            f"predicted sets and {observations.instrument} do not describe the same model and "
            "samples (" + "; ".join(wrong) + "); compute both from the same cache, aligned to "
            "the same samples"
        )
    return pred


def _sample_scope(pred: np.ndarray, obs: Observations, mask: np.ndarray) -> SampleScope:
    """Per-sample agreement over the cells ``mask`` [T+1, T] marks (pred [L+1, n, T+1, T])."""
    valid = np.broadcast_to(mask, pred.shape)
    samples = per_token = per_layer = mean_jaccard = None
    if obs.per_sample is not None:
        samples = SetAgreement.from_sets(pred, obs.per_sample, valid)  # [L+1, n, T+1]
        per_token = samples.pooled(axis=1)
        per_layer = per_token.pooled(axis=1)
        with warnings.catch_warnings():  # a layer where every pair of sets is empty: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_jaccard = np.nanmean(rearrange(samples.jaccard, "l n t -> l (n t)"), axis=1)
    auroc_layer = auroc_token = sweep = None
    signed = obs.signed_sample_score()
    if signed is not None:
        layer_axes, token_axes = "l n t s -> l (n t s)", "l n t s -> l t (n s)"
        auroc_layer = auroc(
            rearrange(signed, layer_axes),
            rearrange(pred, layer_axes),
            rearrange(valid, layer_axes),
        )
        auroc_token = auroc(
            rearrange(signed, token_axes),
            rearrange(pred, token_axes),
            rearrange(valid, token_axes),
        )
        sweep = tau_sweep(
            pred,
            obs.sample_score,
            obs.sample_grid(),
            member_when=obs.member_when,
            valid=valid,
            fixed_tau=obs.tau_sample,
        )
    return SampleScope(samples, per_token, per_layer, mean_jaccard, auroc_layer, auroc_token, sweep)


def _aggregate_scope(
    membership: np.ndarray, obs: Observations, mask: np.ndarray, taus: np.ndarray
) -> AggregateScope:
    always, never = membership == 1.0, membership == 0.0
    inside = np.broadcast_to(mask, membership.shape)
    definite = (always | never) & inside
    per_token = per_layer = some_obs = some_unobs = None
    if obs.aggregate is not None:
        per_token = SetAgreement.from_sets(always, obs.aggregate, valid=definite)
        per_layer = per_token.pooled(axis=1)
        sometimes = ~(always | never) & inside
        some_obs = (sometimes & obs.aggregate).sum(axis=(1, 2))
        some_unobs = (sometimes & ~obs.aggregate).sum(axis=(1, 2))
    auroc_layer = auroc_token = sweep = None
    if obs.score is not None:
        flat = "l t s -> l (t s)"
        auroc_token = auroc(obs.score, always, valid=definite)
        auroc_layer = auroc(
            rearrange(obs.score, flat), rearrange(always, flat), valid=rearrange(definite, flat)
        )
        grid = taus if obs.tau is None else np.append(taus, obs.tau)
        sweep = tau_sweep(
            always, obs.score, grid, member_when="above", valid=definite, fixed_tau=obs.tau
        )
    return AggregateScope(
        per_token, per_layer, some_obs, some_unobs, auroc_layer, auroc_token, sweep
    )


def aggregate_membership(predicted: np.ndarray) -> np.ndarray:
    """Fraction of samples in which s ∈ I_pred(t, l).

    predicted: bool [L+1, n, T+1, T+1] → float64 [L+1, T+1, T] (data positions only).
    1 = "always" predicted, 0 = "never", in between = "sometimes".
    """
    positions = predicted.shape[-1] - 1
    return predicted[..., :positions].mean(axis=1, dtype=np.float64)


# ----------------------------------------------------------------------------- verdicts


def _percent(num: int, den: int) -> str:
    return "n/a" if den == 0 else f"{100.0 * num / den:.1f}%"


def _auroc_text(value: np.ndarray | None, layer: int) -> str:
    if value is None or not np.isfinite(value[layer]):
        return ""
    return f"; AUROC {float(value[layer]):.3f}"


def _own_text(own: SetAgreement | None, layer: int, word: str) -> str:
    if own is None or int(own.n_predicted[layer]) == 0:
        return ""
    agree, n_pred = int(own.agree[layer]), int(own.n_predicted[layer])
    return f"; own position {word} in {_percent(agree, n_pred)}"


def layer_verdicts(
    per_sample: Mapping[str, SampleScope] | None,
    aggregate: Mapping[str, AggregateScope] | None,
    n_layers: int,
    word: str = "observed",
) -> tuple[str, ...]:
    """One sentence per layer 0..L about the other positions (own position apart), from
    the per-sample agreement, else the aggregate one."""
    verdicts = []
    for layer in range(n_layers + 1):
        sample = per_sample["others"] if per_sample else None
        agg = aggregate["others"] if aggregate else None
        if sample is not None and sample.per_layer is not None:
            a = sample.per_layer
            text = (
                f"layer {layer}: {_percent(int(a.agree[layer]), int(a.n_predicted[layer]))} of "
                f"predicted positions {word} ({int(a.agree[layer])} of "
                f"{int(a.n_predicted[layer])}, per sample), "
                f"{_percent(int(a.violations[layer]), int(a.n_not_predicted[layer]))} of the "
                f"rest ({int(a.violations[layer])} of {int(a.n_not_predicted[layer])})"
                + _auroc_text(sample.auroc_per_layer, layer)
                + _own_text(per_sample["own"].per_layer, layer, word)
            )
        elif agg is not None and agg.per_layer is not None:
            a = agg.per_layer
            some_obs = int(agg.sometimes_observed[layer])
            some_all = some_obs + int(agg.sometimes_unobserved[layer])
            text = (
                f"layer {layer} (aggregate): "
                f"{_percent(int(a.agree[layer]), int(a.n_predicted[layer]))} of always-predicted "
                f"positions {word} ({int(a.agree[layer])} of {int(a.n_predicted[layer])}); "
                f"{_percent(int(a.violations[layer]), int(a.n_not_predicted[layer]))} of "
                f"never-predicted positions {word} ({int(a.violations[layer])} of "
                f"{int(a.n_not_predicted[layer])}); {some_obs} of {some_all} "
                f"sometimes-predicted positions {word}"
                + _auroc_text(agg.auroc_per_layer, layer)
                + _own_text(aggregate["own"].per_layer, layer, word)
            )
        else:
            source = sample if sample is not None else agg
            text = f"layer {layer}: no thresholded sets" + _auroc_text(
                None if source is None else source.auroc_per_layer, layer
            )
        verdicts.append(text)
    return tuple(verdicts)


def compare(
    predicted: np.ndarray,
    observations: Observations,
    *,
    name: str = "infoflow",
    score_taus: Sequence[float] | np.ndarray | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Comparison:
    """Compare predicted sets with what one instrument observed.

    predicted: bool [L+1, n, T+1, T+1] (layer, sample, token, position); only positions
    0..T-1 are compared (CLS carries no input). Its sample axis must be aligned with the
    observations' (the same samples in the same order).
    observations: the instrument's sets and scores (:class:`Observations`).
    name: the predictor's name ("infoflow", "rollout").
    score_taus: τ grid of the aggregate sweep (default :data:`DEFAULT_SCORE_TAUS`; the
    observations' own τ is always added). provenance: the predicted sets' provenance.
    Raises ProvenanceError when L, T or n differ, CompareInputError on bad arrays.
    """
    pred = _check_predicted(predicted, observations)
    layers, n, _, positions = pred.shape
    T = positions - 1
    data_pred = pred[..., :T]
    membership = aggregate_membership(pred)
    masks = scope_masks(T)
    per_sample = aggregate = None
    obs = observations
    if obs.per_sample is not None or obs.sample_score is not None:
        per_sample = {scope: _sample_scope(data_pred, obs, m) for scope, m in masks.items()}
    if obs.aggregate is not None or obs.score is not None:
        taus = DEFAULT_SCORE_TAUS if score_taus is None else np.asarray(score_taus, float)
        aggregate = {
            scope: _aggregate_scope(membership, obs, m, taus) for scope, m in masks.items()
        }
    return Comparison(
        name=name,
        instrument=obs.instrument,
        n_layers=layers - 1,
        T=T,
        n_samples=n,
        observations=obs,
        membership=membership,
        per_sample=per_sample,
        aggregate=aggregate,
        verdicts=layer_verdicts(per_sample, aggregate, layers - 1, obs.word),
        provenance={"predicted": dict(provenance or {}), "observed": dict(obs.provenance)},
    )


# ----------------------------------------------------------------------------- two instruments


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


def headline(
    comparisons: Mapping[str, Mapping[str, Comparison]], predictor: str = "infoflow"
) -> tuple[str, ...]:
    """One line per layer leading with every instrument's AUROC against ``predictor``
    (controls in brackets), then the primary instrument's set agreement (own positions
    left out), e.g. ``layer 1: flow AUROC 0.93 (random-init 0.54); decodable AUROC 0.58;
    61% of predicted positions carried, 3% of the rest``.

    comparisons: instrument → predictor → :class:`Comparison`; the first instrument that is
    not a control is the primary one.
    """
    ours = {k: v[predictor] for k, v in comparisons.items() if predictor in v}
    if not ours:
        return ()
    main = [k for k, c in ours.items() if c.observations.control_of is None]
    controls = {c.observations.control_of: c for c in ours.values() if c.observations.control_of}
    n_layers = next(iter(ours.values())).n_layers
    lines = []
    for layer in range(n_layers + 1):
        parts = []
        for name in main:
            text = f"{name} AUROC {_fmt(ours[name].auroc(layer))}"
            if name in controls:
                control = controls[name]
                label = control.instrument.removeprefix(name).strip(" ()") or "control"
                text += f" ({label} {_fmt(control.auroc(layer))})"
            parts.append(text)
        if main:
            primary = ours[main[0]]
            scope = (primary.per_sample or primary.aggregate or {}).get("others")
            if scope is not None and scope.per_layer is not None:
                a, word = scope.per_layer, primary.observations.word
                rest = f"{_share(a.violations[layer], a.n_not_predicted[layer])} of the rest"
                if int(a.n_predicted[layer]) == 0:  # e.g. layer 0: I(t, 0) = {t}
                    parts = [f"nothing predicted besides each token's own position; {rest} {word}"]
                else:
                    parts.append(
                        f"{_share(a.agree[layer], a.n_predicted[layer])} of predicted "
                        f"positions {word}, {rest}"
                    )
        lines.append(f"layer {layer}: " + "; ".join(parts))
    return tuple(lines)


def _fmt(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.2f}"


def _share(num: Any, den: Any) -> str:
    return "n/a" if int(den) == 0 else f"{100.0 * int(num) / int(den):.0f}%"


# ----------------------------------------------------------------------------- file

FORMAT = "infoprobe.comparison"
SCHEMA_VERSION = 3
"""3: the common header of docs/conventions.md (2 had ``format_version``, no ``created``)."""
AXES = ("layer", "token", "position", "tau")
"""Axes of the arrays a comparison file holds (per layer, per token, membership, sweeps)."""


def write_comparisons(
    path: str | os.PathLike,
    comparisons: Mapping[str, Mapping[str, Comparison]],
    *,
    extra: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write comparisons as one JSON file (docs/report.md).

    comparisons: instrument → predictor → :class:`Comparison`, stored under
    ``comparisons/<instrument>/<predictor>``; extra: further top-level entries (headline,
    crosstab, heads). Written to ``path.tmp-<pid>`` and renamed; raises OutputExistsError
    if ``path`` exists and ``overwrite`` is false.
    """
    document = jsonable(
        {
            **make_header(FORMAT, SCHEMA_VERSION, AXES),
            "caveat": CAVEAT,
            "comparisons": {
                inst: {pred: c.to_dict() for pred, c in by_pred.items()}
                for inst, by_pred in comparisons.items()
            },
            **dict(extra or {}),
            "provenance": dict(provenance or {}),
        }
    )
    with atomic_output(path, overwrite=overwrite, what="comparison file", kind=FORMAT) as tmp:
        tmp.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    return Path(path)


def read_comparisons(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by :func:`write_comparisons` (schema 2 or 3) as a dict,
    validating the fields infoprobe reads back: the header, ``comparisons`` (an object),
    ``headline`` (a list of lines) and ``provenance`` (an object).

    Raises CompareInputError naming the file and the field.
    """
    path = Path(path)
    fix = "re-run `infoprobe compare` (or `infoprobe run --overwrite`)"
    document = read_json_object(path, CompareInputError, fix)
    check_header(document, path, fmt=FORMAT, readable=range(2, SCHEMA_VERSION + 1),
                 error=CompareInputError, legacy_version="format_version")  # fmt: skip
    for name, kind in (("comparisons", dict), ("headline", list), ("provenance", dict)):
        value = document.get(name)
        if not isinstance(value, kind) or (
            kind is list and not all(isinstance(line, str) for line in value)
        ):
            expected = "a list of text lines" if kind is list else "a JSON object"
            raise CompareInputError(
                f"{path}: field {name!r} is {str(value)[:60]!r}, expected {expected}; {fix}"
            )
    return document
