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
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.config import (
    NonFiniteLossError,
    TrainConfig,
    TrainResult,
    check_arguments,
    check_task_fits,
    is_eval_step,
    lr_factor,
    torch_dtype,
)
from infoprobe.train.memory import check_memory_fits, eval_batch_size
from infoprobe.train.state import (
    StateFile,
    optimiser_tensors,
    prefixed,
    restore_optimiser,
    restore_rngs,
    rng_document,
    unprefixed,
)
from infoprobe.train.state_check import check_rngs, check_run_state
from infoprobe.train.threads import TrainingThreads

TRAIN_STREAM, VAL_STREAM, TEST_STREAM = 0, 1, 2


def nmse(pred: torch.Tensor, y: torch.Tensor) -> float:
    """MSE / Var(y) pooled over outputs: Σ(pred−y)² / Σ(y−ȳ)²; pred, y [n, d_out]."""
    pred, y = pred.double(), y.double()
    return float(((pred - y) ** 2).sum() / ((y - y.mean(0)) ** 2).sum())


def sample_tensors(
    task: Task, n: int, rng: np.random.Generator, device: str, dtype: str = "float32"
) -> tuple[torch.Tensor, torch.Tensor]:
    """n samples of ``task`` as tensors on ``device``: x [n, T, d], y [n, d_out]."""
    x, y = task.sample(n, rng)
    as_tensor = partial(torch.as_tensor, device=device, dtype=torch_dtype(dtype))
    return as_tensor(x), as_tensor(y)


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


def new_model(task: Task, model_cfg: ModelConfig, cfg: TrainConfig) -> InfoFlowTransformer:
    """A fresh model initialised from ``cfg.seed``, on ``cfg.device`` in ``cfg.dtype``.
    Refuses a model that does not fit the task or whose training batch cannot fit in
    the device's memory."""
    check_task_fits(task, model_cfg)
    check_memory_fits(model_cfg, cfg)
    model = InfoFlowTransformer(model_cfg, seed=cfg.seed)
    return model.to(device=cfg.device, dtype=torch_dtype(cfg.dtype))


def setup_training(
    task: Task, model_cfg: ModelConfig, cfg: TrainConfig
) -> tuple[InfoFlowTransformer, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """A fresh model (:func:`new_model`), its AdamW optimiser and its warm-up + cosine
    schedule."""
    model = new_model(task, model_cfg, cfg)
    # foreach: the same arithmetic as the per-parameter loop torch picks on a CPU (equal
    # bit for bit), in a few batched kernels instead of about 15 small ops per parameter
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True
    )
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


class EvalTracker:
    """One run's evaluation bookkeeping: history, best validation NMSE and the best
    state, early stopping (``cfg.patience``)."""

    def __init__(self, cfg: TrainConfig, result: TrainResult, state: dict[str, torch.Tensor]):
        self.cfg, self.result = cfg, result
        self.best_state, self.evals_since_best = state, 0

    def to_dict(self) -> dict[str, Any]:
        """The bookkeeping as JSON (the best state's tensors travel apart)."""
        result = self.result
        return {
            "history": result.history,
            "val_nmse": result.val_nmse,
            "best_step": result.best_step,
            "stopped": result.stopped,
            "evals_since_best": self.evals_since_best,
        }

    def restore(self, document: dict[str, Any], best_state: dict[str, torch.Tensor]) -> None:
        """Take back what :meth:`to_dict` (and the best state) recorded."""
        result = self.result
        result.history = [dict(h) for h in document["history"]]
        val = document["val_nmse"]
        result.val_nmse = math.inf if val is None else float(val)
        result.best_step, result.stopped = int(document["best_step"]), document["stopped"]
        self.evals_since_best = int(document["evals_since_best"])
        self.best_state = {k: v.clone() for k, v in best_state.items()}

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


