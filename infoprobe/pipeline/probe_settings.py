"""What determines a probing run: :class:`ProbeSettings` (stored in the results file), its
probe families and targets, and the probes' split of the cache rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from infoprobe.probes.errors import ProbeInputError, SplitTooSmallError
from infoprobe.probes.families import FAMILY_NAMES, family
from infoprobe.probes.observed import Thresholds
from infoprobe.probes.settings import DEFAULT_ALPHAS, TrainingBudget
from infoprobe.probes.split import DEFAULT_FRACTIONS, TEST, check_fractions, make_split

PROBES = FAMILY_NAMES
"""The probe families' names (:mod:`infoprobe.probes.families`: the one registry every
command and setting checks against)."""
TARGETS = ("positions", "roles")


BUDGET_KEYS = {"epochs": "mlp_epochs", "patience": "mlp_patience"}
BUDGET_KEYS |= {"batch_size": "mlp_batch_size", "lr": "mlp_lr"}
"""Budget fields always written to the settings record, under these names."""


@dataclass(frozen=True)
class ProbeSettings:
    """Everything that determines a probing run (stored in the results file).

    Attributes:
        probe: a registered family (:mod:`infoprobe.probes.families`): ``linear`` (ridge,
            streamed), ``mlp`` (batched MLP probes), ``query`` (query-conditioned MLP:
            per-sample errors), ``critic`` (mixture density of x(s) given the state:
            per-sample V-information and p-values against mismatched pairs;
            :mod:`infoprobe.probes.critic`), or one of your own.
        targets: ``positions`` (x(s) for every data position) or ``roles`` (x at the key
            each head attends to ``ranks``-th most; linear probe only).
        alphas: ridge λ grid, chosen per probe on validation.
        fractions: (train, val, test) split fractions, assigned at random by sample.
        split_seed, shuffle_seed: seeds of the split and of the shuffled control.
        ranks: attention ranks of the role targets (1 = most attended key).
        block_size: samples per streamed block (``None``: about 64 MiB of states).
        thresholds: membership thresholds of the observed sets.
        mlp_hidden: hidden width of the MLP / query probes.
        budget: the training budget of a trained family, the same for every probe
            (:class:`~infoprobe.probes.batched_training.TrainingBudget`; a budget equal to
            ``TrainingBudget()`` counts as none given: the family's own default, e.g. the
            critic's lr 1e-2).
        device: torch device.
    """

    probe: str = field(default="linear", metadata={"cli": {"choices": PROBES}})
    targets: str = field(default="positions", metadata={"cli": {"choices": TARGETS}})
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    fractions: tuple[float, float, float] = field(
        default=DEFAULT_FRACTIONS, metadata={"cli": {"flags": ("--split",)}}
    )
    split_seed: int = field(default=0, metadata={"cli": {"flags": ("--seed",)}})
    shuffle_seed: int = 0
    ranks: tuple[int, ...] = (1, 2)
    block_size: int | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    mlp_hidden: int = field(default=64, metadata={"cli": {"flags": ("--hidden",)}})
    budget: TrainingBudget = field(default_factory=TrainingBudget)
    device: str = "cpu"

    def __post_init__(self) -> None:
        chosen = family(self.probe)
        if self.targets not in TARGETS:
            raise ProbeInputError(f"targets: expected one of {TARGETS}, got {self.targets!r}")
        if self.targets == "roles" and chosen.trained:
            raise ProbeInputError(
                f"targets 'roles': expected probe 'linear', got {self.probe!r} "
                "(role targets use the streamed ridge probes)"
            )
        ranks = tuple(self.ranks) if isinstance(self.ranks, tuple | list) else ()
        if not ranks or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1
                                for r in ranks):  # fmt: skip
            raise ProbeInputError(
                f"ranks: expected one or more integer attention ranks >= 1, got {self.ranks!r}"
            )
        try:
            check_fractions(self.fractions)
        except SplitTooSmallError as err:
            raise ProbeInputError(f"fractions: {err}") from None
        for name in ("block_size", "mlp_hidden"):
            value = getattr(self, name)
            if value is None and name == "block_size":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ProbeInputError(f"{name}: expected an integer >= 1, got {value!r}")
        if not isinstance(self.budget, TrainingBudget):
            raise ProbeInputError(
                f"budget: expected a TrainingBudget, got {type(self.budget).__name__} "
                f"{self.budget!r}"
            )
        if self.budget == TrainingBudget():  # none given: the family's own
            object.__setattr__(self, "budget", chosen.default_budget())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict. The budget is flattened into ``mlp_epochs``,
        ``mlp_patience``, ``mlp_batch_size`` and ``mlp_lr``; its weight decay, optimiser
        and seed are added (as ``mlp_<field>``) only where they differ from
        ``TrainingBudget()``'s, so records of default budgets keep one layout."""
        out = asdict(self)
        out["alphas"] = list(self.alphas)
        budget, device = out.pop("budget"), out.pop("device")
        out |= {name: budget[key] for key, name in BUDGET_KEYS.items()}
        default = asdict(TrainingBudget())
        out |= {
            f"mlp_{key}": value
            for key, value in budget.items()
            if key not in BUDGET_KEYS and value != default[key]
        }
        out["device"] = device
        return out

    def split(self, n: int) -> np.ndarray:
        """The train/val/test labels ``[n]`` of ``n`` cache rows (0/1/2), the one place the
        probes' split is computed (:class:`~infoprobe.probes.errors.SplitTooSmallError`
        when a part would be too small, or the test part below the critic's
        :func:`~infoprobe.probes.critic.check_test_split`)."""
        split = make_split(n, self.fractions, self.split_seed)
        family(self.probe).check_split(int((split == TEST).sum()), self.thresholds.q)
        return split

    def test_rows(self, n: int) -> np.ndarray:
        """The cache rows of the test split (flow and the report read these samples)."""
        return np.flatnonzero(self.split(n) == TEST)
