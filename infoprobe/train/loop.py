"""Training: a plain loop you can read top to bottom (AdamW, warm-up + cosine, clipping).

NMSE = MSE / Var(y), pooled over the output coordinates (= 1 − R² variance-weighted).
The network trains on standardised targets, so its training loss is already an NMSE.
Data streams are seeded from ``TrainConfig.seed`` (see docs/conventions.md): training
``default_rng([seed, 0])``, validation ``[seed, 1]``, test ``[seed, 2]``; the model is
initialised from ``seed`` with a local generator, so a run is deterministic on CPU.
"""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from infoprobe.base.atomic import check_writable, refuse_existing
from infoprobe.checkpoint import FORMAT as CHECKPOINT_FORMAT
from infoprobe.checkpoint import save_checkpoint
from infoprobe.model import MAX_SEED, InfoFlowTransformer, ModelConfig
from infoprobe.tasks import Task

TRAIN_STREAM, VAL_STREAM, TEST_STREAM = 0, 1, 2
EVAL_BATCH = 4096
"""Samples per evaluation forward pass, unless one pass would exceed the budget below."""
EVAL_BUDGET_BYTES = 1 << 30
"""Activation memory one evaluation pass may take (smaller batches for long contexts)."""
DTYPES = {"float32": torch.float32, "float64": torch.float64}
"""``TrainConfig.dtype`` names and the torch dtypes they select."""


class TrainingError(ValueError):
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
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
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise bad("warmup", "an integer >= 0")
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise bad("seed", "an integer in 0..2**63-1")
        if not _is_finite(self.lr) or not self.lr > 0:
            raise bad("lr", "a finite number > 0")
        for name in ("weight_decay", "grad_clip"):
            if not _is_finite(getattr(self, name)) or getattr(self, name) < 0:
                raise bad(name, "a finite number >= 0")
        if self.patience is not None and (not _is_int(self.patience) or self.patience < 1):
            raise bad("patience", "None or an integer >= 1")
        if self.n_train is not None and (not _is_int(self.n_train) or self.n_train < 1):
            raise bad("n_train", "None or an integer >= 1")
        if self.n_train is not None and self.n_train < self.batch_size:
            raise TrainingError(
                f"TrainConfig.n_train={self.n_train} is smaller than batch_size={self.batch_size}"
            )
        if self.dtype not in DTYPES:
            raise bad("dtype", f"one of {sorted(DTYPES)}")
        if not isinstance(self.compile, bool | np.bool_):
            raise bad("compile", "true or false")
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
        return {
            "val_nmse": self.val_nmse,
            "test_nmse": self.test_nmse,
            "best_step": self.best_step,
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
        }


