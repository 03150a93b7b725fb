"""Per-sample membership probe: one MLP per cell, conditioned on the queried position.

For every cell c (one state ``h_c``, e.g. ``h(t, l)``) a single probe answers
"what is ``x(s)``?" for every queried position s::

    x̂_c(s) = W2_c · GELU(W1_c · h_c + q_c(s) + b1_c) + b2_c

where ``q_c(s)`` is the first layer applied to a code of s: with
``query="onehot"`` it is ``W1_c``'s columns for a one-hot ``e_s`` (i.e. the MLP
on ``[h; e_s]``), with ``query="learned"`` it is ``W_q,c · emb_c(s)`` for a
learned embedding of size ``embed_dim`` (the MLP on ``[h; emb(s)]``). The probe
is trained over all s jointly (every sample contributes all S queries), all
cells at once with grouped weights, with the training machinery, budget and
seeding of :mod:`infoprobe.probes.batched_training` (early stopping per cell, on
the validation loss averaged over s), and the standardisation and chunking of
:mod:`infoprobe.probes.chunked_fit`. The activations of a cell are laid out
``[h, S, b]``, so its readout over all S queries is one matmul of width S·b (on the CPU
the fused kernel of :mod:`infoprobe.probes.fused` computes the step without writing
them).

Because one probe serves every position, it can only reconstruct ``x(s)`` well
in the samples whose state actually carries ``x(s)`` (and enough of a code of
*where* it came from). Its per-sample error therefore shows content-dependent
retrieval, where a different position arrives in each sample, which
fixed-position probes average away.

Per-sample error (``errors [n, C, S]``, :func:`infoprobe.probes.metrics.per_sample_error`)::

    err[i, c, s] = Σ_j (x̂_c(s)_ij - x(s)_ij)² / (SST_s / n),
    SST_s = Σ_i Σ_j (x(s)_ij - x̄(s)_j)²  over the evaluated (test) samples

the squared error of sample i relative to the total variance of ``x(s)``: 0 is
perfect, about 1 is no better than predicting the mean. Its mean over the test
samples is the probe's ``nmse = 1 - r2`` for (c, s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import einops
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
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.metrics import per_sample_error
from infoprobe.probes.references import (
    REGRESSION_STATISTICS,
    judge_regression,
    regression_statistics,
)
from infoprobe.probes.validate import ArrayLike, check_positive_int, to_numpy

__all__ = [
    "BatchedQueryMLP",
    "QueryProbeFit",
    "fit_query_probe",
    "fit_query_probe_sets",
    "query_design",
    "sample_errors",
]

QueryCode = Literal["onehot", "learned"]


class BatchedQueryMLP(BatchedProbes):
    """C query-conditioned MLPs ``[h; code(s)] -> hidden -> GELU -> k``, one per cell.

    Parameters (leading axis = cell, ``nn.Linear`` orientation): ``w_in [c, h, E]``,
    ``b_in [c, h]``, ``w_out [c, k, h]``, ``b_out [c, k]``, and for
    ``query="onehot"`` ``w_query [c, S, h]`` (the first layer's one-hot
    columns), for ``query="learned"`` ``embed [c, S, m]`` and
    ``w_query [c, m, h]``.
    """

    loss_dims = (1, 2, 3)  # one loss per cell: mean over positions, samples, coordinates
    accelerator = fused.QUERY

    def __init__(
        self,
        cells: range,
        n_positions: int,
        d_in: int,
        hidden: int,
        d_out: int,
        *,
        query: QueryCode = "onehot",
        embed_dim: int = 16,
        seed: int = 0,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        code_dim = n_positions if query == "onehot" else embed_dim
        fan_in = {"w_in": d_in + code_dim, "b_in": d_in + code_dim}
        shapes = {"w_in": (hidden, d_in), "b_in": (hidden,)}
        if query == "onehot":
            shapes["w_query"] = (n_positions, hidden)
            fan_in["w_query"] = d_in + code_dim
        else:
            shapes["embed"] = (n_positions, embed_dim)
            shapes["w_query"] = (embed_dim, hidden)
            fan_in["embed"] = None
            fan_in["w_query"] = d_in + code_dim
        shapes["w_out"] = (d_out, hidden)
        shapes["b_out"] = (d_out,)
        fan_in["w_out"] = fan_in["b_out"] = hidden
        init_params(self, cells, shapes, fan_in, seed, arrays)
        self.query = query
        self.probe_shape = (len(cells),)

    def query_offsets(self) -> torch.Tensor:
        """The first layer's contribution of each queried position, ``[c, S, h]``."""
        if self.query == "onehot":
            return self.w_query
        return torch.bmm(self.embed, self.w_query)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [c, b, E]`` (standardised) -> ``x̂(s)`` for every s, ``[c, S, k, b]``."""
        c, b, _ = x.shape
        state = torch.baddbmm(self.b_in.unsqueeze(2), self.w_in, x.transpose(1, 2))  # [c, h, b]
        pre = state.unsqueeze(2) + self.query_offsets().transpose(1, 2).unsqueeze(3)
        act = nn.functional.gelu(pre).reshape(c, -1, pre.shape[2] * b)  # [c, h, S·b]
        out = torch.baddbmm(self.b_out.unsqueeze(2), self.w_out, act)  # [c, k, S·b]
        return einops.rearrange(out, "c k (s b) -> c s k b", b=b)


def query_bytes_per_cell(
    n: int,
    n_positions: int,
    code_dim: int,
    d_in: int,
    hidden: int,
    d_out: int,
    batch: int,
    eval_batch: int,
) -> int:
    """float32 bytes one cell of :class:`BatchedQueryMLP` needs during a fit.

    ``4 · [5·P + n·E + 2·b·(E + h + 3·S·h + 2·S·k) + 2·b_eval·S·(h + k)]`` with
    ``P = E·h + h + (S + m)·h + S·m + h·k + k`` parameters per cell (``m`` =
    ``embed_dim`` for a learned code, 0 for one-hot; weights, gradients, two
    Adam moments, best copy), the cell's inputs, one training minibatch's
    activations with gradients and one evaluation batch.
    """
    extra = 0 if code_dim == n_positions else code_dim * (hidden + n_positions)
    per_cell = d_in * hidden + hidden + n_positions * hidden + extra + hidden * d_out + d_out
    floats = (
        5 * per_cell
        + n * d_in
        + 2 * batch * (d_in + hidden + 3 * n_positions * hidden + 2 * n_positions * d_out)
        + 2 * eval_batch * n_positions * (hidden + d_out)
    )
    return 4 * floats


def sample_errors(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample normalised errors ``[n, C, S]`` float32 of ``pred [n, C, S, k]`` against
    ``y [n, S, k]``, normalised by the variance of ``y`` over these n samples."""
    y64 = y.astype(np.float64)
    variance = ((y64 - y64.mean(axis=0)) ** 2).sum(axis=2).mean(axis=0)  # SST / n, [S]
    return per_sample_error(y[:, None], pred, variance[None]).numpy()


