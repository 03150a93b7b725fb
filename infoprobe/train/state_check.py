"""A resumable state is an input: its contents checked against the run that resumes it.

A state's ``settings`` block says which run wrote it (:mod:`infoprobe.train.state`); this
module checks the rest before anything of it is used, since states travel in git and can
be edited: every tensor's name, dtype and shape against the tensors the run itself would
write, finite values, the step within the run, a history with one evaluation at every
evaluation step so far (each with the learning rate the schedule gives there), the bests
and the early-stopping count as that history makes them, and the optimiser's and the
scheduler's settings and position as the run's own. Any mismatch is one
:class:`~infoprobe.train.state.StateMismatchError` naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from infoprobe.train.config import TrainConfig, is_eval_step, lr_factor
from infoprobe.train.state import StateMismatchError

__all__ = [
    "check_group_state",
    "check_history",
    "check_rngs",
    "check_run_state",
    "check_schedule",
    "check_step",
    "check_tensors",
    "evaluation_steps",
    "optimiser_template",
    "scheduled_lr",
]


def _refuse(path: Path, field: str, found: Any, wanted: str) -> StateMismatchError:
    text = repr(found)
    text = text if len(text) <= 80 else text[:77] + "..."
    return StateMismatchError(
        f"{path}: field {field!r} is {text}, expected {wanted}: not a state this run wrote "
        "(edited or damaged); pass --restart to start over"
    )


def check_tensors(
    path: Path, tensors: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> None:
    """Every tensor of ``expected`` (name -> a tensor of the wanted dtype and shape) in
    ``tensors`` with that dtype and shape, finite where floating; no other tensor."""
    for name, want in expected.items():
        got = tensors.get(name)
        if got is None:
            raise _refuse(
                path, name, "(absent)", f"a {want.dtype} tensor of shape {list(want.shape)}"
            )
        if got.dtype != want.dtype or got.shape != want.shape:
            raise _refuse(
                path, name, f"{got.dtype} {list(got.shape)}", f"{want.dtype} {list(want.shape)}"
            )
        if got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise _refuse(path, name, "a tensor with NaN or Inf", "finite values")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise _refuse(path, extra[0], "present", "no such tensor in this run's state")


def optimiser_template(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The tensors an AdamW optimiser's state holds after a step (``opt.<i>.<key>``, as
    :func:`~infoprobe.train.state.optimiser_tensors` writes them)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    out: dict[str, torch.Tensor] = {}
    for index, p in enumerate(params):
        out[f"opt.{index}.step"] = torch.zeros((), dtype=torch.float32)
        out[f"opt.{index}.exp_avg"] = torch.empty_like(p, device="cpu")
        out[f"opt.{index}.exp_avg_sq"] = torch.empty_like(p, device="cpu")
    return out


def check_step(path: Path, step: Any, steps: int) -> int:
    """The state's step: an int with 0 < step < steps (a state is written only while the
    run has steps left)."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 < step < steps:
        raise _refuse(path, "step", step, f"an int in [1, {steps - 1}] (the run has {steps} steps)")
    return step


def _close(a: Any, b: float) -> bool:
    return (
        isinstance(a, int | float)
        and not isinstance(a, bool)
        and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)
    )


