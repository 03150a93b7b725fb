"""Batched MLP probes: every (cell, target) probe trained at once as one module.

A *cell* c is one state we read from (for example one ``(layer, token)`` pair,
``h(t, l)``); a *target* s is one thing we try to decode (for example ``x(s)``
of one data position). Inputs ``X [n, C, E]`` hold every cell's state for
every sample, targets ``Y [n, S, k]`` every target. One probe per ``(c, s)``::

    x̂_{c,s} = W2_{c,s} · GELU(W1_{c,s} · h_c + b1_{c,s}) + b2_{c,s}
    h_c ∈ R^E  ->  hidden (default 64)  ->  R^k

All C·S probes live in grouped weight tensors (leading axes ``[C, S]``) and are
trained together with einsum/bmm, so one optimiser step updates every probe.
Every probe gets the same budget (hidden width plus a
:class:`~infoprobe.probes.batched_training.TrainingBudget`); training, early
stopping per probe, seeding and minibatch order follow
:mod:`infoprobe.probes.batched_training`, standardisation and memory-bounded
chunking :mod:`infoprobe.probes.chunked_fit`.

Metrics (per (c, s), on the test split, in original units; the definitions of
:mod:`infoprobe.probes.metrics`, shared with the ridge probes):

- ``r2 = 1 - SSE / SST``, pooled over the k coordinates of the target:
  ``SSE = Σ_i Σ_j (ŷ_ij - y_ij)²``, ``SST = Σ_i Σ_j (y_ij - ȳ_j)²`` with the
  test mean ȳ (``sklearn.metrics.r2_score(..., multioutput="variance_weighted")``).
- ``nmse = SSE / SST = 1 - r2`` (MSE relative to the target variance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from infoprobe.probes import fused
from infoprobe.probes.batched_training import BatchedProbes, TrainingBudget, init_params
from infoprobe.probes.chunked_fit import (
    DEFAULT_MAX_MEMORY_BYTES,
    BatchedProbeFit,
    ModuleFactory,
    ProbeDesign,
    ProbeShape,
    fit_batched,
)
from infoprobe.probes.references import (
    REGRESSION_STATISTICS,
    judge_regression,
    regression_statistics,
)
from infoprobe.probes.validate import ArrayLike, check_positive_int

__all__ = [
    "BatchedMLP",
    "MLPProbeFit",
    "fit_mlp_probe_sets",
    "fit_mlp_probes",
    "mlp_bytes_per_cell",
    "mlp_design",
    "mlp_factory",
]


# --------------------------------------------------------------------------- modules


class BatchedMLP(BatchedProbes):
    """C·S independent MLPs ``E -> hidden -> GELU -> k``, one per (cell, target).

    Parameters (``nn.Linear`` orientation): ``w_in [c, S, hidden, E]``,
    ``b_in [c, S, hidden]``, ``w_out [c, S, k, hidden]``, ``b_out [c, S, k]``.
    ``cells`` are the global
    cell indices this module holds (they seed the initial weights).
    """

    loss_dims = (2, 3)
    accelerator = fused.MLP

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
        act = nn.functional.gelu(hid.view(c, n_targets, hidden, -1))
        return torch.matmul(self.w_out, act) + self.b_out.unsqueeze(3)


# --------------------------------------------------------------------------- memory


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


# --------------------------------------------------------------------------- public API


@dataclass
class MLPProbeFit(BatchedProbeFit):
    """Fitted batched MLP probes (all arrays numpy; :class:`BatchedProbeFit`).

    ``best_val_loss [C, S]``: standardised validation MSE at each probe's best epoch;
    ``best_epoch [C, S]`` (0-based). ``params``: ``w_in [C, S, h, E]``, ``b_in [C, S, h]``,
    ``w_out [C, S, k, h]``, ``b_out [C, S, k]`` acting on standardised inputs/targets.
    """

    probe = "mlp"

    def factory(self) -> ModuleFactory:
        """The module factory that rebuilds these probes from their weights."""
        n_targets, k = self.engine.y_stats.mean.shape
        return mlp_factory(n_targets, self.engine.x_stats.mean.shape[1], self.hidden, k, 0)


def mlp_factory(n_targets: int, d_in: int, hidden: int, d_out: int, seed: int) -> ModuleFactory:
    """A :data:`ModuleFactory` building :class:`BatchedMLP` probes for a range of cells."""

    def make(cells: range, arrays: dict[str, np.ndarray] | None) -> BatchedProbes:
        return BatchedMLP(cells, n_targets, d_in, hidden, d_out, seed=seed, arrays=arrays)

    return make


def mlp_design(shape: ProbeShape, hidden: int, budget: TrainingBudget) -> ProbeDesign:
    """The :class:`ProbeDesign` of MLP probes of width ``hidden`` for these sizes."""
    S, k, b = shape.n_targets, shape.d_out, budget.batch_size
    return ProbeDesign(
        make_module=mlp_factory(S, shape.d_in, hidden, k, budget.seed),
        bytes_per_cell=mlp_bytes_per_cell(shape.n, S, shape.d_in, hidden, k, b, b),
        activation_bytes_per_cell=4 * S * hidden * b,
        desc="MLP probes",
        validate=regression_statistics,
        statistics=REGRESSION_STATISTICS,
        judge=judge_regression,
    )


def fit_mlp_probe_sets(
    datasets: Sequence[tuple[ArrayLike, ArrayLike]],
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> list[MLPProbeFit]:
    """:func:`fit_mlp_probes` on several ``(X [n, C, E], Y [n, S, k])`` datasets of the
    same shapes (a probe and its controls) with the same splits and budget, trained in
    one worker pool; one fit per dataset, each equal to its own :func:`fit_mlp_probes`.
    Memory: the chunk of cells is shared by the datasets (``bytes_per_cell`` times their
    number)."""
    hidden = check_positive_int(hidden, "hidden")
    budget = TrainingBudget() if budget is None else budget
    held = fit_batched(
        datasets,
        (train_idx, val_idx, test_idx),
        lambda shape: mlp_design(shape, hidden, budget),
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )
    return [MLPProbeFit(**h.fields(budget, hidden)) for h in held]


def fit_mlp_probes(
    X: ArrayLike,
    Y: ArrayLike,
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    budget: TrainingBudget | None = None,
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
    Every probe gets the same budget: the width ``hidden`` and ``budget`` (a
    :class:`~infoprobe.probes.batched_training.TrainingBudget`: epochs, batch size,
    optimiser, learning rate, weight decay, patience, seed; default ``TrainingBudget()``).

    Memory: cells are processed in chunks of
    ``c = max_memory_bytes // bytes_per_cell`` with ``bytes_per_cell =
    4·[5·S·P + n·E + 2·b·(E + 3·S·h + 2·S·k) + 2·b·S·(h + k)]``,
    ``P = E·h + h + h·k + k`` (see :func:`mlp_bytes_per_cell`); the result
    ``test_pred`` adds ``4·n_test·C·S·k`` bytes. On the CPU a chunk is trained
    in cache-sized groups of cells (:data:`CPU_STEP_ACTIVATION_BYTES`).
    Results do not depend on the chunking or grouping.

    Raises :class:`ProbeInputError` on bad shapes, splits, budget or non-finite values.
    """
    return fit_mlp_probe_sets(
        [(X, Y)],
        train_idx,
        val_idx,
        test_idx,
        hidden=hidden,
        budget=budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )[0]