@dataclass
class QueryProbeFit(BatchedProbeFit):
    """A fitted query-conditioned probe per cell (all arrays numpy; :class:`BatchedProbeFit`).

    ``errors [n_test, C, S]``: per-sample normalised error on the test split
    (module docstring), rows in the order of ``test_idx``. ``best_val_loss [C]``,
    ``best_epoch [C]``: per-cell early stopping. ``params``: see :class:`BatchedQueryMLP`.
    """

    probe = "query"

    errors: np.ndarray = field(kw_only=True)
    query: QueryCode = field(kw_only=True)
    embed_dim: int = field(kw_only=True)

    def design_settings(self) -> dict[str, object]:
        """The query code and its width."""
        return {"query": self.query, "embed_dim": self.embed_dim}

    def factory(self) -> ModuleFactory:
        """The module factory that rebuilds these probes from their weights."""
        n_positions, k = self.engine.y_stats.mean.shape
        d_in = self.engine.x_stats.mean.shape[1]
        return query_factory(n_positions, d_in, self.hidden, k, self.query, self.embed_dim, 0)

    def errors_on(
        self, X: ArrayLike, Y: ArrayLike, *, device: str | torch.device = "cpu"
    ) -> np.ndarray:
        """Per-sample normalised errors ``[n, C, S]`` on new ``X [n, C, E]``, ``Y [n, S, k]``
        (normalised by the variance of ``Y`` over these n samples)."""
        y = to_numpy(Y)
        if y.shape[1:] != self.engine.y_stats.mean.shape:
            raise ProbeInputError(
                f"Y: expected shape [n, {', '.join(map(str, self.engine.y_stats.mean.shape))}], "
                f"got {y.shape}"
            )
        return sample_errors(self.predict(X, device=device), y)


