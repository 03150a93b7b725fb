"""Fitting batched probes on every cell of ``X [n, C, E]`` in memory-bounded chunks of cells.

Inputs ``X [n, C, E]`` hold every cell's state for every sample (any array with
numpy slicing, such as an h5py dataset), targets ``y [n, S, k]`` every target.
:func:`fit_batched` is the one fit path of the MLP and query probes: it checks the
arrays, and :func:`fit_chunked` standardises them, reads X ``chunk`` cells at a time,
trains each chunk with :func:`~infoprobe.probes.batched_training.train_with_early_stopping`
(on the CPU in cache-sized groups of cells, several datasets in one worker pool) and
predicts the test split; :func:`predict_chunked` applies the fitted probes to new states.
The probes themselves come from a :class:`ProbeDesign` (a :data:`ModuleFactory` and its
memory per cell: :mod:`infoprobe.probes.mlp`, :mod:`infoprobe.probes.query`), and their
results share :class:`BatchedProbeFit`.

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

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import einops
import numpy as np
import torch
from tqdm.auto import tqdm

from infoprobe.probes.batched_training import (
    BatchedProbes,
    TrainingBudget,
    accelerator_of,
    predict_standardised,
    train_with_early_stopping,
)
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.metrics import nmse_from_r2, pooled_r2
from infoprobe.probes.refits import refit_failed
from infoprobe.probes.validate import check_finite, check_probe_arrays, check_splits

__all__ = [
    "DEFAULT_MAX_MEMORY_BYTES",
    "BatchedProbeFit",
    "ChunkedFit",
    "HeldOut",
    "ModuleFactory",
    "ProbeDesign",
    "ProbeShape",
    "Standardiser",
    "fit_batched",
    "fit_checked",
    "fit_chunked",
    "held_out_metrics",
    "memory_budget",
    "predict_chunked",
]

DEFAULT_MAX_MEMORY_BYTES = 2 * 1024**3
"""The memory a fit may hold at once on the CPU, and on an accelerator when none is given
(:func:`memory_budget`)."""
DEVICE_MEMORY_SHARE = 0.5
"""On a CUDA device the default budget is this share of its free memory (the chunk is then
one group: the larger it is, the fewer the steps)."""
CellKeys = Sequence[int | tuple[int, int]]
ModuleFactory = Callable[[CellKeys, dict[str, np.ndarray] | None], BatchedProbes]
"""Builds the probes of some cells (a range of indices, or (cell, start) keys of restarts,
:func:`~infoprobe.probes.batched_training.cell_generator`): freshly initialised (``None``)
or from fitted parameter arrays already sliced to those cells."""
Evaluator = Callable[[BatchedProbes, torch.Tensor, torch.Tensor], np.ndarray]
"""A design's own reading of the test split (:attr:`ProbeDesign.evaluate`)."""
Validator = Callable[
    [BatchedProbes, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], np.ndarray
]
"""A design's own judgement of a fit on the validation split (:attr:`ProbeDesign.validate`)."""


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
"""On the CPU, cells are trained in groups whose per-step buffers
(:func:`step_bytes` per cell: ``4·S·h·b`` bytes of pre-activations for the MLP
probes; for the query probe with the fused kernel ``8·h·b``, the state and its gradient)
stay within this many bytes, so a step's passes over them run from cache. Measured on 2
shared cores (C = 8, S = 32, E = 32, h = 64, b = 256): one cell per group (2 MiB) trains
2-3x faster than all 8 cells at once (16 MiB). Results do not depend on it."""


def memory_budget(device: torch.device, requested: int) -> int:
    """The bytes a fit may hold on ``device``: ``requested``, except that the default
    (:data:`DEFAULT_MAX_MEMORY_BYTES`) becomes :data:`DEVICE_MEMORY_SHARE` of a CUDA
    device's free memory."""
    if device.type != "cuda" or requested != DEFAULT_MAX_MEMORY_BYTES:
        return requested
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(free * DEVICE_MEMORY_SHARE))


