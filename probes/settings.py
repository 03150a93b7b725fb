"""The probes' settings as plain data, so a command line reads them without loading torch:
the training budget every batched probe gets (:class:`TrainingBudget`) and the ridge
probe's default penalty grid (:data:`DEFAULT_ALPHAS`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from infoprobe.probes.errors import ProbeInputError

if TYPE_CHECKING:
    import torch
    from torch import nn

DEFAULT_ALPHAS: tuple[float, ...] = tuple(float(a) for a in np.logspace(-3, 5, 17))
"""Default λ grid: 17 values, 10^-3 … 10^5 (unscaled penalty, as sklearn's ``alpha``)."""

OptimizerName = Literal["adam", "adamw"]


@dataclass(frozen=True)
class TrainingBudget:
    """The identical training budget every probe gets.

    ``epochs``: maximum passes over the training split. ``batch_size``:
    samples per optimiser step. ``lr``/``weight_decay``: optimiser settings
    (``weight_decay`` is L2 for Adam, decoupled for AdamW). ``patience``:
    epochs without a validation improvement before a probe stops updating its
    best weights. ``seed``: initial weights and minibatch order. ``restarts``: more starts
    a cell whose fit failed on its validation samples gets (:mod:`infoprobe.probes.refits`).
    """

    epochs: int = 100
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: OptimizerName = "adam"
    patience: int = 10
    seed: int = 0
    restarts: int = 2

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ProbeInputError(f"training budget: {name} must be an int >= 1, got {value!r}")
        if not isinstance(self.restarts, int | np.integer) or self.restarts < 0:
            raise ProbeInputError(
                f"training budget: restarts must be an int >= 0, got {self.restarts!r}"
            )
        if not self.lr > 0:
            raise ProbeInputError(f"training budget: lr must be > 0, got {self.lr!r}")
        if not self.weight_decay >= 0:
            raise ProbeInputError(
                f"training budget: weight_decay must be >= 0, got {self.weight_decay!r}"
            )
        if self.optimizer not in ("adam", "adamw"):
            raise ProbeInputError(
                f"training budget: optimizer must be 'adam' or 'adamw', got {self.optimizer!r}"
            )

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """The optimiser over ``params`` (Adam or AdamW with this budget's settings)."""
        import torch

        cls = torch.optim.Adam if self.optimizer == "adam" else torch.optim.AdamW
        # fused: one kernel for every parameter's update (about 5x faster steps on CPU)
        return cls(params, lr=self.lr, weight_decay=self.weight_decay, fused=True)