def query_factory(
    n_positions: int,
    d_in: int,
    hidden: int,
    d_out: int,
    query: QueryCode,
    embed_dim: int,
    seed: int,
) -> ModuleFactory:
    """A module factory building :class:`BatchedQueryMLP` probes for a range of cells."""

    def make(cells: range, arrays: dict[str, np.ndarray] | None) -> BatchedProbes:
        return BatchedQueryMLP(
            cells,
            n_positions,
            d_in,
            hidden,
            d_out,
            query=query,
            embed_dim=embed_dim,
            seed=seed,
            arrays=arrays,
        )

    return make


def query_design(
    shape: ProbeShape, hidden: int, query: QueryCode, embed_dim: int, budget: TrainingBudget
) -> ProbeDesign:
    """The :class:`ProbeDesign` of query probes of width ``hidden`` for these sizes."""
    S, k, b = shape.n_targets, shape.d_out, budget.batch_size
    code = S if query == "onehot" else embed_dim
    return ProbeDesign(
        make_module=query_factory(S, shape.d_in, hidden, k, query, embed_dim, budget.seed),
        bytes_per_cell=query_bytes_per_cell(shape.n, S, code, shape.d_in, hidden, k, b, b),
        activation_bytes_per_cell=4 * S * hidden * b,  # the [c, h, S, b] activations
        desc="query probes",
        validate=regression_statistics,
        statistics=REGRESSION_STATISTICS,
        judge=judge_regression,
    )


def fit_query_probe_sets(
    datasets: Sequence[tuple[ArrayLike, ArrayLike]],
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    query: QueryCode = "onehot",
    embed_dim: int = 16,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> list[QueryProbeFit]:
    """:func:`fit_query_probe` on several ``(X [n, C, E], Y [n, S, k])`` datasets of the
    same shapes (a probe and its controls) with the same splits and budget, trained in
    one worker pool; one fit per dataset, each equal to its own :func:`fit_query_probe`.
    Memory: the chunk of cells is shared by the datasets (``bytes_per_cell`` times their
    number)."""
    hidden = check_positive_int(hidden, "hidden")
    embed_dim = check_positive_int(embed_dim, "embed_dim")
    if query not in ("onehot", "learned"):
        raise ProbeInputError(f"query: expected 'onehot' or 'learned', got {query!r}")
    budget = TrainingBudget() if budget is None else budget
    held = fit_batched(
        datasets,
        (train_idx, val_idx, test_idx),
        lambda shape: query_design(shape, hidden, query, embed_dim, budget),
        budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )
    return [
        QueryProbeFit(
            **h.fields(budget, hidden),
            errors=sample_errors(h.engine.test_pred, h.y_test),
            query=query,
            embed_dim=embed_dim,
        )
        for h in held
    ]


def fit_query_probe(
    X: ArrayLike,
    Y: ArrayLike,
    train_idx: ArrayLike,
    val_idx: ArrayLike,
    test_idx: ArrayLike,
    *,
    hidden: int = 64,
    query: QueryCode = "onehot",
    embed_dim: int = 16,
    budget: TrainingBudget | None = None,
    device: str | torch.device = "cpu",
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    progress: bool = True,
) -> QueryProbeFit:
    """Fit one query-conditioned MLP per cell and return per-sample test errors.

    ``X [n, C, E]``: states of every cell. ``Y [n, S, k]``: ``x(s)`` of every
    queried position s. Splits as in
    :func:`~infoprobe.probes.mlp.fit_mlp_probes`; the budget is the same
    (``hidden`` and a :class:`~infoprobe.probes.batched_training.TrainingBudget`).
    ``query``: ``"onehot"`` (MLP on ``[h; e_s]``) or ``"learned"`` (MLP on
    ``[h; emb(s)]``, ``embed_dim`` wide). Returns ``errors [n_test, C, S]``
    (normalised by the test variance of x(s), module docstring).

    Memory: chunks of ``c = max_memory_bytes // bytes_per_cell`` cells with
    ``bytes_per_cell = 4·[5·P + n·E + 2·b·(E + h + 3·S·h + 2·S·k) +
    2·b·S·(h + k)]``, ``P ≈ E·h + h + S·h + h·k + k`` parameters
    (:func:`query_bytes_per_cell` has the exact count); the outputs add ``4·n_test·C·S·(k + 1)``.
    """
    return fit_query_probe_sets(
        [(X, Y)],
        train_idx,
        val_idx,
        test_idx,
        hidden=hidden,
        query=query,
        embed_dim=embed_dim,
        budget=budget,
        device=device,
        max_memory_bytes=max_memory_bytes,
        progress=progress,
    )[0]