def nmse(pred: torch.Tensor, y: torch.Tensor) -> float:
    """MSE / Var(y) pooled over outputs: Σ(pred−y)² / Σ(y−ȳ)²; pred, y [n, d_out]."""
    pred, y = pred.double(), y.double()
    return float(((pred - y) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())


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


def sample_tensors(
    task: Task, n: int, rng: np.random.Generator, device: str, dtype: str = "float32"
) -> tuple[torch.Tensor, torch.Tensor]:
    """n samples of ``task`` as tensors on ``device``: x [n, T, d], y [n, d_out]."""
    x, y = task.sample(n, rng)
    as_tensor = partial(torch.as_tensor, device=device, dtype=DTYPES[dtype])
    return as_tensor(x), as_tensor(y)


def activation_floats(cfg: ModelConfig, *, training: bool) -> int:
    """About how many float32 activations one sample keeps alive in a pass of the model.

    Per block: attention scores and pattern ``2·h·(T+1)²``, q, k, v, z ``4·(T+1)·h·n``,
    residual stream states ``4·(T+1)·E`` and the FFN ``2·(T+1)·d_mlp``. Training keeps
    every block's activations for the backward pass, which needs as many again; inference
    holds one block at a time. An estimate for refusing sizes that cannot fit, not a
    measurement.
    """
    p = cfg.n_ctx + 1
    blocks = [
        2 * h * p * p + 4 * p * h * cfg.d_head_of(b) + 4 * p * cfg.d_model + 2 * p * cfg.d_mlp
        for b, h in enumerate(cfg.heads)
    ]
    inputs = p * cfg.d_in
    return 2 * sum(blocks) + inputs if training else max(blocks) + inputs


def eval_batch_size(cfg: ModelConfig) -> int:
    """Samples per evaluation pass: :data:`EVAL_BATCH`, fewer if one pass would take more
    than :data:`EVAL_BUDGET_BYTES` (long contexts: attention grows as (T+1)²)."""
    per_sample = 4 * activation_floats(cfg, training=False)
    return max(1, min(EVAL_BATCH, EVAL_BUDGET_BYTES // per_sample))


def device_memory_bytes(device: str | torch.device) -> int | None:
    """Total memory of ``device`` (physical RAM for the CPU); None where unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.get_device_properties(dev.index or 0).total_memory)
    if dev.type == "cpu":
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (AttributeError, ValueError, OSError):
            return None
    return None


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def check_memory_fits(model_cfg: ModelConfig, cfg: TrainConfig, members: int = 1) -> None:
    """Raise :class:`TrainingError` if one training batch plus the held data sets cannot
    fit in the memory of ``cfg.device`` (see :func:`activation_floats`), instead of
    failing with an out-of-memory error part-way. ``members``: models trained together
    as one batched ensemble (each with its own batch and data sets)."""
    limit = device_memory_bytes(cfg.device)
    if limit is None:
        return
    batch = 4 * members * cfg.batch_size * activation_floats(model_cfg, training=True)
    samples = members * (cfg.n_val + cfg.n_test + (cfg.n_train or 0) + cfg.batch_size)
    data = 4 * samples * (model_cfg.n_ctx * model_cfg.d_in + model_cfg.d_out)
    evaluation = 4 * eval_batch_size(model_cfg) * activation_floats(model_cfg, training=False)
    if batch + data + evaluation > limit:
        raise TrainingError(
            f"TrainConfig.batch_size: {members} training batch(es) of {cfg.batch_size} samples at "
            f"T={model_cfg.n_ctx} with heads {list(model_cfg.heads)} needs about "
            f"{_gb(batch)} (attention keeps [batch, heads, T+1, T+1] per layer) plus "
            f"{_gb(data + evaluation)} for the data sets and evaluation, more than the "
            f"{_gb(limit)} of memory of device {cfg.device!r}; lower T, the batch size, "
            "n_val/n_test or the heads"
        )


@torch.inference_mode()
def evaluate(
    model: InfoFlowTransformer, x: torch.Tensor, y: torch.Tensor, batch: int | None = None
) -> float:
    """NMSE of ``model`` on x [n, T, d], y [n, d_out], evaluated in batches
    (default: :func:`eval_batch_size` samples per pass)."""
    batch = batch or eval_batch_size(model.cfg)
    was_training = model.training
    model.eval()
    pred = torch.cat([model(x[i : i + batch]) for i in range(0, len(x), batch)])
    model.train(was_training)
    return nmse(pred, y)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to 1 over ``cfg.warmup`` steps, then cosine decay to 0."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def new_model(task: Task, model_cfg: ModelConfig, cfg: TrainConfig) -> InfoFlowTransformer:
    """A fresh model initialised from ``cfg.seed``, on ``cfg.device`` in ``cfg.dtype``.
    Refuses a model that does not fit the task or whose training batch cannot fit in
    the device's memory."""
    check_task_fits(task, model_cfg)
    check_memory_fits(model_cfg, cfg)
    model = InfoFlowTransformer(model_cfg, seed=cfg.seed)
    return model.to(device=cfg.device, dtype=DTYPES[cfg.dtype])


def setup_training(
    task: Task, model_cfg: ModelConfig, cfg: TrainConfig
) -> tuple[InfoFlowTransformer, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """A fresh model (:func:`new_model`), its AdamW optimiser and its warm-up + cosine
    schedule."""
    model = new_model(task, model_cfg, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    return model, opt, sched


@dataclass
class DataStreams:
    """One run's data: the validation set x [n_val, T, d], y [n_val, d_out], the training
    stream's generator and, with ``n_train``, the fixed training set."""

    x_val: torch.Tensor
    y_val: torch.Tensor
    train_rng: np.random.Generator
    fixed: tuple[torch.Tensor, torch.Tensor] | None


def data_streams(task: Task, cfg: TrainConfig) -> DataStreams:
    """The seeded streams of a run (module docstring): validation ``[seed, 1]``,
    training ``[seed, 0]``."""
    sample = partial(sample_tensors, task, device=cfg.device, dtype=cfg.dtype)
    x_val, y_val = sample(cfg.n_val, np.random.default_rng([cfg.seed, VAL_STREAM]))
    train_rng = np.random.default_rng([cfg.seed, TRAIN_STREAM])
    fixed = sample(cfg.n_train, train_rng) if cfg.n_train else None
    return DataStreams(x_val, y_val, train_rng, fixed)


def standardise_targets(model: InfoFlowTransformer, y_val: torch.Tensor) -> None:
    """Set the readout's target mean and scale [d_out] from the validation targets
    (held out from training, no test peek)."""
    model.readout.y_mean.copy_(y_val.mean(0))
    model.readout.y_scale.copy_(y_val.std(0).clamp_min(1e-8))


def draw_batch(
    task: Task,
    cfg: TrainConfig,
    rng: np.random.Generator,
    fixed: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch x [b, T, d], y [b, d_out]: fresh samples, or drawn with
    replacement from the fixed training set ``fixed``."""
    if fixed is None:
        return sample_tensors(task, cfg.batch_size, rng, cfg.device, cfg.dtype)
    idx = torch.as_tensor(rng.integers(0, len(fixed[0]), cfg.batch_size), device=cfg.device)
    return fixed[0][idx], fixed[1][idx]


def batch_loss(
    model: InfoFlowTransformer,
    x: torch.Tensor,
    y: torch.Tensor,
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Mean squared error in standardised target units (an NMSE estimate), a scalar.
    ``forward`` (default: the model itself) may be a compiled version of the model."""
    pred = (forward or model)(x)
    return (((pred - y) / model.readout.y_scale) ** 2).mean()


def optimiser_step(
    model: InfoFlowTransformer,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    loss: torch.Tensor,
    cfg: TrainConfig,
) -> None:
    """Backward, clip the global gradient norm to ``cfg.grad_clip``, step, schedule."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    sched.step()


def compiled(fn: Callable, enabled: bool, what: str = "training step") -> Callable:
    """``torch.compile(fn)`` when ``enabled``, else ``fn``. Compilation happens at the
    first call; if it fails there (no C++ compiler, an unsupported platform), a warning
    names the error and ``fn`` runs eagerly from then on."""
    if not enabled:
        return fn
    state = {"call": torch.compile(fn), "first": True}

    def call(*args: Any) -> Any:
        if not state["first"]:
            return state["call"](*args)
        state["first"] = False
        try:
            return state["call"](*args)
        except Exception as err:  # any compiler failure means "run eagerly"
            warnings.warn(
                f"torch.compile of the {what} failed ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); running eagerly",
                RuntimeWarning,
                stacklevel=2,
            )
            state["call"] = fn
            return fn(*args)

    return call


def affinity_cores() -> int:
    """CPU cores this process may run on (its affinity set; all cores where unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def free_cores(own_load: float = 0.0) -> int:
    """Cores of this process's affinity set that other work leaves free: the affinity
    count minus the 1-minute load average, less ``own_load`` (this process's own mean
    CPU use, which the load average counts too), rounded, at least 1."""
    cores = affinity_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    others = max(0.0, load - own_load)
    return max(1, min(cores, math.floor(cores - others + 0.5)))


class TrainingThreads:
    """Torch CPU threads for one training run; the caller's count is restored by
    :meth:`close`.

    ``threads``: None leaves torch's setting alone; an int sets that many; ``"auto"``
    sets :func:`free_cores` (at most the affinity set) now and again at every
    :meth:`check`, taking this process's own CPU use since the last check out of the
    load. Threads beyond the free cores cost more than they give: each parallel kernel
    ends at a barrier where OpenMP threads spin while a descheduled one holds them up.
    """

    def __init__(self, threads: int | str | None):
        if threads is not None and threads != "auto" and not (_is_int(threads) and threads >= 1):
            raise TrainingError(f"threads must be None, 'auto' or an integer >= 1, got {threads!r}")
        self.auto, self.old = threads == "auto", torch.get_num_threads()
        if self.auto:
            torch.set_num_threads(free_cores())
            self.wall, self.cpu = time.perf_counter(), time.process_time()
        elif threads is not None:
            torch.set_num_threads(int(threads))

    def check(self) -> None:
        """With ``"auto"``: set the threads to the cores free now."""
        if not self.auto:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        own = max(0.0, cpu - self.cpu) / max(wall - self.wall, 1e-9)
        self.wall, self.cpu = wall, cpu
        if (n := free_cores(own)) != torch.get_num_threads():
            torch.set_num_threads(n)

    def close(self) -> None:
        torch.set_num_threads(self.old)


def is_eval_step(step: int, cfg: TrainConfig) -> bool:
    """Whether 0-based ``step`` ends with a validation evaluation."""
    return (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps


class EvalTracker:
    """One run's evaluation bookkeeping: history, best validation NMSE and the best
    state, early stopping (``cfg.patience``)."""

    def __init__(self, cfg: TrainConfig, result: TrainResult, state: dict[str, torch.Tensor]):
        self.cfg, self.result = cfg, result
        self.best_state, self.evals_since_best = state, 0

    def record(
        self,
        step: int,
        train_loss: float,
        val: float,
        state: Callable[[], dict[str, torch.Tensor]],
        log: Callable[[str], None] | None = None,
    ) -> bool:
        """Record the evaluation after 0-based ``step``; ``state()`` gives a copy of the
        weights, taken only when they are the best so far. True: stop early now."""
        cfg, result = self.cfg, self.result
        lr = cfg.lr * lr_factor(step + 1, cfg)
        result.history.append(
            {"step": step + 1, "train_loss": train_loss, "val_nmse": val, "lr": lr}
        )
        if log is not None:
            log(
                f"step {step + 1}/{cfg.steps}: train loss {train_loss:.3g}, "
                f"validation NMSE {val:.3g}"
            )
        if val < result.val_nmse:
            result.val_nmse, result.best_step = val, step + 1
            self.best_state, self.evals_since_best = state(), 0
            return False
        self.evals_since_best += 1
        if cfg.patience is not None and self.evals_since_best >= cfg.patience:
            result.stopped = f"early stopping at step {step + 1}"
            return True
        return False


def finish(task: Task, cfg: TrainConfig, tracker: EvalTracker, start: float) -> TrainResult:
    """Load the best state into the result's model, score it on the test stream
    ``[seed, 2]`` and record the time since ``start``."""
    result = tracker.result
    result.model.load_state_dict(tracker.best_state)
    result.model.eval()
    test_rng = np.random.default_rng([cfg.seed, TEST_STREAM])
    result.test_nmse = evaluate(
        result.model, *sample_tensors(task, cfg.n_test, test_rng, cfg.device, cfg.dtype)
    )
    result.seconds = time.perf_counter() - start
    return result


def check_arguments(task: Task, model_cfg: ModelConfig, cfg: TrainConfig) -> None:
    """TypeError naming the argument unless ``task`` is a task (a :class:`Task` or an
    object with its ``sample``, ``T`` and ``d``), ``model_cfg`` a :class:`ModelConfig`
    and ``cfg`` a :class:`TrainConfig`."""
    if not all(hasattr(task, name) for name in ("sample", "T", "d")):
        raise TypeError(f"task: expected a Task, got {type(task).__name__}")
    for name, value, kind in (("model_cfg", model_cfg, ModelConfig), ("cfg", cfg, TrainConfig)):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected a {kind.__name__}, got {type(value).__name__}")


def train(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    threads: int | str | None = None,
) -> TrainResult:
    """Train an :class:`InfoFlowTransformer` on ``task``; return the best model.

    ``progress`` shows a tqdm bar; ``log`` (if given) also receives one line per
    evaluation, for callers that cannot show a bar (parallel runs). ``threads``: torch
    CPU threads for the run (:class:`TrainingThreads`; ``"auto"`` follows the cores
    other work leaves free, re-checked at every evaluation).
    Raises :class:`NonFiniteLossError` (with the last good state) if the loss diverges.
    """
    check_arguments(task, model_cfg, cfg)
    model, opt, sched = setup_training(task, model_cfg, cfg)
    data = data_streams(task, cfg)
    standardise_targets(model, data.y_val)
    forward = compiled(model, cfg.compile)
    result = TrainResult(model=model)
    tracker = EvalTracker(cfg, result, copy.deepcopy(model.state_dict()))
    start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=f"train {task.name}", disable=not progress, mininterval=1.0)
    cpu = TrainingThreads(threads)
    try:
        for step in bar:
            x, y = draw_batch(task, cfg, data.train_rng, data.fixed)
            loss = batch_loss(model, x, y, forward)
            if not torch.isfinite(loss):
                model.load_state_dict(tracker.best_state)
                result.stopped = f"non-finite loss at step {step}"
                result.seconds = time.perf_counter() - start
                raise NonFiniteLossError(step, result)
            optimiser_step(model, opt, sched, loss, cfg)
            if is_eval_step(step, cfg):
                val, train_loss = evaluate(model, data.x_val, data.y_val), loss.item()
                bar.set_postfix(loss=f"{train_loss:.3g}", val_nmse=f"{val:.3g}")
                state = partial(copy.deepcopy, model.state_dict())
                if tracker.record(step, train_loss, val, state, log):
                    break
                cpu.check()
        return finish(task, cfg, tracker, start)
    finally:
        cpu.close()


def check_output_folder(path: Path, overwrite: bool = False, what: str = "checkpoint") -> None:
    """Refuse, before any work, an output folder that could not be written at the end.

    ``path`` must not exist (unless ``overwrite``), and its nearest existing ancestor
    must be a writable folder (missing folders in between are created when writing), so
    a path under a regular file or in a read-only folder fails now, not after training.
    """
    refuse_existing(path, overwrite, what, kind=CHECKPOINT_FORMAT)
    check_writable(path, f"{what} folder")


def train_and_save(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    out,
    *,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    threads: int | str | None = None,
) -> TrainResult:
    """Train (``threads``: see :func:`train`), then write the checkpoint folder ``out``
    (refused up front if it exists or cannot be written: see :func:`check_output_folder`).

    If the loss diverges, the last good model is still saved (its metrics record where
    training stopped) before :class:`NonFiniteLossError` propagates.
    """

    def save(result: TrainResult) -> None:
        save_checkpoint(
            out,
            result.model,
            task,
            train_config=cfg.to_dict(),
            history=result.history,
            metrics=result.metrics(),
            overwrite=overwrite,
        )

    check_output_folder(Path(out), overwrite)
    try:
        result = train(task, model_cfg, cfg, progress=progress, log=log, threads=threads)
    except NonFiniteLossError as err:
        save(err.result)
        raise
    save(result)
    return result
