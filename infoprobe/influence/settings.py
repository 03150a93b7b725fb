"""Settings of the flow instrument: which question, which estimator, how many draws."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from infoprobe.influence.errors import InfluenceSettingsError
from infoprobe.model_config import MAX_SEED

METHODS = ("local", "resample")
ESTIMATORS = ("fd", "jacobian")
DEFAULT_BLOCK_SIZE = 256
"""Samples per streamed block: one commit to the file and one random generator each."""
DEFAULT_MAX_SEQUENCES = 512
"""Most sequences in one batched forward (bounds the memory of a forward)."""


@dataclass(frozen=True)
class InfluenceSettings:
    """How flow is measured. Frozen; every field is validated on construction.

    Args:
        method: ``"local"`` (local sensitivity: nudge x(s) by ε·σ·u) or ``"resample"``
            (resample ablation: replace x(s) by another sample's x(s)).
        estimator: local sensitivity only: ``"jacobian"`` (exact ‖∂h/∂x(s)‖_F² by
            forward-mode AD over the d basis directions) or ``"fd"`` (finite differences
            along ``directions`` random Gaussian directions; unbiased, noisy).
        directions: K, random directions per (sample, position) for ``fd``.
        epsilon: ε, the nudge size in units of the input scale σ (``fd``), in (0, 1].
        resamples: R, partner samples per (sample, position) for ``resample``.
        seed: seed of the directions and partners: block b draws from
            ``numpy.random.default_rng([seed, b])``.
        block_size: samples per block (commit unit and generator unit); None means
            :data:`DEFAULT_BLOCK_SIZE`. Part of the result's identity (the draws depend on it).
        max_sequences: most sequences per batched forward (memory bound); at least one
            sample's 1 + T·K sequences always go together.
    """

    method: Literal["local", "resample"] = "local"
    estimator: Literal["fd", "jacobian"] = "jacobian"
    directions: int = field(default=2, metadata={"cli": {"metavar": "K"}})
    epsilon: float = field(default=0.01, metadata={"cli": {"metavar": "EPS"}})
    resamples: int = field(default=2, metadata={"cli": {"metavar": "R"}})
    seed: int = 0
    block_size: int | None = field(
        default=None,
        metadata={
            "cli": {
                "metavar": "B",
                "default_text": str(DEFAULT_BLOCK_SIZE),
                "help": "samples per block, the commit unit and the generator unit (part of "
                "the result's identity: the draws depend on it)",
            }
        },
    )
    max_sequences: int = DEFAULT_MAX_SEQUENCES

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> InfluenceSettingsError:
            actual = getattr(self, name)
            return InfluenceSettingsError(
                f"InfluenceSettings.{name} must be {expected}, got {actual!r}"
            )

        if self.method not in METHODS:
            raise bad("method", f"one of {METHODS}")
        if self.estimator not in ESTIMATORS:
            raise bad("estimator", f"one of {ESTIMATORS}")
        for name in ("directions", "resamples", "max_sequences"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(name, "an integer >= 1")
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not math.isfinite(eps):
            raise bad("epsilon", "a finite number > 0")
        if not 0 < eps <= 1:  # a nudge, not a jump: beyond one input scale fd is no derivative
            raise bad("epsilon", "a finite number in (0, 1] (at most one input scale)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise bad("seed", "an integer in 0..2**63-1")
        if not 0 <= self.seed <= MAX_SEED:
            raise bad("seed", "an integer in 0..2**63-1")
        bs = self.block_size
        if bs is not None and (isinstance(bs, bool) or not isinstance(bs, int) or bs < 1):
            raise bad("block_size", "None or an integer >= 1")
        object.__setattr__(self, "epsilon", float(eps))

    @property
    def samples_per_block(self) -> int:
        """The resolved block size."""
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE

    def resolved(self) -> InfluenceSettings:
        """The same settings with ``block_size`` filled in (what a file records)."""
        return InfluenceSettings(**{**asdict(self), "block_size": self.samples_per_block})

    def draws(self, d: int) -> int:
        """Perturbed sequences per (sample, position): K, R or d (Jacobian basis)."""
        if self.method == "resample":
            return self.resamples
        return d if self.estimator == "jacobian" else self.directions

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (block size resolved) for the file's ``settings`` attribute."""
        return asdict(self.resolved())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InfluenceSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InfluenceSettingsError(
                f"InfluenceSettings: unknown field(s) {unknown}; valid: {sorted(known)}"
            )
        return cls(**d)

    def describe(self) -> str:
        """One line: the question and its estimator."""
        if self.method == "resample":
            return f"resample ablation, R={self.resamples}, seed {self.seed}"
        if self.estimator == "jacobian":
            return "local sensitivity, exact Jacobian (forward-mode AD)"
        return (
            f"local sensitivity, finite differences, K={self.directions}, "
            f"ε={self.epsilon:g}, seed {self.seed}"
        )