def _mean_loss(probe: BatchedProbes, z_val: torch.Tensor, shape: tuple) -> np.ndarray | None:
    """:meth:`BatchedProbes.mean_loss` of the validation targets for every probe, ``shape``."""
    mean = probe.mean_loss(z_val.cpu())
    return None if mean is None else np.broadcast_to(mean.double().numpy(), shape).copy()


def step_bytes(design: ProbeDesign, probe: BatchedProbes, budget: TrainingBudget) -> int:
    """Bytes per cell a CPU training step streams through: the accelerator's where it
    serves the design's module (``probe``, one cell of it), else the design's
    ``activation_bytes_per_cell``."""
    fast = accelerator_of(probe, torch.device("cpu"))
    if fast is None:
        return design.activation_bytes_per_cell
    return fast.activation_bytes(probe, budget.batch_size)


# --------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class ProbeDesign:
    """One batched probe family at fixed sizes: how its modules are built and what a cell
    costs (float32 bytes of a fit, and of one training minibatch's hidden activations)."""

    make_module: ModuleFactory
    bytes_per_cell: int
    activation_bytes_per_cell: int
    desc: str
    evaluate: Evaluator | None = None
    """What the test split keeps of a fitted group: ``None`` for its predictions (in
    original units), else a function of (module, standardised test states ``[c, n, E]``,
    standardised test targets ``[n, S, k]``) returning ``[n, c, ...]`` (kept as is)."""
    validate: Validator | None = None
    """The design's statistics of a fitted group on the validation split, ``[c, ...]``
    (:attr:`ChunkedFit.val_stats`), from (module, standardised training states ``[c, n,
    E]`` and targets ``[n, S, k]``, the same of the validation rows)."""
    statistics: tuple[str, ...] = ()
    """The names of ``validate``'s statistics (its axis 1)."""
    judge: Callable[[np.ndarray], np.ndarray] | None = None
    """Failure bits (:data:`~infoprobe.probes.refits.FAILURES`) the design reads in its
    validation statistics ``[C, ...]``: uint8 ``[C, ...probe axes or fewer]``."""


@dataclass
class ChunkedFit:
    """What :func:`fit_chunked` learns, for every cell (numpy, on the CPU).

    ``params`` name -> ``[C, ...]``; ``best_val_loss``/``best_epoch``
    ``[C, ...probe axes]``; ``test_pred [n_test, C, S, k]`` in original units (or what
    the design's ``evaluate`` returned, ``[n_test, C, ...]``);
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
    start_val_loss: np.ndarray | None = None
    """``[C, ...probe axes]``: the validation loss of each probe's initial weights."""
    starts: np.ndarray | None = None
    """``[C]`` int: the starts each cell was fitted from (1, or more after restarts)."""
    val_stats: np.ndarray | None = None
    """``[C, len(val_names), ...]``: what the design's ``validate`` read of the validation
    split."""
    val_names: tuple[str, ...] = ()
    """The names of ``val_stats``' statistics."""
    failures: np.ndarray | None = None
    """``[C, ...probe axes]`` uint8: why each probe's kept fit failed (0: it did not;
    bits as :data:`~infoprobe.probes.refits.FAILURES`)."""
    mean_val_loss: np.ndarray | None = None
    """``[C, ...probe axes]``: the validation loss of predicting the training mean (a
    squared-error family; None for another loss)."""


Dataset = tuple[object, np.ndarray]
"""One fit's data: states ``X [n, C, E]`` (any array with numpy slicing) and targets
``y [n, S, k]`` float32."""


