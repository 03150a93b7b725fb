"""Training one group of batched probes in memory: shared budget, per-probe early stopping.

A *cell* c is one state we read from (for example one ``(layer, token)`` pair,
``h(t, l)``); a *target* s is one thing we try to decode (for example ``x(s)``
of one data position). A :class:`BatchedProbes` module holds many small probes
whose parameters share the leading axes ``probe_shape`` (``[c, S]`` for one
probe per (cell, target), ``[c]`` for one per cell); it maps standardised
states ``x [c, b, E]`` to predictions ``[c, S, k, b]`` and is trained against
standardised targets ``y [b, S, k]`` with einsum/bmm, so one optimiser step
updates every probe.

Every probe gets the same :class:`TrainingBudget`: epochs, optimiser, learning
rate, weight decay, batch size, minibatch order and patience. The loss is the
*sum* of the per-probe mean squared errors, so each probe's gradient is exactly
the one it would get if trained alone; Adam/AdamW keep per-element state, so
batched training equals per-probe training with the same initial weights and
the same minibatch order (up to float summation order). Early stopping is per
probe: each probe keeps its own best-validation-epoch weights and stops
improving its record after ``patience`` epochs without improvement; training
ends when no probe is still active or after ``epochs`` epochs.

Conventions fixed here (shared by every batched probe, e.g.
:mod:`infoprobe.probes.mlp` and :mod:`infoprobe.probes.query`):

- Initial weights of cell c are drawn from a generator seeded with
  ``numpy.random.SeedSequence([seed, c])`` (PyTorch's ``nn.Linear`` default
  distribution, ``U(±1/sqrt(fan_in))``), so a cell's probes do not depend on
  how the cells are chunked.
- Epoch e visits the training samples in the order of the e-th
  ``torch.randperm(n_train, generator=torch.Generator().manual_seed(seed))``
  draw, split into consecutive minibatches of ``batch_size`` (the last one may
  be smaller). The same order is used for every probe.

Standardisation and memory-bounded chunking over all cells live in
:mod:`infoprobe.probes.chunked_fit`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import einops
import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from infoprobe.probes.settings import TrainingBudget

__all__ = [
    "Accelerator",
    "BatchedProbes",
    "EarlyStopping",
    "TrainingBudget",
    "Workspace",
    "accelerator_of",
    "autograd_step",
    "eval_loss",
    "init_params",
    "minibatch_permutations",
    "predict_standardised",
    "train_step",
    "train_with_early_stopping",
]


# --------------------------------------------------------------------------- budget


def minibatch_permutations(n_train: int, seed: int) -> Iterator[torch.Tensor]:
    """Yield one training-order permutation ``[n_train]`` (int64) per epoch.

    The e-th permutation is the e-th ``torch.randperm`` draw from a CPU
    generator seeded with ``seed``; every probe (and every chunk of cells)
    sees the same order.
    """
    generator = torch.Generator().manual_seed(int(seed))
    while True:
        yield torch.randperm(n_train, generator=generator)


def cell_generator(seed: int, cell: int | tuple[int, int]) -> torch.Generator:
    """The CPU generator that draws the initial weights of cell ``cell``: an index c (its
    first start), or (c, r) for its start r >= 1 (a restart of a failed fit)."""
    key = [int(k) for k in (cell if isinstance(cell, tuple) else (cell,))]
    state = np.random.SeedSequence([int(seed), *key]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & (2**63 - 1))


def initial_values(
    shape: tuple[int, ...], fan_in: int | None, generator: torch.Generator
) -> torch.Tensor:
    """``U(±1/sqrt(fan_in))`` of ``shape`` (``nn.Linear``'s default), or ``N(0, 1)``
    (``nn.Embedding``'s default) when ``fan_in`` is None; float64."""
    if fan_in is None:
        return torch.randn(shape, generator=generator, dtype=torch.float64)
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound


# --------------------------------------------------------------------------- modules


class Workspace:
    """Scratch tensors reused from step to step, one per (name, shape).

    A fresh tensor of a few MiB is page-faulted in on every allocation on the CPU;
    training a group of probes allocates its activations thousands of times, so the
    engine's epoch gather and the accelerators' steps write into these instead.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers: dict[tuple[str, tuple[int, ...], torch.dtype], torch.Tensor] = {}

    def __call__(self, name: str, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` (float32 by default), the same one on every
        call."""
        key = (name, shape, dtype)
        if key not in self.buffers:
            self.buffers[key] = torch.empty(shape, device=self.device, dtype=dtype)
        return self.buffers[key]


class Accelerator(Protocol):
    """A faster step for one probe family on some devices (the CPU kernel of
    :mod:`infoprobe.probes.fused`): the same values as the family's PyTorch loss and its
    autograd gradients, up to float32 rounding. A family names its accelerator in
    :attr:`BatchedProbes.accelerator`; nothing else refers to one."""

    def serves(self, module: BatchedProbes, device: torch.device) -> bool:
        """Whether it computes ``module``'s steps on ``device`` (else autograd runs)."""

    def train_step(
        self, module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, work: Workspace
    ) -> None:
        """Set every parameter's ``.grad`` to the gradient of the summed per-probe loss."""

    def eval_loss(
        self, module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, work: Workspace
    ) -> torch.Tensor:
        """The per-probe loss (``probe_shape``) without gradients."""

    def activation_bytes(self, module: BatchedProbes, batch: int) -> int:
        """Bytes per cell a step streams through (sizes the CPU's groups of cells)."""


class BatchedProbes(nn.Module):
    """A group of probes whose parameters all have the leading axes ``probe_shape``.

    Subclasses (one per probe family) implement ``forward(x [c, b, E]) -> [c, S, k, b]``
    (samples last: with weights in ``nn.Linear``'s ``[out, in]`` orientation each layer
    is one batched matmul ``W @ h``) and set ``loss_dims``: the axes of the squared error
    ``[c, S, k, b]`` averaged into one loss per probe (so that ``per_probe_loss`` has
    shape ``probe_shape``), or override :meth:`per_probe_loss` (a likelihood). Gradients
    come from autograd (:func:`train_step`); a family may name an :class:`Accelerator`
    that computes the same step faster where it serves.
    """

    loss_dims: tuple[int, ...] = (2, 3)
    probe_shape: tuple[int, ...]
    accelerator: ClassVar[Accelerator | None] = None

    def per_probe_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean squared error per probe, shape ``probe_shape``; ``y`` is ``[b, S, k]``."""
        return ((self(x) - y.permute(1, 2, 0)) ** 2).mean(dim=self.loss_dims)

    def mean_loss(self, y: torch.Tensor) -> torch.Tensor | None:
        """The loss of predicting the training mean (0 in standardised units) for the
        probes of one cell, ``y [b, S, k]`` → ``probe_shape[1:]``; None for a family whose
        loss is not the squared error (it defines its own :meth:`per_probe_loss`)."""
        if type(self).per_probe_loss is not BatchedProbes.per_probe_loss:
            return None
        return (y.permute(1, 2, 0).unsqueeze(0) ** 2).mean(dim=self.loss_dims)[0]

    def arrays(self) -> dict[str, np.ndarray]:
        """Parameters as float32 numpy arrays (leading axes ``probe_shape``)."""
        return {
            name: p.detach().to("cpu", torch.float32).numpy().copy()
            for name, p in self.named_parameters()
        }


def accelerator_of(module: BatchedProbes, device: torch.device) -> Accelerator | None:
    """``module``'s accelerator when it serves ``device``, else None."""
    fast = type(module).accelerator
    return fast if fast is not None and fast.serves(module, torch.device(device)) else None


def autograd_step(module: BatchedProbes, x: torch.Tensor, y: torch.Tensor) -> None:
    """Set every parameter's ``.grad`` to the autograd gradient of the summed per-probe
    loss of standardised ``x [c, b, E]``, ``y [b, S, k]``."""
    for p in module.parameters():
        p.grad = None
    module.per_probe_loss(x, y).sum().backward()


def train_step(module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, work: Workspace) -> None:
    """One step's gradients: the module's accelerator where it serves, else autograd."""
    fast = accelerator_of(module, x.device)
    if fast is None:
        autograd_step(module, x, y)
    else:
        fast.train_step(module, x, y, work)


def eval_loss(
    module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, work: Workspace
) -> torch.Tensor:
    """:meth:`BatchedProbes.per_probe_loss` without gradients (``probe_shape``)."""
    fast = accelerator_of(module, x.device)
    if fast is not None:
        return fast.eval_loss(module, x, y, work)
    with torch.no_grad():
        return module.per_probe_loss(x, y)


def init_params(
    module: nn.Module,
    cells: Sequence[int | tuple[int, int]],
    shapes: dict[str, tuple[int, ...]],
    fan_in: dict[str, int | None],
    seed: int,
    arrays: dict[str, np.ndarray] | None,
) -> None:
    """Register parameters ``[len(cells), *shape]`` on ``module``.

    From ``arrays`` (already sliced to ``cells``) when given, else drawn cell by
    cell from :func:`cell_generator` in the order of ``shapes``.
    """
    if arrays is not None:
        for name in shapes:
            module.register_parameter(
                name, nn.Parameter(torch.as_tensor(np.asarray(arrays[name], dtype=np.float32)))
            )
        return
    per_cell: dict[str, list[torch.Tensor]] = {name: [] for name in shapes}
    for cell in cells:
        generator = cell_generator(seed, cell)
        for name, shape in shapes.items():
            per_cell[name].append(initial_values(shape, fan_in[name], generator))
    for name, tensors in per_cell.items():
        module.register_parameter(
            name, nn.Parameter(torch.stack(tensors).to(torch.float32).contiguous())
        )


# --------------------------------------------------------------------------- training


@dataclass
class EarlyStopping:
    """Per-probe early-stopping record after training (tensors of ``probe_shape``)."""

    best_val_loss: torch.Tensor
    best_epoch: torch.Tensor
    epochs_run: int
    start_val_loss: torch.Tensor
    """The validation loss of the initial weights (a fit that never beats it failed)."""


def batched_loss(
    module: BatchedProbes,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    work: Workspace | None = None,
) -> torch.Tensor:
    """Per-probe mean squared error over all samples of ``x [c, n, E]``, ``y [n, S, k]``."""
    work = work or Workspace(x.device)
    total = torch.zeros(module.probe_shape, dtype=torch.float64, device=x.device)
    n = x.shape[1]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        loss = eval_loss(module, x[:, start:stop], y[start:stop], work)
        total += loss.to(torch.float64) * (stop - start)
    return total / n


def take_probes(t: torch.Tensor, keep: list[torch.Tensor]) -> torch.Tensor:
    """``t`` restricted to the probes ``keep`` (one index tensor per leading probe axis)."""
    for axis, index in enumerate(keep):
        t = t.index_select(axis, index)
    return t


def train_with_early_stopping(
    module: BatchedProbes,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_val: torch.Tensor,
    y_val: torch.Tensor,
    budget: TrainingBudget,
    *,
    eval_batch: int,
    progress: bool = True,
    desc: str = "probes",
) -> EarlyStopping:
    """Train every probe of ``module`` with the same budget; load per-probe best weights.

    ``x_* [c, n, E]`` and ``y_* [n, S, k]`` are standardised tensors on the
    module's device. The summed per-probe loss is minimised; after each epoch
    the validation loss of every probe is measured and a probe that improved
    (strictly) while still active stores its weights. A probe becomes
    inactive after ``budget.patience`` epochs without improvement. On return
    the module holds each probe's best weights.

    Probes are independent, so the inactive ones are dropped from the
    computation: after an epoch, every cell (probe axis 0, the axis of ``x``)
    and every target (probe axis 1 if any, the axis 1 of ``y``) with no active
    probe left is removed from the parameters, the optimiser state and the
    data. The remaining probes train exactly as before.
    """
    params = list(module.parameters())
    optimizer = budget.make_optimizer(params)
    best = [p.detach().clone() for p in params]
    shape = module.probe_shape
    device = x_train.device
    best_loss = torch.full(shape, math.inf, dtype=torch.float64, device=device)
    best_epoch = torch.full(shape, -1, dtype=torch.int64, device=device)
    active = torch.ones(shape, dtype=torch.bool, device=device)
    alive = [torch.arange(size, device=device) for size in shape]  # probes still trained
    n_train = x_train.shape[1]
    orders = minibatch_permutations(n_train, budget.seed)
    work = Workspace(device)
    start_loss = batched_loss(module, x_val, y_val, eval_batch, work)
    bar = tqdm(range(budget.epochs), desc=desc, disable=not progress, leave=False)
    epochs_run = 0
    for epoch in bar:
        order = next(orders).to(device)
        # the epoch's rows in minibatch order, gathered once: each step reads a slice
        x_epoch = work("x_epoch", *x_train.shape, dtype=x_train.dtype)
        y_epoch = work("y_epoch", *y_train.shape, dtype=y_train.dtype)
        torch.index_select(x_train, 1, order, out=x_epoch)
        torch.index_select(y_train, 0, order, out=y_epoch)
        for start in range(0, n_train, budget.batch_size):
            stop = start + budget.batch_size
            train_step(module, x_epoch[:, start:stop], y_epoch[start:stop], work)
            optimizer.step()
        epochs_run = epoch + 1
        val_loss = batched_loss(module, x_val, y_val, eval_batch, work)
        grid = torch.meshgrid(*alive, indexing="ij")
        improved = active[grid] & (val_loss < best_loss[grid])
        best_loss[grid] = torch.where(improved, val_loss, best_loss[grid])
        best_epoch[grid] = torch.where(improved, epoch, best_epoch[grid])
        with torch.no_grad():
            for p, b in zip(params, best, strict=True):
                mask = improved.view(*improved.shape, *[1] * (p.dim() - len(shape)))
                b[grid] = torch.where(mask, p, b[grid])
        active &= epoch - best_epoch < budget.patience
        bar.set_postfix(active=int(active.sum()), best_val=float(best_loss.mean()))
        if not active.any():
            break
        still = active[grid]
        keep = [still] if len(shape) == 1 else [still.any(1), still.any(0)]
        if all(bool(k.all()) for k in keep):
            continue
        keep = [torch.nonzero(k).flatten() for k in keep]
        alive = [a[k] for a, k in zip(alive, keep, strict=True)]
        with torch.no_grad():
            for p in params:
                state = optimizer.state.get(p, {})
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in state:
                        state[key] = take_probes(state[key], keep)
                p.data, p.grad = take_probes(p.data, keep), None
        module.probe_shape = tuple(len(a) for a in alive)
        x_train, x_val = x_train.index_select(0, keep[0]), x_val.index_select(0, keep[0])
        if len(keep) > 1:
            y_train, y_val = y_train.index_select(1, keep[1]), y_val.index_select(1, keep[1])
        work = Workspace(device)
    with torch.no_grad():
        for p, b in zip(params, best, strict=True):
            p.data, p.grad = b, None
    module.probe_shape = shape
    return EarlyStopping(best_loss, best_epoch, epochs_run, start_loss)


def predict_standardised(module: BatchedProbes, x: torch.Tensor, batch_size: int) -> np.ndarray:
    """Module predictions ``[n, c, S, k]`` (numpy) for ``x [c, n, E]``, computed in batches."""
    with torch.no_grad():
        parts = [module(x[:, s : s + batch_size]) for s in range(0, x.shape[1], batch_size)]
        pred = torch.cat(parts, dim=3) if parts else module(x)
    return einops.rearrange(pred.cpu().numpy(), "c s k n -> n c s k")
