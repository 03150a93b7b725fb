"""What an instrument observed, as the comparison takes it: :class:`Observations`.

An *instrument* observes I(t, l): decodability (probes recover x(s) from h(t, l)) or flow
(h(t, l) moves when x(s) is nudged or resampled). Whatever it is, it hands the comparison
one :class:`Observations`: per-sample sets and/or a continuous per-sample score
``[L+1, n, T+1, T]``, aggregate sets and/or an aggregate score ``[L+1, T+1, T]``, the
thresholds that made the sets and its provenance. A third instrument plugs in the same way.
Also here: the scopes (which cells of a set the comparison counts) and the τ grids of the
per-sample sweeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infoprobe.base.errors import CompareInputError
from infoprobe.compare.agreement import MemberWhen
from infoprobe.compare.provenance import ProvenanceError

SCOPES = ("others", "own")
"""``others``: positions s ≠ t (every headline number); ``own``: s = t, reported apart."""

DEFAULT_ERROR_TAUS = np.geomspace(1e-2, 1.0, 21)
"""τ grid of a per-sample sweep of errors (members below τ)."""

DEFAULT_SAMPLE_SCORE_TAUS = np.geomspace(1e-4, 1.0, 41)
"""τ grid of a per-sample sweep of scores such as flow (members at or above τ)."""


def scope_masks(T: int) -> dict[str, np.ndarray]:
    """Which (token, position) cells each scope holds: bool ``[T+1, T]`` per scope."""
    own = np.eye(T + 1, T, dtype=bool)
    return {"others": ~own, "own": own}


def as_array(value: Any, name: str, kind: Literal["bool", "float"], ndim: int) -> np.ndarray:
    """``value`` as an array with ``ndim`` axes of dtype bool (``kind`` "bool") or of a
    float dtype with finite values; CompareInputError naming ``name`` otherwise."""
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
    no_per_sample: why there are no per-sample sets (read them with :meth:`sample_sets`).
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
    no_per_sample: str | None = None
    """Why ``per_sample`` is None, when the instrument has no per-sample result."""
    null_p: np.ndarray | None = None
    """Per-sample p-values of the instrument's own null, float [L+1, n, T+1, T] (the
    critic's rank test against mismatched pairs), or None."""
    null_name: str | None = None
    """What ``null_p`` tests against (text)."""
    fit_failures: np.ndarray | None = None
    """Per-cell failure codes of the probe's fits, uint8 [L+1, T+1] (0: a good fit;
    infoprobe.probes.refits), or None when not recorded (flow, older files)."""
    label: str | None = None
    """How headlines name the instrument (None: its name), e.g. "decodability (critic
    probe)"."""

    def sample_sets(self) -> np.ndarray:
        """``per_sample`` bool [L+1, n, T+1, T], or :class:`CompareInputError` naming
        why this instrument has none (an aggregate-only probe)."""
        if self.per_sample is None:
            why = self.no_per_sample or "it was given aggregate observations only"
            raise CompareInputError(f"{self.instrument}: no per-sample sets: {why}")
        return self.per_sample

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
            "null_p": ("float", 4),
        }
        shapes: dict[str, tuple[int, ...]] = {}
        for name, (kind, ndim) in specs.items():
            value = getattr(self, name)
            if value is not None:
                array = as_array(value, f"{self.instrument}.{name}", kind, ndim)
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
