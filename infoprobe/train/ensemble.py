"""Batched ensembles: M models of one shape trained as one batched module.

Each member is what :func:`infoprobe.train.loop.train` would make of its own
:class:`TrainConfig`: its own initialisation and data streams (``default_rng([seed, ...])``),
its own AdamW state, warm-up + cosine schedule, gradient clipping, early stopping and best
model. The members' weights live stacked in one flat tensor [M, P]; a training step is
one ``torch.func.vmap`` of the model's forward over the members (each on its own batch),
one backward, and an AdamW update written for the stack (the same arithmetic as
``torch.optim.AdamW``). Members may differ in the per-run scalars (``seed``, ``lr``,
``weight_decay``, ``warmup``, ``grad_clip``, ``patience``, ``steps``) and in the model's
``init_gain``; everything else is the group's shape (:data:`SHARED_FIELDS`,
:func:`shape_of`). A member that finishes (its ``steps``, early stopping, or a non-finite
loss) leaves the stack and the others go on.

Float results equal a run trained alone within float tolerance (the batched matmuls sum
in another order); tests/test_ensemble.py measures it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call, vmap
from tqdm.auto import tqdm

from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.train.config import TrainConfig, TrainingError, TrainResult
from infoprobe.train.groups import SHARED_FIELDS, shape_of
from infoprobe.train.loop import (
    DataStreams,
    EvalTracker,
    compiled,
    data_streams,
    draw_batch,
    evaluate,
    finish,
    is_eval_step,
    lr_factor,
    new_model,
    standardise_targets,
)
from infoprobe.train.memory import check_memory_fits
from infoprobe.train.state import StateFile, prefixed, restore_rngs, rng_document, unprefixed
from infoprobe.train.state_check import check_group_state, check_rngs
from infoprobe.train.threads import TrainingThreads

BETAS, EPS = (0.9, 0.999), 1e-8
"""``torch.optim.AdamW``'s defaults, which :func:`infoprobe.train.loop.train` uses."""


class EnsembleError(TrainingError):
    """The members given to :func:`train_ensemble` cannot form one group."""


def check_members(model_cfgs: Sequence[ModelConfig], cfgs: Sequence[TrainConfig]) -> None:
    """Raise :class:`EnsembleError` unless ``model_cfgs`` and ``cfgs`` (one per member)
    form one group: at least one member, one shape, the shared training fields equal,
    and no two members with the same settings (a duplicate seed)."""
    if len(cfgs) == 0:
        raise EnsembleError("an ensemble needs at least one member (M >= 1), got M = 0")
    if len(model_cfgs) != len(cfgs):
        raise EnsembleError(
            f"one model config per member: got {len(model_cfgs)} model configs for "
            f"{len(cfgs)} training configs"
        )
    first = shape_of(model_cfgs[0])
    for m, model_cfg in enumerate(model_cfgs[1:], start=1):
        if shape_of(model_cfg) != first:
            differ = [
                k for k, v in first.to_dict().items() if shape_of(model_cfg).to_dict()[k] != v
            ]
            raise EnsembleError(
                f"member {m}'s model differs in shape from member 0 (field(s) {differ}: "
                f"{[getattr(model_cfg, k) for k in differ]} vs "
                f"{[getattr(first, k) for k in differ]}); train each shape as its own group"
            )
    for name in (*SHARED_FIELDS, "compile"):
        values = [getattr(c, name) for c in cfgs]
        if len(set(values)) > 1:
            raise EnsembleError(
                f"TrainConfig.{name} must be the same for every member of a group, got {values}"
            )
    seen: dict[tuple, int] = {}
    for m, (model_cfg, cfg) in enumerate(zip(model_cfgs, cfgs, strict=True)):
        key = (model_cfg, cfg)
        if key in seen:
            raise EnsembleError(
                f"members {seen[key]} and {m} have the same settings (duplicate seed "
                f"{cfg.seed}); give every member its own seed or settings"
            )
        seen[key] = m


@dataclass
class Member:
    """A member's own state: config, data, evaluation tracker, and (while it trains)
    its row in the stack."""

    index: int
    cfg: TrainConfig
    data: DataStreams
    tracker: EvalTracker