def run_state(
    model: InfoFlowTransformer,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    tracker: EvalTracker,
    rng: np.random.Generator,
    done: int,
    seconds: float,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One run's resumable state after ``done`` steps (:mod:`infoprobe.train.state`):
    its tensors and its JSON document."""
    opt_tensors, groups = optimiser_tensors(opt)
    tensors = {
        **prefixed("model.", model.state_dict()),
        **prefixed("best.", tracker.best_state),
        **opt_tensors,
        "rng.torch": torch.get_rng_state(),
    }
    document = {
        "step": done,
        "seconds": seconds,
        "tracker": tracker.to_dict(),
        "optimiser": groups,
        "scheduler": sched.state_dict(),
        "rngs": rng_document(rng),
    }
    return tensors, document


def restore_run(
    saved: tuple[dict[str, torch.Tensor], dict[str, Any]],
    model: InfoFlowTransformer,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    tracker: EvalTracker,
    rng: np.random.Generator,
    path: Path,
) -> tuple[int, float]:
    """Put a run back where :func:`run_state` left it (its state at ``path`` checked
    first, :func:`~infoprobe.train.state_check.check_run_state`); return (steps done,
    seconds)."""
    step = check_run_state(path, saved, model, opt, sched, tracker.cfg)
    tensors, document = saved
    check_rngs(path, "rngs", document.get("rngs"), partial(restore_rngs, rng=rng))
    model.load_state_dict(unprefixed("model.", tensors))
    restore_optimiser(opt, tensors, document["optimiser"])
    sched.load_state_dict(document["scheduler"])
    tracker.restore(document["tracker"], unprefixed("best.", tensors))
    torch.set_rng_state(tensors["rng.torch"])
    return step, float(document["seconds"])


def train(
    task: Task,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    threads: int | str | None = None,
    state: StateFile | None = None,
) -> TrainResult:
    """Train an :class:`InfoFlowTransformer` on ``task``; return the best model.

    ``progress`` shows a tqdm bar; ``log`` (if given) also receives one line per
    evaluation, for callers that cannot show a bar (parallel runs). ``threads``: torch
    CPU threads for the run (:class:`TrainingThreads`; ``"auto"`` follows the cores
    other work leaves free, re-checked at every evaluation). ``state``: where the run
    keeps its resumable state (:class:`~infoprobe.train.state.StateFile`): it continues
    from an existing one, writes one every ``state.resume.every`` steps, stops with
    :class:`~infoprobe.train.state.BudgetStop` at the first state past its budget, and
    removes it when the run ends.
    Raises :class:`NonFiniteLossError` (with the last good state) if the loss diverges.
    """
    check_arguments(task, model_cfg, cfg)
    model, opt, sched = setup_training(task, model_cfg, cfg)
    data = data_streams(task, cfg)
    standardise_targets(model, data.y_val)
    forward = compiled(model, cfg.compile)
    result = TrainResult(model=model)
    tracker = EvalTracker(cfg, result, copy.deepcopy(model.state_dict()))
    saved = state.load() if state is not None else None
    first, spent = (
        (0, 0.0)
        if saved is None
        else restore_run(saved, model, opt, sched, tracker, data.train_rng, state.path)
    )
    start = time.perf_counter() - spent
    bar = tqdm(range(first, cfg.steps), desc=f"train {task.name}", disable=not progress,
               mininterval=1.0, initial=first, total=cfg.steps)  # fmt: skip
    cpu = TrainingThreads(threads)
    try:
        for step in bar:
            x, y = draw_batch(task, cfg, data.train_rng, data.fixed)
            loss = batch_loss(model, x, y, forward)
            if not torch.isfinite(loss):
                model.load_state_dict(tracker.best_state)
                result.stopped = f"non-finite loss at step {step}"
                result.seconds = time.perf_counter() - start
                if state is not None:
                    state.remove()
                raise NonFiniteLossError(step, result)
            optimiser_step(model, opt, sched, loss, cfg)
            if is_eval_step(step, cfg):
                val, train_loss = evaluate(model, data.x_val, data.y_val), loss.item()
                bar.set_postfix(loss=f"{train_loss:.3g}", val_nmse=f"{val:.3g}")
                state_now = partial(copy.deepcopy, model.state_dict())
                if tracker.record(step, train_loss, val, state_now, log):
                    break
                cpu.check()
            if state is not None and state.due(step + 1, cfg.steps):
                seconds = time.perf_counter() - start
                state.save(*run_state(model, opt, sched, tracker, data.train_rng, step + 1,
                                      seconds))  # fmt: skip
                state.stop(step + 1, cfg.steps)
        result = finish(task, cfg, tracker, start)
        if state is not None:
            state.remove()
        return result
    finally:
        cpu.close()