def check_history(
    path: Path,
    where: str,
    tracker: Any,
    *,
    eval_steps: Sequence[int],
    lr_at: Any,
    finished: bool = False,
) -> None:
    """An evaluation tracker's record (``tracker``, at ``where`` in the document): one
    entry per step of ``eval_steps`` (``finished``: a prefix of them, at least one), each
    with a finite validation NMSE and the learning rate ``lr_at(step)``; the best NMSE,
    its step and the evaluations since it as the history makes them."""
    if not isinstance(tracker, dict) or not isinstance(tracker.get("history"), list):
        raise _refuse(path, f"{where}.history", tracker, "a list of evaluations")
    history = tracker["history"]
    if not all(isinstance(h, dict) for h in history):
        raise _refuse(path, f"{where}.history", history, "a list of evaluations")
    steps = [h.get("step") for h in history]
    wanted = list(eval_steps)[: len(steps)] if finished else list(eval_steps)
    if steps != wanted or (finished and not steps):
        raise _refuse(path, f"{where}.history", steps, f"evaluations at steps {wanted}")
    for i, h in enumerate(history):
        for key in ("val_nmse", "train_loss"):
            if not _finite(h.get(key)):
                raise _refuse(path, f"{where}.history[{i}].{key}", h.get(key), "a finite number")
        if not _close(h.get("lr"), lr_at(h["step"])):
            raise _refuse(path, f"{where}.history[{i}].lr", h.get("lr"), repr(lr_at(h["step"])))
    best, best_step, since = None, 0, 0
    for h in history:
        if best is None or h["val_nmse"] < best:
            best, best_step, since = h["val_nmse"], h["step"], 0
        else:
            since += 1
    if tracker.get("val_nmse") != best:
        raise _refuse(
            path, f"{where}.val_nmse", tracker.get("val_nmse"), f"{best!r} (the history's best)"
        )
    for key, value in (("best_step", best_step), ("evals_since_best", since)):
        if tracker.get(key) != value:
            raise _refuse(path, f"{where}.{key}", tracker.get(key), f"{value} (from the history)")
    if not finished and tracker.get("stopped") != "completed":
        raise _refuse(
            path, f"{where}.stopped", tracker.get("stopped"), "'completed' (still training)"
        )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_schedule(
    path: Path,
    groups: Any,
    scheduler: Any,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    step: int,
) -> None:
    """The optimiser's param groups and the scheduler's record equal the fresh ``opt``'s
    and ``sched``'s (this run's settings) but for the position, which must be ``step``
    (the learning rate the schedule gives there)."""
    lr = [base * f(step) for base, f in zip(sched.base_lrs, sched.lr_lambdas, strict=True)]
    fresh = opt.state_dict()["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(fresh):
        raise _refuse(path, "optimiser", groups, f"{len(fresh)} param group(s)")
    for i, (got, want) in enumerate(zip(groups, fresh, strict=True)):
        if not isinstance(got, dict) or set(got) != set(want):
            raise _refuse(path, f"optimiser[{i}]", got, f"the keys {sorted(want)}")
        for key, value in want.items():
            value = lr[i] if key == "lr" else value
            same = _close(got[key], value) if key == "lr" else list_equal(got[key], value)
            if not same:
                raise _refuse(path, f"optimiser[{i}].{key}", got[key], f"{value!r} (this run's)")
    if not isinstance(scheduler, dict):
        raise _refuse(path, "scheduler", scheduler, "the scheduler's record")
    wanted = {"last_epoch": step, "_step_count": step + 1, "base_lrs": sched.base_lrs}
    for key, value in wanted.items():
        if not list_equal(scheduler.get(key), value):
            raise _refuse(path, f"scheduler.{key}", scheduler.get(key), repr(value))
    if not all(_close(a, b) for a, b in zip(scheduler.get("_last_lr") or [None], lr, strict=False)):
        raise _refuse(path, "scheduler._last_lr", scheduler.get("_last_lr"), repr(lr))


def list_equal(a: Any, b: Any) -> bool:
    """JSON equality that takes a tuple for a list (betas travel as a list)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(list_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def evaluation_steps(cfg: TrainConfig, done: int) -> list[int]:
    """The steps (1-based) of the evaluations a run of ``cfg`` made in its first ``done``."""
    return [s + 1 for s in range(done) if is_eval_step(s, cfg)]


def scheduled_lr(cfg: TrainConfig) -> Callable[[int], float]:
    """The learning rate the schedule of ``cfg`` gives after ``step`` steps."""
    return lambda step: cfg.lr * lr_factor(step, cfg)


def check_rngs(path: Path, where: str, document: Any, restore: Callable[[Any], None]) -> None:
    """Restore the generators ``document`` records; a record they cannot take is refused."""
    try:
        restore(document)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as err:
        raise _refuse(path, where, document, f"a generator state ({err})") from None


def check_run_state(
    path: Path,
    saved: tuple[Mapping[str, torch.Tensor], Mapping[str, Any]],
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    cfg: TrainConfig,
) -> int:
    """A single run's state (:func:`~infoprobe.train.loop.run_state`) against the fresh
    ``model``, ``opt``, ``sched`` of ``cfg``; returns its step."""
    tensors, document = saved
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    template = {f"model.{k}": v for k, v in weights.items()}
    template |= {f"best.{k}": v for k, v in weights.items()}
    template |= optimiser_template(opt) | {"rng.torch": torch.get_rng_state()}
    check_tensors(path, tensors, template)
    step = check_step(path, document.get("step"), cfg.steps)
    check_schedule(path, document.get("optimiser"), document.get("scheduler"), opt, sched, step)
    check_history(path, "tracker", document.get("tracker"),
                  eval_steps=evaluation_steps(cfg, step), lr_at=scheduled_lr(cfg))  # fmt: skip
    for index in range(len(optimiser_template(opt)) // 3):
        if float(tensors[f"opt.{index}.step"]) != step:
            raise _refuse(path, f"opt.{index}.step", float(tensors[f"opt.{index}.step"]), str(step))
    if not _finite(document.get("seconds")) or document["seconds"] < 0:
        raise _refuse(path, "seconds", document.get("seconds"), "a finite number >= 0")
    return step


def _members(path: Path, document: Mapping[str, Any], n: int) -> tuple[list[int], list[int]]:
    """The member indices of a group state's ``active`` list and ``done`` record: each
    member of ``n`` in exactly one of them."""
    active, done = document.get("active"), document.get("done")
    if not isinstance(active, list) or not all(isinstance(e, dict) for e in active):
        raise _refuse(path, "active", active, "a list of the members still training")
    if not isinstance(done, dict) or not all(isinstance(e, dict) for e in done.values()):
        raise _refuse(path, "done", done, "a record of the finished members")
    rows = [e.get("index") for e in active]
    finished = [int(k) if k.isdigit() else k for k in done]
    if sorted(rows + finished, key=str) != sorted(range(n), key=str):
        raise _refuse(path, "active", rows, f"the members 0..{n - 1}, each active or done once")
    return rows, finished


def check_group_state(
    path: Path,
    saved: tuple[Mapping[str, torch.Tensor], Mapping[str, Any]],
    *,
    row: Mapping[str, torch.Tensor],
    weights: Mapping[str, torch.Tensor],
    cfgs: Sequence[TrainConfig],
) -> int:
    """A group's state (:meth:`~infoprobe.train.ensemble.Ensemble.state`) against the
    group's own shapes: ``row`` one member's row of the stack (``flat``, ``buffer.<name>``),
    ``weights`` one model's state dict, ``cfgs`` the members' settings; returns its step."""
    tensors, document = saved
    step = check_step(path, document.get("step"), max(c.steps for c in cfgs))
    rows, finished = _members(path, document, len(cfgs))
    template = {
        f"stack.{k}": torch.empty((len(rows), *v.shape), dtype=v.dtype) for k, v in row.items()
    }
    for key in ("exp_avg", "exp_avg_sq"):
        template[f"stack.{key}"] = template["stack.flat"]
    template["rng.torch"] = torch.get_rng_state()
    weights = {k: v.detach().cpu() for k, v in weights.items()}
    for r in range(len(rows)):
        template |= {f"active.{r}.best.{k}": v for k, v in weights.items()}
    for index in finished:
        template |= {f"done.{index}.{k}": v for k, v in weights.items()}
    check_tensors(path, tensors, template)
    if bool((tensors["stack.exp_avg_sq"] < 0).any()):
        raise _refuse(path, "stack.exp_avg_sq", "negative values", "second moments >= 0")
    for r, (index, entry) in enumerate(zip(rows, document["active"], strict=True)):
        cfg = cfgs[index]
        check_history(path, f"active[{r}].tracker", entry.get("tracker"),
                      eval_steps=evaluation_steps(cfg, step), lr_at=scheduled_lr(cfg))  # fmt: skip
    for index in finished:
        cfg = cfgs[index]
        check_history(path, f"done.{index}", document["done"][str(index)], finished=True,
                      eval_steps=evaluation_steps(cfg, step), lr_at=scheduled_lr(cfg))  # fmt: skip
    if not _finite(document.get("seconds")) or document["seconds"] < 0:
        raise _refuse(path, "seconds", document.get("seconds"), "a finite number >= 0")
    return step
