"""Training settings and what a run returns: :class:`TrainConfig` (validated on
construction), :class:`TrainResult`, the errors training raises, and the checks that a
task, model configuration and training configuration fit together.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from infoprobe.base.errors import UserError
from infoprobe.model_config import MAX_SEED, ModelConfig
from infoprobe.tasks import Task

if TYPE_CHECKING:
    import torch

    from infoprobe.model import InfoFlowTransformer

DTYPES = ("float32", "float64")
"""``TrainConfig.dtype``'s names (:func:`torch_dtype` gives the torch dtype)."""


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a ``TrainConfig.dtype`` name selects."""
    import torch

    return getattr(torch, name)


class TrainingError(UserError):
    """A training configuration field has an invalid value."""


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; ``.result`` holds the last good state."""

    def __init__(self, step: int, result: TrainResult):
        super().__init__(
            f"non-finite training loss at step {step}; stopped. The last good model "
            f"(best validation NMSE {result.val_nmse:.3g}) is kept in .result"
        )
        self.step = step
        self.result = result


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A finite number (Python or numpy)."""
    return isinstance(value, int | float | np.number) and math.isfinite(value)


@dataclass(frozen=True)
class TrainConfig:
    """Training settings (paper: AdamW, lr 1e-3, wd 1e-2, cosine, fresh samples).

    Args:
        steps: optimiser steps.
        batch_size: samples per step.
        lr: peak learning rate (after ``warmup`` linear steps, cosine decay to 0).
        weight_decay: AdamW weight decay.
        warmup: linear warm-up steps.
        grad_clip: max global gradient norm (0 disables clipping).
        seed: model initialisation and data streams.
        n_train: ``None`` draws fresh samples every step; an int fixes a training set of
            that many samples, drawn once.
        n_val: validation samples, drawn once; scored every ``eval_every`` steps, and the
            model kept is the one with the lowest validation NMSE.
        n_test: test samples, drawn once from a stream of their own; scored once, on the
            model kept.
        eval_every: steps between validation evaluations.
        patience: stop after this many evaluations without improvement (``None``: never).
        device: torch device (``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``).
        dtype: ``"float32"`` (default) or ``"float64"`` for the weights, data and
            arithmetic (float64: a check of numerical limits, several times slower).
        compile: run the training step's forward and backward through ``torch.compile``
            (falls back to eager, with a warning, where the platform cannot compile).
            Results equal eager ones within float tolerance; compilation costs tens of
            seconds once per process, so it pays off for runs of thousands of steps.
    """

    steps: int = 10_000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup: int = 100
    grad_clip: float = 1.0
    seed: int = 0
    n_train: int | None = None
    n_val: int = 4096
    n_test: int = 4096
    eval_every: int = 250
    patience: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    compile: bool = False

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> TrainingError:
            return TrainingError(
                f"TrainConfig.{name} must be {expected}, got {getattr(self, name)!r}"
            )

        for name in ("steps", "batch_size", "n_val", "n_test", "eval_every"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        if not is_int(self.warmup) or self.warmup < 0:
            raise bad("warmup", "an integer >= 0")
        if not is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise bad("seed", "an integer in 0..2**63-1")
        if not is_finite(self.lr) or not self.lr > 0:
            raise bad("lr", "a finite number > 0")
        for name in ("weight_decay", "grad_clip"):
            if not is_finite(getattr(self, name)) or getattr(self, name) < 0:
                raise bad(name, "a finite number >= 0")
        if self.patience is not None and (not is_int(self.patience) or self.patience < 1):
            raise bad("patience", "None or an integer >= 1")
        if self.n_train is not None and (not is_int(self.n_train) or self.n_train < 1):
            raise bad("n_train", "None or an integer >= 1")
        if self.n_train is not None and self.n_train < self.batch_size:
            raise TrainingError(
                f"TrainConfig.n_train={self.n_train} is smaller than batch_size={self.batch_size}"
            )
        if self.dtype not in DTYPES:
            raise bad("dtype", f"one of {list(DTYPES)}")
        if not isinstance(self.compile, bool | np.bool_):
            raise bad("compile", "true or false")
        if self.device != "cpu":  # any other name is torch's to judge
            import torch

            try:
                torch.device(self.device)
            except (RuntimeError, ValueError, TypeError):
                raise bad("device", "a torch device such as 'cpu', 'cuda' or 'cuda:0'") from None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class TrainResult:
    """What :func:`train` returns: the best model (by validation NMSE) and its record."""

    model: InfoFlowTransformer
    history: list[dict] = field(default_factory=list)
    val_nmse: float = math.inf
    test_nmse: float = math.nan
    best_step: int = 0
    seconds: float = 0.0
    stopped: str = "completed"

    def metrics(self) -> dict[str, Any]:
        from infoprobe.train.convergence import convergence

        return {
            "val_nmse": self.val_nmse,
            "test_nmse": self.test_nmse,
            "best_step": self.best_step,
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
            "convergence": convergence(self.history),
        }


def check_task_fits(task: Task, cfg: ModelConfig) -> None:
    """Raise :class:`TrainingError` if the model's input shape does not fit the task."""
    for name, expected, actual in (
        ("n_ctx (T)", task.T, cfg.n_ctx),
        ("d_in (d)", task.d, cfg.d_in),
        ("d_out", task.d_out, cfg.d_out),
    ):
        if expected != actual:
            raise TrainingError(
                f"model config field {name} is {actual} but task {task.name} needs {expected}"
            )


def check_arguments(task: Task, model_cfg: ModelConfig, cfg: TrainConfig) -> None:
    """TypeError naming the argument unless ``task`` is a task (a :class:`Task` or an
    object with its ``sample``, ``T`` and ``d``), ``model_cfg`` a :class:`ModelConfig`
    and ``cfg`` a :class:`TrainConfig`."""
    if not all(hasattr(task, name) for name in ("sample", "T", "d")):
        raise TypeError(f"task: expected a Task, got {type(task).__name__}")
    for name, value, kind in (("model_cfg", model_cfg, ModelConfig), ("cfg", cfg, TrainConfig)):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected a {kind.__name__}, got {type(value).__name__}")


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to 1 over ``cfg.warmup`` steps, then cosine decay to 0."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def is_eval_step(step: int, cfg: TrainConfig) -> bool:
    """Whether 0-based ``step`` ends with a validation evaluation."""
    return (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps
