"""Batched MLP probes: every (cell, target) probe trained at once as one module.

A *cell* c is one state we read from (for example one ``(layer, token)`` pair,
``h(t, l)``); a *target* s is one thing we try to decode (for example ``x(s)``
of one data position). Inputs ``X [n, C, E]`` hold every cell's state for
every sample, targets ``Y [n, S, k]`` every target. One probe per ``(c, s)``::

    x̂_{c,s} = W2_{c,s} · GELU(W1_{c,s} · h_c + b1_{c,s}) + b2_{c,s}
    h_c ∈ R^E  ->  hidden (default 64)  ->  R^k

All C·S probes live in grouped weight tensors (leading axes ``[C, S]``) and are
trained together with einsum/bmm, so one optimiser step updates every probe.
Every probe gets the same budget: hidden width, epochs, optimiser, learning
rate, batch size, minibatch order and patience. The loss is the *sum* of the
per-probe mean squared errors, so each probe's gradient is exactly the one it
would get if trained alone; Adam/AdamW keep per-element state, so batched
training equals per-probe training with the same initial weights and the same
minibatch order (up to float summation order). Early stopping is per probe:
each probe keeps its own best-validation-epoch weights and stops improving its
record after ``patience`` epochs without improvement; training ends when no
probe is still active or after ``epochs`` epochs.

Conventions fixed here (shared with :mod:`infoprobe.probes.query`):

- Inputs are standardised per (cell, feature) and targets per (target,
  coordinate) with *training* statistics (mean, population std; a zero std is
  replaced by 1). Probes train on standardised values; predictions are
  returned in the original units.
- Initial weights of cell c are drawn from a generator seeded with
  ``numpy.random.SeedSequence([seed, c])`` (PyTorch's ``nn.Linear`` default
  distribution, ``U(±1/sqrt(fan_in))``), so a cell's probes do not depend on
  how the cells are chunked.
- Epoch e visits the training samples in the order of the e-th
  ``torch.randperm(n_train, generator=torch.Generator().manual_seed(seed))``
  draw, split into consecutive minibatches of ``batch_size`` (the last one may
  be smaller). The same order is used for every probe.

Metrics (per (c, s), on the test split, in original units; the definitions of
:mod:`infoprobe.probes.metrics`, shared with the ridge probes):

- ``r2 = 1 - SSE / SST``, pooled over the k coordinates of the target:
  ``SSE = Σ_i Σ_j (ŷ_ij - y_ij)²``, ``SST = Σ_i Σ_j (y_ij - ȳ_j)²`` with the
  test mean ȳ (``sklearn.metrics.r2_score(..., multioutput="variance_weighted")``).
- ``nmse = SSE / SST = 1 - r2`` (MSE relative to the target variance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import einops
import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from infoprobe.probes.errors import ProbeInputError, SplitTooSmallError
from infoprobe.probes.metrics import nmse_from_r2, pooled_r2
from infoprobe.probes.validate import check_finite, check_ndim, check_same_length

__all__ = [
    "BatchedMLP",
    "BatchedProbes",
    "GeluReadout",
    "MLPProbeFit",
    "TrainingBudget",
    "fit_mlp_probes",
    "held_out_metrics",
    "minibatch_permutations",
]

ArrayLike = np.ndarray | torch.Tensor
OptimizerName = Literal["adam", "adamw"]
DEFAULT_MAX_MEMORY_BYTES = 2 * 1024**3


# --------------------------------------------------------------------------- budget


@dataclass(frozen=True)
class TrainingBudget:
    """The identical training budget every probe gets.

    ``epochs``: maximum passes over the training split. ``batch_size``:
    samples per optimiser step. ``lr``/``weight_decay``: optimiser settings
    (``weight_decay`` is L2 for Adam, decoupled for AdamW). ``patience``:
    epochs without a validation improvement before a probe stops updating its
    best weights. ``seed``: initial weights and minibatch order.
    """

    epochs: int = 100
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: OptimizerName = "adam"
    patience: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 1:
                raise ProbeInputError(f"training budget: {name} must be an int >= 1, got {value!r}")
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
        cls = torch.optim.Adam if self.optimizer == "adam" else torch.optim.AdamW
        # fused: one kernel for every parameter's update (about 5x faster steps on CPU)
        return cls(params, lr=self.lr, weight_decay=self.weight_decay, fused=True)


def minibatch_permutations(n_train: int, seed: int) -> Iterator[torch.Tensor]:
    """Yield one training-order permutation ``[n_train]`` (int64) per epoch.

    The e-th permutation is the e-th ``torch.randperm`` draw from a CPU
    generator seeded with ``seed``; every probe (and every chunk of cells)
    sees the same order.
    """
    generator = torch.Generator().manual_seed(int(seed))
    while True:
        yield torch.randperm(n_train, generator=generator)


def cell_generator(seed: int, cell: int) -> torch.Generator:
    """The CPU generator that draws the initial weights of cell ``cell``."""
    state = np.random.SeedSequence([int(seed), int(cell)]).generate_state(1, dtype=np.uint64)[0]
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


class BatchedProbes(nn.Module):
    """A group of probes whose parameters all have the leading axes ``probe_shape``.

    Subclasses implement ``forward(x [c, b, E]) -> [c, S, k, b]`` (samples
    last: with weights in ``nn.Linear``'s ``[out, in]`` orientation each layer
    is one batched matmul ``W @ h``) and set ``loss_dims``: the axes of the
    squared error ``[c, S, k, b]`` averaged into one loss per probe (so that
    ``per_probe_loss`` has shape ``probe_shape``).
    """

    loss_dims: tuple[int, ...] = (2, 3)
    probe_shape: tuple[int, ...]

    def per_probe_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean squared error per probe, shape ``probe_shape``; ``y`` is ``[b, S, k]``."""
        return ((self(x) - y.permute(1, 2, 0)) ** 2).mean(dim=self.loss_dims)

    def arrays(self) -> dict[str, np.ndarray]:
        """Parameters as float32 numpy arrays (leading axes ``probe_shape``)."""
        return {
            name: p.detach().to("cpu", torch.float32).numpy().copy()
            for name, p in self.named_parameters()
        }


