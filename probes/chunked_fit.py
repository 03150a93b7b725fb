"""Fitting batched probes on every cell of ``X [n, C, E]`` in memory-bounded chunks of cells.

Inputs ``X [n, C, E]`` hold every cell's state for every sample (any array with
numpy slicing, such as an h5py dataset), targets ``y [n, S, k]`` every target.
:func:`fit_chunked` standardises both, reads X ``chunk`` cells at a time,
trains each chunk with :func:`~infoprobe.probes.batched_training.train_with_early_stopping`
(on the CPU in cache-sized groups of cells) and predicts the test split;
:func:`predict_chunked` applies the fitted probes to new states. The probes
themselves come from a :data:`ModuleFactory` (e.g. :mod:`infoprobe.probes.mlp`,
:mod:`infoprobe.probes.query`).

Conventions fixed here (shared by every batched probe):

- Inputs are standardised per (cell, feature) and targets per (target,
  coordinate) with *training* statistics (mean, population std; a zero std is
  replaced by 1). Probes train on standardised values; predictions are
  returned in the original units.
- Groups of cells are independent (per-cell seeding and the shared minibatch
  order of :mod:`infoprobe.probes.batched_training`), so results do not depend
  on the chunk or group size.

Metrics (:func:`held_out_metrics`, per (c, s), on the test split, in original
units; the definitions of :mod:`infoprobe.probes.metrics`): ``r2 [C, S]``
pooled over the k coordinates and ``nmse = 1 - r2``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import einops
import numpy as np
import torch
from tqdm.auto import tqdm

from infoprobe.probes.batched_training import (
    BatchedProbes,
    TrainingBudget,
    predict_standardised,
    train_with_early_stopping,
)
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.metrics import nmse_from_r2, pooled_r2
from infoprobe.probes.validate import check_finite

__all__ = [
    "DEFAULT_MAX_MEMORY_BYTES",
    "ChunkedFit",
    "ModuleFactory",
    "Standardiser",
    "fit_chunked",
    "held_out_metrics",
    "predict_chunked",
]

DEFAULT_MAX_MEMORY_BYTES = 2 * 1024**3
ModuleFactory = Callable[[range, dict[str, np.ndarray] | None], BatchedProbes]
"""Builds the probes of a range of cells: freshly initialised (``None``) or from
fitted parameter arrays already sliced to those cells."""


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


# --------------------------------------------------------------------------- memory


def cells_per_chunk(bytes_per_cell: int, n_cells: int, max_bytes: int) -> int:
    """How many cells fit in ``max_bytes`` (at least 1, at most ``n_cells``)."""
    return int(min(n_cells, max(1, max_bytes // max(1, bytes_per_cell))))


CPU_STEP_ACTIVATION_BYTES = 2 * 1024**2
"""On the CPU, cells are trained in groups whose minibatch hidden activations
(``activation_bytes_per_cell`` per cell; ``4·c·S·h·b`` bytes for the MLP probes)
stay within this many bytes: the elementwise passes over them (for the MLP: bias,
GELU and its gradient) then run from cache. Measured on 2 shared
cores (C = 8, S = 32, E = 32, h = 64, b = 256): one cell per group (2 MiB) trains
2-3x faster than all 8 cells at once (16 MiB). Results do not depend on it."""


# --------------------------------------------------------------------------- the engine


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
    :data:`CPU_STEP_ACTIVATION_BYTES`, by ``torch.get_num_threads()`` worker
    threads with one intra-op thread each (small operations split over OpenMP
    threads wait for the slowest one, which on a shared machine can be a
    descheduled thread). Groups are independent: the result does not depend on
    the chunk or group size or the number of workers (per-cell seeding of
    :mod:`infoprobe.probes.batched_training`).
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
    groups = [
        range(first, min(first + group, start + chunk, n_cells))
        for start in range(0, n_cells, chunk)
        for first in range(start, min(start + chunk, n_cells), group)
    ]
    threads = torch.get_num_threads()
    workers = min(threads, len(groups)) if device.type == "cpu" else 1
    overall = tqdm(total=n_cells, desc=desc, unit="cell", disable=not progress or len(groups) == 1)

    def train_group(cells: range, x: torch.Tensor) -> tuple:
        """Train the probes of ``cells`` on their standardised states ``x [c, n, E]``."""
        torch.set_num_threads(max(1, threads // workers))  # this thread only
        module = make_module(cells, None).to(device)
        record = train_with_early_stopping(
            module,
            x[:, train_idx],
            z[train_idx],
            x[:, val_idx],
            z[val_idx],
            budget,
            eval_batch=eval_batch,
            progress=progress and workers == 1,
            desc=f"{desc} cells {cells.start}-{cells.stop - 1}/{n_cells}",
        )
        return (
            predict_standardised(module, x[:, test_idx], eval_batch),
            module.arrays(),
            record.best_val_loss.cpu().numpy(),
            record.best_epoch.cpu().numpy(),
            record.epochs_run,
        )

    results = []
    try:
        with ThreadPoolExecutor(workers) as pool:  # groups are independent: one per core
            for start in range(0, n_cells, chunk):
                cells = range(start, min(start + chunk, n_cells))
                x_chunk = standardised_cells(X, cells, x_stats, device, torch.float32)
                mine = [g for g in groups if g.start in cells]
                slices = [x_chunk[g.start - start : g.stop - start] for g in mine]
                for result, trained in zip(pool.map(train_group, mine, slices), mine, strict=True):
                    results.append(result)
                    overall.update(len(trained))
    finally:
        torch.set_num_threads(threads)  # the workers' setting is process-wide: restore it
    test_parts, arrays, best_val, best_epoch, epochs_run = map(list, zip(*results, strict=True))
    params = {name: [a[name] for a in arrays] for name in arrays[0]}
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


# --------------------------------------------------------------------------- metrics


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