def fit_chunked(
    datasets: Sequence[Dataset],
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_cells: int,
    design: ProbeDesign,
    budget: TrainingBudget,
    *,
    device: str | torch.device,
    max_memory_bytes: int,
    progress: bool,
) -> list[ChunkedFit]:
    """Standardise, train and predict the test split of every dataset, ``chunk`` cells at a time.

    Each ``(X [n, C, E], y [n, S, k])`` of ``datasets`` is one independent fit (for example
    a probe, its shuffled control and its random-init control); all of them share the
    splits, the probe design and the budget, and one ``fit`` is returned per dataset, in
    order. Datasets that pass the same ``X`` object share its statistics and its
    standardised chunks. X is read ``chunk = max_memory_bytes // (bytes_per_cell ·
    len(datasets))`` cells at a time; on the CPU each chunk is trained in groups of cells
    whose minibatch activations (``design.activation_bytes_per_cell`` each) fit in
    :data:`CPU_STEP_ACTIVATION_BYTES`, by ``torch.get_num_threads()`` worker threads with
    one intra-op thread each (small operations split over OpenMP threads wait for the
    slowest one, which on a shared machine can be a descheduled thread). The groups of
    every dataset go to one pool in dataset order, so no worker idles at the end of one
    fit while another fit has groups left. Groups are independent: the result does not
    depend on the chunk or group size, the number of workers or the other datasets
    (per-cell seeding of :mod:`infoprobe.probes.batched_training`).
    """
    train_idx, val_idx, test_idx = splits
    device = torch.device(device)
    max_memory_bytes = memory_budget(device, max_memory_bytes)
    probe = design.make_module(range(1), None)  # one cell: what the design's module is
    chunk = cells_per_chunk(design.bytes_per_cell * len(datasets), n_cells, max_memory_bytes)
    group = chunk
    if device.type == "cpu":
        group = cells_per_chunk(step_bytes(design, probe, budget), chunk, CPU_STEP_ACTIVATION_BYTES)
    x_stats: dict[int, Standardiser] = {}  # by id(X): datasets may share their states
    for X, _ in datasets:
        if id(X) not in x_stats:
            x_stats[id(X)] = cell_statistics(X, train_idx, n_cells, chunk)
    y_stats = [Standardiser.fit(y[train_idx], axis=0) for _, y in datasets]
    z = [
        torch.tensor((y - stats.mean) / stats.scale, device=device)
        for (_, y), stats in zip(datasets, y_stats, strict=True)
    ]
    eval_batch = budget.batch_size  # same-size buffers as training: freed memory is reused
    threads = torch.get_num_threads()
    n_groups = len(datasets) * -(-n_cells // group)
    workers = min(threads, n_groups) if device.type == "cpu" else 1
    total = n_cells * len(datasets)
    quiet = not progress or n_groups == 1
    overall = tqdm(total=total, desc=design.desc, unit="cell", disable=quiet)

    def train_group(job: tuple[int, range, torch.Tensor]) -> tuple:
        """Train the probes of ``cells`` of dataset ``d`` on their states ``x [c, n, E]``."""
        d, cells, x = job
        torch.set_num_threads(max(1, threads // workers))  # this thread only
        module = design.make_module(cells, None).to(device)
        record = train_with_early_stopping(
            module,
            x[:, train_idx],
            z[d][train_idx],
            x[:, val_idx],
            z[d][val_idx],
            budget,
            eval_batch=eval_batch,
            progress=progress and workers == 1,
            desc=f"{design.desc} cells {cells.start}-{cells.stop - 1}/{n_cells}",
        )
        if design.evaluate is None:
            test = predict_standardised(module, x[:, test_idx], eval_batch)
        else:
            with torch.no_grad():
                test = design.evaluate(module, x[:, test_idx], z[d][test_idx])
        val_stats = None
        if design.validate is not None:
            with torch.no_grad():
                val_stats = design.validate(
                    module, x[:, train_idx], z[d][train_idx], x[:, val_idx], z[d][val_idx]
                )
        return (
            test,
            module.arrays(),
            record.best_val_loss.cpu().numpy(),
            record.best_epoch.cpu().numpy(),
            record.epochs_run,
            record.start_val_loss.cpu().numpy(),
            val_stats,
        )

    results: list[list[tuple]] = [[] for _ in datasets]
    try:
        with ThreadPoolExecutor(workers) as pool:  # groups are independent: one per core
            for start in range(0, n_cells, chunk):
                cells = range(start, min(start + chunk, n_cells))
                chunks: dict[int, torch.Tensor] = {}
                jobs = []
                for d, (X, _) in enumerate(datasets):
                    if id(X) not in chunks:
                        chunks[id(X)] = standardised_cells(
                            X, cells, x_stats[id(X)], device, torch.float32
                        )
                    for first in range(start, cells.stop, group):
                        trained = range(first, min(first + group, cells.stop))
                        x = chunks[id(X)][first - start : trained.stop - start]
                        jobs.append((d, trained, x))
                for (d, trained, _), result in zip(jobs, pool.map(train_group, jobs), strict=True):
                    results[d].append(result)
                    overall.update(len(trained))
    finally:
        torch.set_num_threads(threads)  # the workers' setting is process-wide: restore it
    overall.close()
    fits = []
    for d, ((X, _), stats, parts) in enumerate(zip(datasets, y_stats, results, strict=True)):
        test_parts, arrays, best_val, best_epoch, epochs_run, start_val, val_stats = map(
            list, zip(*parts, strict=True)
        )
        test_z = np.concatenate(test_parts, axis=1)
        fits.append(
            ChunkedFit(
                params={name: np.concatenate([a[name] for a in arrays]) for name in arrays[0]},
                x_stats=x_stats[id(X)],
                y_stats=stats,
                best_val_loss=np.concatenate(best_val),
                best_epoch=np.concatenate(best_epoch),
                test_pred=test_z if design.evaluate else test_z * stats.scale + stats.mean,
                epochs_run=epochs_run,
                chunk=chunk,
                group=group,
                start_val_loss=np.concatenate(start_val),
                starts=np.ones(n_cells, dtype=np.int64),
                val_stats=None if val_stats[0] is None else np.concatenate(val_stats),
                val_names=design.statistics,
                mean_val_loss=_mean_loss(probe, z[d][val_idx], np.concatenate(best_val).shape),
            )
        )
    return fits


# --------------------------------------------------------------------------- the shared fit path


@dataclass(frozen=True)
class ProbeShape:
    """Sizes of a batched fit: ``n`` samples, ``n_cells`` C, ``d_in`` E, ``n_targets`` S and
    ``d_out`` k (``X [n, C, E]``, ``Y [n, S, k]``)."""

    n: int
    n_cells: int
    d_in: int
    n_targets: int
    d_out: int


@dataclass
class BatchedProbeFit:
    """Fitted batched probes of one dataset (all arrays numpy); what the MLP and query
    probes have in common.

    ``test_pred [n_test, C, S, k]``: test-split predictions in original units, rows in the
    order of ``test_idx``. ``r2 [C, S]``, ``nmse [C, S]``: test metrics pooled over the k
    coordinates. ``best_val_loss``/``best_epoch`` ``[C, ...probe axes]``: per-probe early
    stopping (standardised validation MSE, 0-based epoch). ``engine``: the
    :class:`ChunkedFit` (weights, standardisation).
    """

    probe = "batched"

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
        """The probes' weights, leading axis = cell (acting on standardised data)."""
        return self.engine.params

    def design_settings(self) -> dict[str, object]:
        """Settings of the probe design beyond its hidden width (none here)."""
        return {}

    def settings(self) -> dict[str, object]:
        """The probe settings as plain data (for provenance in results files)."""
        return {
            "probe": self.probe,
            "hidden": self.hidden,
            **self.design_settings(),
            **vars(self.budget),
        }

    def factory(self) -> ModuleFactory:
        """The module factory that rebuilds these probes from their weights."""
        raise NotImplementedError

    def predict(
        self,
        X: object,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> np.ndarray:
        """Predictions ``[n, C, S, k]`` (original units) for states ``X [n, C, E]``.

        ``dtype=torch.float64`` computes in double precision (bit-stable under row
        subsets, used by the sklearn estimator).
        """
        batch = 4 * self.budget.batch_size
        return predict_chunked(
            X, self.engine, self.factory(), batch_size=batch, device=device, dtype=dtype
        )


@dataclass
class HeldOut:
    """One dataset's fit from :func:`fit_batched`: the engine, the test targets ``y_test
    [n_test, S, k]``, their rows ``test_idx`` and the test metrics ``r2``/``nmse [C, S]``."""

    engine: ChunkedFit
    y_test: np.ndarray
    test_idx: np.ndarray
    r2: np.ndarray
    nmse: np.ndarray

    def fields(self, budget: TrainingBudget, hidden: int) -> dict[str, object]:
        """The :class:`BatchedProbeFit` fields of this fit."""
        return {
            "test_pred": self.engine.test_pred,
            "r2": self.r2,
            "nmse": self.nmse,
            "best_val_loss": self.engine.best_val_loss,
            "best_epoch": self.engine.best_epoch,
            "test_idx": self.test_idx,
            "budget": budget,
            "hidden": hidden,
            "engine": self.engine,
        }


def fit_checked(
    datasets: Sequence[tuple[object, object]],
    splits: tuple[object, object, object],
    make_design: Callable[[ProbeShape], ProbeDesign],
    budget: TrainingBudget,
    *,
    device: str | torch.device,
    max_memory_bytes: int,
    progress: bool,
) -> tuple[list[ChunkedFit], list[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Check the arrays and the splits, then fit every dataset in one pool.

    ``datasets``: ``(X [n, C, E], Y [n, S, k])`` pairs of identical shapes (X: any array
    with numpy slicing; read chunk by chunk). ``splits``: train, validation and test sample
    indices (disjoint; test may be empty). ``make_design`` builds the probe design from the
    sizes. Returns (one :class:`ChunkedFit` per dataset, their targets ``Y`` as float32,
    the checked splits).
    """
    if not isinstance(budget, TrainingBudget):
        raise ProbeInputError(
            f"budget: expected a TrainingBudget, got {type(budget).__name__} {budget!r}"
        )
    if not datasets:
        raise ProbeInputError("datasets: expected at least one (X, Y) pair, got none")
    checked = [check_probe_arrays(X, Y) for X, Y in datasets]
    (n, n_cells, d_in), y_first = checked[0]
    for i, (shape, y) in enumerate(checked[1:], start=1):
        if shape != (n, n_cells, d_in) or y.shape != y_first.shape:
            raise ProbeInputError(
                f"datasets[{i}]: expected X {[n, n_cells, d_in]} and Y {list(y_first.shape)} "
                f"(the shapes of datasets[0]), got {list(shape)} and {list(y.shape)}"
            )
    split = check_splits(n, *splits)
    design = make_design(ProbeShape(n, n_cells, d_in, *y_first.shape[1:]))
    pairs = [(X, y) for (X, _), (_, y) in zip(datasets, checked, strict=True)]
    fit = partial(fit_chunked, budget=budget, device=device, max_memory_bytes=max_memory_bytes)
    engines = fit(pairs, split, n_cells, design, progress=progress)
    codes = refit_failed(
        pairs, engines, split, design, partial(fit, progress=False), budget.restarts
    )
    for engine, failures in zip(engines, codes, strict=True):
        engine.failures = failures
    return engines, [y for _, y in pairs], split


def fit_batched(
    datasets: Sequence[tuple[object, object]],
    splits: tuple[object, object, object],
    make_design: Callable[[ProbeShape], ProbeDesign],
    budget: TrainingBudget,
    *,
    device: str | torch.device,
    max_memory_bytes: int,
    progress: bool,
) -> list[HeldOut]:
    """:func:`fit_checked`, then score the test split's predictions (the metrics are NaN
    when it is empty). Returns one :class:`HeldOut` per dataset, in order."""
    engines, ys, split = fit_checked(
        datasets,
        splits,
        make_design,
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )
    out = []
    for engine, y in zip(engines, ys, strict=True):
        y_test = y[split[2]]
        r2, nmse = held_out_metrics(engine.test_pred, y_test)
        out.append(HeldOut(engine, y_test, split[2], r2, nmse))
    return out


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