SMALL_READOUT = 8
"""Up to this many outputs k, :class:`GeluReadout` forms ``wᵀ @ g`` as k
multiply-adds instead of a GEMM with inner size k."""


class GeluReadout(torch.autograd.Function):
    """``w @ GELU(pre) + bias``: the hidden nonlinearity and output layer of the probes.

    ``pre [..., h, b]``, ``w [..., k, h]`` and ``bias [..., k, 1]`` (both
    broadcastable against ``pre``'s leading axes) -> ``[..., k, b]``. Same
    values and gradients as autograd through ``gelu`` and ``matmul``, but the
    gradient w.r.t. the activations, ``wᵀ @ g``, is a GEMM with inner size k
    (4 for x(s) of a 4-d input) that BLAS runs slowly; for k <=
    :data:`SMALL_READOUT` it is formed as k fused multiply-adds. Measured on
    one CPU core (c = 2 cells, S = 32, h = 64, b = 256, k = 4): 1.5 ms instead
    of 3.7 ms for this block's forward and backward.
    """

    @staticmethod
    def forward(ctx, pre: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        act = nn.functional.gelu(pre)
        ctx.save_for_backward(pre, act, w)
        ctx.bias_shape = bias.shape
        return torch.matmul(w, act) + bias

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pre, act, w = ctx.saved_tensors
        grad_w = torch.matmul(grad_out, act.transpose(-1, -2)).sum_to_size(w.shape)
        grad_bias = grad_out.sum(-1, keepdim=True).sum_to_size(ctx.bias_shape)
        k = w.shape[-2]
        if k <= SMALL_READOUT:
            grad_act = w[..., 0, :, None] * grad_out[..., 0:1, :]
            for j in range(1, k):
                grad_act = grad_act.addcmul_(w[..., j, :, None], grad_out[..., j : j + 1, :])
            grad_act = grad_act.expand(pre.shape)
        else:
            grad_act = torch.matmul(w.transpose(-1, -2), grad_out)
        grad_pre = torch.ops.aten.gelu_backward(grad_act.contiguous(), pre)
        return grad_pre, grad_w, grad_bias


class BatchedMLP(BatchedProbes):
    """C·S independent MLPs ``E -> hidden -> GELU -> k``, one per (cell, target).

    Parameters (``nn.Linear`` orientation): ``w_in [c, S, hidden, E]``,
    ``b_in [c, S, hidden]``, ``w_out [c, S, k, hidden]``, ``b_out [c, S, k]``.
    ``cells`` are the global
    cell indices this module holds (they seed the initial weights).
    """

    loss_dims = (2, 3)

    def __init__(
        self,
        cells: range,
        n_targets: int,
        d_in: int,
        hidden: int,
        d_out: int,
        *,
        seed: int = 0,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        shapes = {
            "w_in": (n_targets, hidden, d_in),
            "b_in": (n_targets, hidden),
            "w_out": (n_targets, d_out, hidden),
            "b_out": (n_targets, d_out),
        }
        fan_in = {"w_in": d_in, "b_in": d_in, "w_out": hidden, "b_out": hidden}
        init_params(self, cells, shapes, fan_in, seed, arrays)
        self.probe_shape = (len(cells), n_targets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [c, b, E]`` (standardised) -> predictions ``[c, S, k, b]`` (standardised)."""
        c, n_targets, hidden, d_in = self.w_in.shape
        # first layer of all S probes of a cell as one GEMM: [S·h, E] @ [E, b]
        hid = torch.baddbmm(
            self.b_in.reshape(c, n_targets * hidden, 1),
            self.w_in.reshape(c, n_targets * hidden, d_in),
            x.transpose(1, 2),
        )
        pre = hid.view(c, n_targets, hidden, -1)
        return GeluReadout.apply(pre, self.w_out, self.b_out.unsqueeze(3))


def init_params(
    module: nn.Module,
    cells: range,
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


# --------------------------------------------------------------------------- validation


def as_numpy_indices(idx: ArrayLike, n: int, name: str, *, allow_empty: bool = False) -> np.ndarray:
    """Validate a 1-D array of unique sample indices into ``[0, n)``; int64."""
    arr = idx.detach().cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise ProbeInputError(
            f"{name}: expected a 1-D integer index array, got shape {arr.shape} dtype {arr.dtype}"
        )
    if arr.size == 0:
        if allow_empty:
            return np.empty(0, dtype=np.int64)
        raise SplitTooSmallError(f"{name}: expected at least 1 sample index, got none")
    if arr.min() < 0 or arr.max() >= n:
        raise ProbeInputError(
            f"{name}: expected indices in [0, {n}), got range [{arr.min()}, {arr.max()}]"
        )
    if np.unique(arr).size != arr.size:
        raise ProbeInputError(f"{name}: expected unique indices, got repeated ones")
    return arr.astype(np.int64)


def check_splits(
    n: int, train_idx: ArrayLike, val_idx: ArrayLike, test_idx: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate three disjoint index arrays into ``[0, n)``; only the test split may be empty."""
    splits = {
        "train_idx": as_numpy_indices(train_idx, n, "train_idx"),
        "val_idx": as_numpy_indices(val_idx, n, "val_idx"),
        "test_idx": as_numpy_indices(test_idx, n, "test_idx", allow_empty=True),
    }
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = np.intersect1d(splits[a], splits[b])
            if shared.size:
                raise ProbeInputError(
                    f"{a} and {b}: expected disjoint splits, both contain {shared.size} "
                    f"samples (first: {shared[0]})"
                )
    return splits["train_idx"], splits["val_idx"], splits["test_idx"]


def check_probe_arrays(X: object, Y: object) -> tuple[tuple[int, int, int], np.ndarray]:
    """Check ``X [n, C, E]`` (array-like with ``shape``) and ``Y [n, S, k]``.

    Returns ``((n, C, E), Y as float32 numpy)``; X is read (and checked for
    NaN/Inf) later, chunk by chunk.
    """
    shape = tuple(getattr(X, "shape", ()))
    if len(shape) != 3:
        raise ProbeInputError(f"X: expected 3 axes [n, C, E], got shape {shape}")
    y = to_numpy(Y)
    check_ndim(y, 3, "Y", "n, S, k")
    check_same_length(np.empty((shape[0], 0)), y, "X", "Y")
    if min(shape) < 1 or min(y.shape) < 1:
        raise ProbeInputError(f"X and Y: expected every axis >= 1, got {shape} and {y.shape}")
    check_finite(y, "Y")
    return (int(shape[0]), int(shape[1]), int(shape[2])), y


def to_numpy(a: object) -> np.ndarray:
    """``a`` (numpy, torch or array-like) as a new, writable float32 numpy array."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().to(torch.float32).numpy().copy()
    return np.array(a, dtype=np.float32)


def check_positive_int(value: object, name: str) -> int:
    """``value`` as an int >= 1, else :class:`ProbeInputError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ProbeInputError(f"{name}: expected an int >= 1, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------- standardisation


@dataclass(frozen=True)
class Standardiser:
    """``(v - mean) / scale`` with training statistics; ``scale`` is never 0."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray, axis: int) -> Standardiser:
        """Statistics over ``axis`` (the sample axis), computed in float64."""
        v = values.astype(np.float64)
        mean = v.mean(axis=axis)
        scale = v.std(axis=axis)
        scale[scale == 0] = 1.0
        return cls(mean.astype(np.float32), scale.astype(np.float32))


def standardised_cells(
    X: object, cells: range, stats: Standardiser, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Cells ``cells`` of ``X [n, C, E]``, standardised, as ``[c, n, E]`` on ``device``."""
    chunk = np.array(X[:, cells.start : cells.stop, :], dtype=np.float32)
    check_finite(chunk, f"X[:, {cells.start}:{cells.stop}, :]")
    z = (chunk - stats.mean[cells.start : cells.stop]) / stats.scale[cells.start : cells.stop]
    return torch.tensor(einops.rearrange(z, "n c e -> c n e"), dtype=dtype, device=device)


def cell_statistics(X: object, train_idx: np.ndarray, n_cells: int, chunk: int) -> Standardiser:
    """Per-(cell, feature) training mean/scale of ``X [n, C, E]``, ``chunk`` cells per read."""
    means, scales = [], []
    for start in range(0, n_cells, chunk):
        block = np.asarray(X[:, start : start + chunk, :], dtype=np.float32)[train_idx]
        stats = Standardiser.fit(block, axis=0)
        means.append(stats.mean)
        scales.append(stats.scale)
    return Standardiser(np.concatenate(means), np.concatenate(scales))


# --------------------------------------------------------------------------- training


@dataclass
class EarlyStopping:
    """Per-probe early-stopping record after training (tensors of ``probe_shape``)."""

    best_val_loss: torch.Tensor
    best_epoch: torch.Tensor
    epochs_run: int


def batched_loss(
    module: BatchedProbes, x: torch.Tensor, y: torch.Tensor, batch_size: int
) -> torch.Tensor:
    """Per-probe mean squared error over all samples of ``x [c, n, E]``, ``y [n, S, k]``."""
    total = torch.zeros(module.probe_shape, dtype=torch.float64, device=x.device)
    n = x.shape[1]
    with torch.no_grad():
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            loss = module.per_probe_loss(x[:, start:stop], y[start:stop])
            total += loss.to(torch.float64) * (stop - start)
    return total / n


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
    """
    params = list(module.parameters())
    optimizer = budget.make_optimizer(params)
    best = [p.detach().clone() for p in params]
    shape = module.probe_shape
    device = x_train.device
    best_loss = torch.full(shape, math.inf, dtype=torch.float64, device=device)
    best_epoch = torch.full(shape, -1, dtype=torch.int64, device=device)
    active = torch.ones(shape, dtype=torch.bool, device=device)
    n_train = x_train.shape[1]
    orders = minibatch_permutations(n_train, budget.seed)
    bar = tqdm(range(budget.epochs), desc=desc, disable=not progress, leave=False)
    epochs_run = 0
    for epoch in bar:
        order = next(orders).to(device)
        for start in range(0, n_train, budget.batch_size):
            idx = order[start : start + budget.batch_size]
            optimizer.zero_grad(set_to_none=True)
            module.per_probe_loss(x_train[:, idx], y_train[idx]).sum().backward()
            optimizer.step()
        epochs_run = epoch + 1
        val_loss = batched_loss(module, x_val, y_val, eval_batch)
        improved = active & (val_loss < best_loss)
        best_loss = torch.where(improved, val_loss, best_loss)
        best_epoch = torch.where(improved, epoch, best_epoch)
        with torch.no_grad():
            for p, b in zip(params, best, strict=True):
                b[improved] = p.detach()[improved]
        active &= epoch - best_epoch < budget.patience
        bar.set_postfix(active=int(active.sum()), best_val=float(best_loss.mean()))
        if not active.any():
            break
    with torch.no_grad():
        for p, b in zip(params, best, strict=True):
            p.copy_(b)
    return EarlyStopping(best_loss, best_epoch, epochs_run)


def predict_standardised(module: BatchedProbes, x: torch.Tensor, batch_size: int) -> np.ndarray:
    """Module predictions ``[n, c, S, k]`` (numpy) for ``x [c, n, E]``, computed in batches."""
    with torch.no_grad():
        parts = [module(x[:, s : s + batch_size]) for s in range(0, x.shape[1], batch_size)]
        pred = torch.cat(parts, dim=3) if parts else module(x)
    return einops.rearrange(pred.cpu().numpy(), "c s k n -> n c s k")


def held_out_metrics(pred: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``r2 [C, S]`` and ``nmse [C, S]`` of ``pred [n, C, S, k]`` against ``y [n, S, k]``.

    Pooled over the k coordinates (:mod:`infoprobe.probes.metrics`); float64,
    all NaN when there are no samples.
    """
    if y.shape[0] == 0:
        nan = np.full(pred.shape[1:3], np.nan)
        return nan, nan.copy()
    r2 = pooled_r2(y[:, None], pred)
    return r2.numpy(), nmse_from_r2(r2).numpy()


# --------------------------------------------------------------------------- memory


def cells_per_chunk(bytes_per_cell: int, n_cells: int, max_bytes: int) -> int:
    """How many cells fit in ``max_bytes`` (at least 1, at most ``n_cells``)."""
    return int(min(n_cells, max(1, max_bytes // max(1, bytes_per_cell))))


CPU_STEP_ACTIVATION_BYTES = 2 * 1024**2
"""On the CPU, cells are trained in groups whose minibatch hidden activations
(``4·c·S·h·b`` bytes) stay within this many bytes: the elementwise passes over
them (bias, GELU and its gradient) then run from cache. Measured on 2 shared
cores (C = 8, S = 32, E = 32, h = 64, b = 256): one cell per group (2 MiB) trains
2-3x faster than all 8 cells at once (16 MiB). Results do not depend on it."""


def mlp_bytes_per_cell(
    n: int, n_targets: int, d_in: int, hidden: int, d_out: int, batch: int, eval_batch: int
) -> int:
    """float32 bytes one cell of :class:`BatchedMLP` needs during a fit.

    ``4 · [5·S·P + n·E + 2·b·(E + 3·S·h + 2·S·k) + 2·b_eval·S·(h + k)]`` with
    ``P = E·h + h + h·k + k`` parameters per probe (weights, gradients, two
    Adam moments, best copy), the cell's standardised inputs for all n
    samples, a training minibatch's activations with their gradients, and an
    evaluation batch's activations.
    """
    per_probe = d_in * hidden + hidden + hidden * d_out + d_out
    floats = (
        5 * n_targets * per_probe
        + n * d_in
        + 2 * batch * (d_in + 3 * n_targets * hidden + 2 * n_targets * d_out)
        + 2 * eval_batch * n_targets * (hidden + d_out)
    )
    return 4 * floats


# --------------------------------------------------------------------------- the engine


ModuleFactory = Callable[[range, dict[str, np.ndarray] | None], BatchedProbes]


@dataclass
class ChunkedFit:
    """What :func:`fit_chunked` learns, for every cell (numpy, on the CPU).

    ``params`` name -> ``[C, ...]``; ``best_val_loss``/``best_epoch``
    ``[C, ...probe axes]``; ``test_pred [n_test, C, S, k]`` in original units;
    ``epochs_run``: epochs trained by each group of cells; ``chunk``: cells
    read at a time; ``group``: cells trained together.
    """

    params: dict[str, np.ndarray]
    x_stats: Standardiser
    y_stats: Standardiser
    best_val_loss: np.ndarray
    best_epoch: np.ndarray
    test_pred: np.ndarray
    epochs_run: list[int]
    chunk: int
    group: int


def fit_chunked(
    X: object,
    y: np.ndarray,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_cells: int,
    make_module: ModuleFactory,
    bytes_per_cell: int,
    activation_bytes_per_cell: int,
    budget: TrainingBudget,
    *,
    device: str | torch.device,
    max_memory_bytes: int,
    progress: bool,
    desc: str,
) -> ChunkedFit:
    """Standardise, train and predict the test split, ``chunk`` cells at a time.

    ``X [n, C, E]`` (any array with numpy slicing), ``y [n, S, k]`` float32.
    ``make_module(cells, None)`` builds freshly initialised probes for a range
    of cells. X is read ``chunk = max_memory_bytes // bytes_per_cell`` cells
    at a time; on the CPU each chunk is trained in groups of cells whose
    minibatch activations (``activation_bytes_per_cell`` each) fit in
    :data:`CPU_STEP_ACTIVATION_BYTES`. Groups are independent: the result does
    not depend on the chunk or group size (module docstring's seeding).
    """
    train_idx, val_idx, test_idx = splits
    device = torch.device(device)
    chunk = cells_per_chunk(bytes_per_cell, n_cells, max_memory_bytes)
    group = chunk
    if device.type == "cpu":
        group = cells_per_chunk(activation_bytes_per_cell, chunk, CPU_STEP_ACTIVATION_BYTES)
    x_stats = cell_statistics(X, train_idx, n_cells, chunk)
    y_stats = Standardiser.fit(y[train_idx], axis=0)
    z = torch.tensor((y - y_stats.mean) / y_stats.scale, device=device)
    eval_batch = budget.batch_size  # same-size buffers as training: freed memory is reused
    params: dict[str, list[np.ndarray]] = {}
    best_val, best_epoch, test_parts, epochs_run = [], [], [], []
    n_groups = sum(-(-min(chunk, n_cells - s) // group) for s in range(0, n_cells, chunk))
    overall = tqdm(total=n_cells, desc=desc, unit="cell", disable=not progress or n_groups == 1)
    for start in range(0, n_cells, chunk):
        cells = range(start, min(start + chunk, n_cells))
        x_chunk = standardised_cells(X, cells, x_stats, device, torch.float32)
        for first in range(cells.start, cells.stop, group):
            trained = range(first, min(first + group, cells.stop))
            x = x_chunk[trained.start - cells.start : trained.stop - cells.start]
            module = make_module(trained, None).to(device)
            record = train_with_early_stopping(
                module,
                x[:, train_idx],
                z[train_idx],
                x[:, val_idx],
                z[val_idx],
                budget,
                eval_batch=eval_batch,
                progress=progress,
                desc=f"{desc} cells {trained.start}-{trained.stop - 1}/{n_cells}",
            )
            test_parts.append(predict_standardised(module, x[:, test_idx], eval_batch))
            for name, value in module.arrays().items():
                params.setdefault(name, []).append(value)
            best_val.append(record.best_val_loss.cpu().numpy())
            best_epoch.append(record.best_epoch.cpu().numpy())
            epochs_run.append(record.epochs_run)
            overall.update(len(trained))
    overall.close()
    test_z = np.concatenate(test_parts, axis=1)
    return ChunkedFit(
        params={name: np.concatenate(v) for name, v in params.items()},
        x_stats=x_stats,
        y_stats=y_stats,
        best_val_loss=np.concatenate(best_val),
        best_epoch=np.concatenate(best_epoch),
        test_pred=test_z * y_stats.scale + y_stats.mean,
        epochs_run=epochs_run,
        chunk=chunk,
        group=group,
    )


def predict_chunked(
    X: object,
    fit: ChunkedFit,
    make_module: ModuleFactory,
    *,
    batch_size: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> np.ndarray:
    """Predictions ``[n, C, S, k]`` (original units) of fitted probes on ``X [n, C, E]``."""
    n_cells = fit.x_stats.mean.shape[0]
    shape = tuple(getattr(X, "shape", ()))
    if len(shape) != 3 or shape[1:] != fit.x_stats.mean.shape:
        raise ProbeInputError(
            f"X: expected shape [n, {n_cells}, {fit.x_stats.mean.shape[1]}], got {shape}"
        )
    parts = []
    for start in range(0, n_cells, fit.chunk):
        cells = range(start, min(start + fit.chunk, n_cells))
        sliced = {name: v[cells.start : cells.stop] for name, v in fit.params.items()}
        module = make_module(cells, sliced).to(device=device, dtype=dtype)
        x = standardised_cells(X, cells, fit.x_stats, torch.device(device), dtype)
        parts.append(predict_standardised(module, x, batch_size))
    z = np.concatenate(parts, axis=1)
    return z * fit.y_stats.scale.astype(z.dtype) + fit.y_stats.mean.astype(z.dtype)


# --------------------------------------------------------------------------- public API


@dataclass
class MLPProbeFit:
    """Fitted batched MLP probes (all arrays numpy).

    ``test_pred [n_test, C, S, k]``: test-split predictions in original units,
    rows in the order of ``test_idx``. ``r2 [C, S]``, ``nmse [C, S]``: test
    metrics (module docstring). ``best_val_loss [C, S]``: standardised
    validation MSE at each probe's best epoch; ``best_epoch [C, S]`` (0-based).
    ``params``: ``w_in [C, S, h, E]``, ``b_in [C, S, h]``, ``w_out [C, S, k, h]``,
    ``b_out [C, S, k]`` acting on standardised inputs/targets.
    """

    test_pred: np.ndarray
    r2: np.ndarray
    nmse: np.ndarray
    best_val_loss: np.ndarray
    best_epoch: np.ndarray
    test_idx: np.ndarray
    budget: TrainingBudget
    hidden: int
    engine: ChunkedFit = field(repr=False)

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The probes' weights (see the class docstring)."""
        return self.engine.params

    def settings(self) -> dict[str, object]:
        """The probe settings as plain data (for provenance in results files)."""
        return {"probe": "mlp", "hidden": self.hidden, **vars(self.budget)}

    def predict(
        self,
        X: ArrayLike,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> np.ndarray:
        """Predictions ``[n, C, S, k]`` (original units) for states ``X [n, C, E]``.

        ``dtype=torch.float64`` computes in double precision (bit-stable
        under row subsets, used by the sklearn estimator).
        """
        n_targets, k = self.engine.y_stats.mean.shape
        factory = mlp_factory(n_targets, self.engine.x_stats.mean.shape[1], self.hidden, k, 0)
        return predict_chunked(
            X,
            self.engine,
            factory,
            batch_size=4 * self.budget.batch_size,
            device=device,
            dtype=dtype,
        )


def mlp_factory(n_targets: int, d_in: int, hidden: int, d_out: int, seed: int) -> ModuleFactory:
    """A :data:`ModuleFactory` building :class:`BatchedMLP` probes for a range of cells."""

    def make(cells: range, arrays: dict[str, np.ndarray] | None) -> BatchedProbes:
        return BatchedMLP(cells, n_targets, d_in, hidden, d_out, seed=seed, arrays=arrays)

    return make


def fit_mlp_probes(
    X: ArrayLike,
    Y: ArrayLike,
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    epochs: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    optimizer: OptimizerName = "adam",
    patience: int = 10,
    seed: int = 0,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> MLPProbeFit:
    """Fit one MLP probe ``E -> hidden -> GELU -> k`` per (cell c, target s), all at once.

    ``X [n, C, E]``: states (numpy, torch, or any array with numpy slicing such
    as an h5py dataset; read ``chunk`` cells at a time). ``Y [n, S, k]``:
    targets. ``train_idx``/``val_idx``/``test_idx``: disjoint sample indices;
    probes train on train, early-stop per probe on val, are scored on test
    (``test_idx`` may be empty: ``r2``/``nmse`` are then NaN).
    Every probe gets the same budget (``hidden``, ``epochs``, ``batch_size``,
    ``lr``, ``weight_decay``, ``optimizer``, ``patience``, ``seed``).

    Memory: cells are processed in chunks of
    ``c = max_memory_bytes // bytes_per_cell`` with ``bytes_per_cell =
    4·[5·S·P + n·E + 2·b·(E + 3·S·h + 2·S·k) + 2·b·S·(h + k)]``,
    ``P = E·h + h + h·k + k`` (see :func:`mlp_bytes_per_cell`); the result
    ``test_pred`` adds ``4·n_test·C·S·k`` bytes. On the CPU a chunk is trained
    in cache-sized groups of cells (:data:`CPU_STEP_ACTIVATION_BYTES`).
    Results do not depend on the chunking or grouping.

    Raises :class:`ProbeInputError` on bad shapes, splits or non-finite values.
    """
    hidden = check_positive_int(hidden, "hidden")
    budget = TrainingBudget(epochs, batch_size, lr, weight_decay, optimizer, patience, seed)
    (n, n_cells, d_in), y = check_probe_arrays(X, Y)
    splits = check_splits(n, train_idx, val_idx, test_idx)
    _, n_targets, k = y.shape
    per_cell = mlp_bytes_per_cell(n, n_targets, d_in, hidden, k, batch_size, batch_size)
    engine = fit_chunked(
        X,
        y,
        splits,
        n_cells,
        mlp_factory(n_targets, d_in, hidden, k, seed),
        per_cell,
        4 * n_targets * hidden * batch_size,
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
        desc="MLP probes",
    )
    test_idx_arr = splits[2]
    r2, nmse = held_out_metrics(engine.test_pred, y[test_idx_arr])
    return MLPProbeFit(
        test_pred=engine.test_pred,
        r2=r2,
        nmse=nmse,
        best_val_loss=engine.best_val_loss,
        best_epoch=engine.best_epoch,
        test_idx=test_idx_arr,
        budget=budget,
        hidden=hidden,
        engine=engine,
    )