class Stack:
    """The active members' weights as one flat leaf tensor [A, P] with their AdamW
    moments, and the buffers stacked per name [A, ...].

    ``views()`` gives the parameters by name [A, *shape] as views into the flat tensor, so
    the gradient of every member arrives in one tensor [A, P].
    """

    def __init__(self, models: Sequence[InfoFlowTransformer]):
        named = list(models[0].named_parameters())
        self.names = [name for name, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        flat = torch.stack(
            [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in models]
        )
        self.flat = flat.requires_grad_()
        self.exp_avg = torch.zeros_like(flat)
        self.exp_avg_sq = torch.zeros_like(flat)
        self.buffers = {
            name: torch.stack([dict(m.named_buffers())[name] for m in models])
            for name, _ in models[0].named_buffers()
        }

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Parameters by name, [A, *shape], as views into ``flat`` [A, P]."""
        chunks = torch.split(flat, self.sizes, dim=1)
        return {
            name: chunk.view(len(flat), *shape)
            for name, chunk, shape in zip(self.names, chunks, self.shapes, strict=True)
        }

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` of the stack (members that go on training)."""
        index = torch.as_tensor(rows, device=self.flat.device)
        self.flat = self.flat.detach()[index].requires_grad_()
        self.exp_avg, self.exp_avg_sq = self.exp_avg[index], self.exp_avg_sq[index]
        self.buffers = {k: v[index] for k, v in self.buffers.items()}

    def restore(self, tensors: dict[str, torch.Tensor]) -> None:
        """Take back the rows, moments and buffers a state recorded (``flat``,
        ``exp_avg``, ``exp_avg_sq``, ``buffer.<name>``)."""
        self.flat = tensors["flat"].clone().requires_grad_()
        self.exp_avg, self.exp_avg_sq = tensors["exp_avg"].clone(), tensors["exp_avg_sq"].clone()
        self.buffers = {k: v.clone() for k, v in unprefixed("buffer.", tensors).items()}

    def state(self, row: int, model: InfoFlowTransformer) -> dict[str, torch.Tensor]:
        """A copy of row ``row`` as a state dict of ``model`` (persistent buffers only)."""
        params = self.views(self.flat.detach()[row : row + 1])
        tensors = {k: v[0] for k, v in params.items()}
        tensors |= {k: v[row] for k, v in self.buffers.items()}
        return {k: tensors[k].clone() for k in model.state_dict()}

    @torch.no_grad()
    def adamw_step(
        self, grad: torch.Tensor, step: int, lr: torch.Tensor, weight_decay: torch.Tensor
    ) -> None:
        """One AdamW update of every row (``torch.optim.AdamW``'s arithmetic, defaults
        betas (0.9, 0.999), eps 1e-8); ``grad`` [A, P], ``lr``, ``weight_decay`` [A, 1];
        ``step`` counts from 1."""
        beta1, beta2 = BETAS
        self.flat.mul_(1 - lr * weight_decay)
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_size = lr / (1 - beta1**step)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(EPS)
        self.flat.sub_(step_size * self.exp_avg / denom)


def clip_rows(grad: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """Each row of ``grad`` [A, P] scaled as ``torch.nn.utils.clip_grad_norm_`` would
    scale that member's gradient (``max_norm`` [A, 1]; 0 disables clipping)."""
    norm = grad.norm(dim=1, keepdim=True)
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return grad * torch.where(max_norm > 0, coef, torch.ones_like(coef))


def member_losses(
    base: InfoFlowTransformer, stack: Stack
) -> Callable[[torch.Tensor, dict, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``losses(flat, buffers, x, y)``: each member's mean squared error in standardised
    units [A], for flat [A, P], x [A, b, T, d], y [A, b, d_out]."""

    def one(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pred = functional_call(base, (params, buffers), (x,))
        return (((pred - y) / buffers["readout.y_scale"]) ** 2).mean()

    batched = vmap(one)

    def losses(flat: torch.Tensor, buffers: dict, x: torch.Tensor, y: torch.Tensor):
        return batched(stack.views(flat), buffers, x, y)

    return losses


class Ensemble:
    """The members of one group and their stack, advanced one step at a time.

    ``step(step)`` trains every active member on its next batch and evaluates those whose
    evaluation step it is; members that finish leave the stack and reach ``on_done``.
    :func:`train_ensemble` is the loop over steps; timing code drives ``step`` directly.
    """

    def __init__(
        self,
        task: Any,
        model_cfgs: Sequence[ModelConfig],
        cfgs: Sequence[TrainConfig],
        on_done: Callable[[int, TrainResult], None] | None = None,
        log: Callable[[str], None] | None = None,
    ):
        check_members(model_cfgs, cfgs)
        group = cfgs[0]
        check_memory_fits(model_cfgs[0], group, members=len(cfgs))
        self.task, self.on_done, self.log = task, on_done, log
        models = [new_model(task, mc, c) for mc, c in zip(model_cfgs, cfgs, strict=True)]
        self.active: list[Member] = []
        for m, (model, cfg) in enumerate(zip(models, cfgs, strict=True)):
            data = data_streams(task, cfg)
            standardise_targets(model, data.y_val)
            state = copy.deepcopy(model.state_dict())
            self.active.append(Member(m, cfg, data, EvalTracker(cfg, TrainResult(model), state)))
        self.members = list(self.active)
        self.stack = Stack(models)
        base = copy.deepcopy(models[0]).to("meta")
        losses = member_losses(base, self.stack)
        self.losses = compiled(losses, group.compile, "ensemble training step")
        self.cfgs = list(cfgs)
        self.results: list[TrainResult | None] = [None] * len(cfgs)
        self.start = time.perf_counter()

    def state(self, done: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The group's resumable state after ``done`` steps (:mod:`infoprobe.train.state`):
        the stack and its moments, every active member's bests and data stream, every
        finished member's result."""
        stack = self.stack
        tensors = {
            "stack.flat": stack.flat.detach(),
            "stack.exp_avg": stack.exp_avg,
            "stack.exp_avg_sq": stack.exp_avg_sq,
            **prefixed("stack.buffer.", stack.buffers),
            "rng.torch": torch.get_rng_state(),
        }
        active = []
        for row, member in enumerate(self.active):
            tensors |= prefixed(f"active.{row}.best.", member.tracker.best_state)
            active.append(
                {
                    "index": member.index,
                    "tracker": member.tracker.to_dict(),
                    "rngs": rng_document(member.data.train_rng),
                }
            )
        finished = {}
        for member in self.members:
            result = self.results[member.index]
            if result is not None:
                tensors |= prefixed(f"done.{member.index}.", result.model.state_dict())
                finished[str(member.index)] = {
                    **member.tracker.to_dict(),
                    "test_nmse": result.test_nmse,
                    "seconds": result.seconds,
                }
        document = {
            "step": done,
            "seconds": time.perf_counter() - self.start,
            "seeds": [c.seed for c in self.cfgs],
            "active": active,
            "done": finished,
        }
        return tensors, document

    def restore(self, saved: tuple[dict[str, torch.Tensor], dict[str, Any]], path: Path) -> int:
        """Put the group back where :meth:`state` left it (its state at ``path`` checked
        first, :func:`~infoprobe.train.state_check.check_group_state`); return the steps
        done."""
        tensors, document = saved
        seeds = [c.seed for c in self.cfgs]
        if document.get("seeds") != seeds:
            raise EnsembleError(
                f"the state holds the seeds {document['seeds']}, this group {seeds}; pass "
                "--restart to start over"
            )
        row = {k: v[0] for k, v in prefixed("buffer.", self.stack.buffers).items()}
        row["flat"] = self.stack.flat[0].detach()
        model = self.members[0].tracker.result.model
        check_group_state(path, saved, row=row, weights=model.state_dict(), cfgs=self.cfgs)
        members = {m.index: m for m in self.members}
        self.active = []
        for row, entry in enumerate(document["active"]):
            member = members[int(entry["index"])]
            best = unprefixed(f"active.{row}.best.", tensors)
            member.tracker.restore(entry["tracker"], best)
            check_rngs(path, f"active[{row}].rngs", entry.get("rngs"),
                       partial(restore_rngs, rng=member.data.train_rng))  # fmt: skip
            self.active.append(member)
        for index, entry in document["done"].items():
            member = members[int(index)]
            result = member.tracker.result
            member.tracker.restore(entry, {})
            result.model.load_state_dict(unprefixed(f"done.{index}.", tensors))
            result.model.eval()
            result.test_nmse = math.nan if entry["test_nmse"] is None else entry["test_nmse"]
            result.seconds = float(entry["seconds"])
            self.results[int(index)] = result
        self.stack.restore(unprefixed("stack.", tensors))
        torch.set_rng_state(tensors["rng.torch"])
        self.start = time.perf_counter() - float(document["seconds"])
        return int(document["step"])

    def _say(self, member: Member, line: str) -> None:
        if self.log is not None:
            self.log(f"[seed {member.cfg.seed}] {line}")

    def _finish(self, rows: list[int]) -> None:
        """Members at ``rows`` of the stack are done: score them, report, drop them."""
        for row in rows:
            member = self.active[row]
            result = finish(self.task, member.cfg, member.tracker, self.start)
            self.results[member.index] = result
            if self.on_done is not None:
                self.on_done(member.index, result)
        keep = [r for r in range(len(self.active)) if r not in rows]
        self.active = [self.active[r] for r in keep]
        if self.active:
            self.stack.keep(keep)

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every active member's next training batch: x [A, b, T, d], y [A, b, d_out]."""
        batches = [
            draw_batch(self.task, a.cfg, a.data.train_rng, a.data.fixed) for a in self.active
        ]
        return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])

    def step(self, step: int) -> None:
        """One training step (0-based ``step``) of every active member."""
        x, y = self.draw()
        loss = self.losses(self.stack.flat, self.stack.buffers, x, y)
        finite = torch.isfinite(loss).tolist()
        if not all(finite):
            bad = [r for r, ok in enumerate(finite) if not ok]
            for row in bad:
                member = self.active[row]
                member.tracker.result.stopped = f"non-finite loss at step {step}"
                self._say(member, f"non-finite training loss at step {step}; stopped")
            self._finish(bad)
            if not self.active:
                return
            keep = [r for r, ok in enumerate(finite) if ok]
            x, y = x[keep], y[keep]
            loss = self.losses(self.stack.flat, self.stack.buffers, x, y)
        (grad,) = torch.autograd.grad(loss.sum(), [self.stack.flat])
        per_member = partial(
            torch.tensor, device=self.stack.flat.device, dtype=self.stack.flat.dtype
        )
        clip = per_member([[a.cfg.grad_clip] for a in self.active])
        lr = per_member([[a.cfg.lr * lr_factor(step, a.cfg)] for a in self.active])
        decay = per_member([[a.cfg.weight_decay] for a in self.active])
        self.stack.adamw_step(clip_rows(grad, clip), step + 1, lr, decay)
        leaving = []
        for row, member in enumerate(self.active):
            if is_eval_step(step, member.cfg) and self._evaluate(row, step, loss[row].item()):
                leaving.append(row)
        if leaving:
            self._finish(leaving)

    def _evaluate(self, row: int, step: int, train_loss: float) -> bool:
        """Validate the member at ``row`` after ``step``; True if it is done."""
        member = self.active[row]
        model = member.tracker.result.model
        model.load_state_dict(self.stack.state(row, model))
        val = evaluate(model, member.data.x_val, member.data.y_val)
        state = partial(self.stack.state, row, model)
        say = None if self.log is None else partial(self._say, member)
        stop = member.tracker.record(step, train_loss, val, state, say)
        return stop or step + 1 == member.cfg.steps


def train_ensemble(
    task: Any,
    model_cfgs: ModelConfig | Sequence[ModelConfig],
    cfgs: Sequence[TrainConfig],
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    on_member_done: Callable[[int, TrainResult], None] | None = None,
    threads: int | str | None = None,
    state: StateFile | None = None,
) -> list[TrainResult]:
    """Train one model per entry of ``cfgs`` as one batched group; return their results
    in the order of ``cfgs``.

    ``model_cfgs``: one config for all members, or one per member (same shape; only
    ``init_gain`` may differ). A member whose loss becomes non-finite stops there: its
    result holds its best model so far and ``stopped`` names the step (``train`` would
    raise :class:`NonFiniteLossError`); the others go on. ``on_member_done(m, result)``
    is called as soon as member ``m`` finishes, so a caller can save it before the rest
    end. ``seconds`` of a result is the group's wall time until that member finished.
    ``log`` receives one line per member evaluation, prefixed with ``[seed S]``.
    ``threads``: torch CPU threads, as for :func:`~infoprobe.train.loop.train` (``"auto"``
    re-checks the free cores every ``eval_every`` steps). ``state``: the group's resumable
    state, as for :func:`~infoprobe.train.loop.train` (a member that finished before the
    state was written is not trained again; ``on_member_done`` is not called again for it).
    """
    cfgs = list(cfgs)
    if isinstance(model_cfgs, ModelConfig):
        model_cfgs = [model_cfgs] * len(cfgs)
    group = Ensemble(task, list(model_cfgs), cfgs, on_done=on_member_done, log=log)
    saved = state.load() if state is not None else None
    first = 0 if saved is None else group.restore(saved, state.path)
    steps = max(c.steps for c in cfgs)
    desc = f"train {task.name} x{len(cfgs)}"
    bar = tqdm(range(first, steps), desc=desc, disable=not progress, mininterval=1.0,
               initial=first, total=steps)  # fmt: skip
    cpu = TrainingThreads(threads)
    try:
        for step in bar if group.active else ():
            group.step(step)
            if not group.active:
                break
            bar.set_postfix(active=len(group.active))
            if (step + 1) % cfgs[0].eval_every == 0:
                cpu.check()
            if state is not None and state.due(step + 1, steps):
                state.save(*group.state(step + 1))
                state.stop(step + 1, steps)
    finally:
        cpu.close()
    if state is not None:
        state.remove()
    return group.results
