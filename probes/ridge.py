"""All-probes ridge regression from streaming sufficient statistics.

The workload: for every *cell* c (a (layer, token) pair) the design matrix X_c = h(t, l)
``[n, E]`` is shared by every target column, so all probes of a cell are ONE multi-output
ridge problem, and all cells are solved together as a batch. Nothing loops over probes.

Algorithm (sklearn's convention: unscaled penalty λ‖W‖², centred data, unpenalised
intercept):

1. One streaming pass over blocks of samples (:class:`RidgeAccumulator`). Each block is
   shifted by the first block's mean (so float32 products stay accurate even when the
   activations have means of 100σ), the products XᵀX, XᵀY, Σx, Σy, Σy² of every split
   (train / validation / test) are formed in float32 per block and added into float64
   accumulators.
2. :meth:`RidgeAccumulator.solve`: centre the training statistics with the training means,
   one ``eigh`` of the centred Gram per cell (G = V diag(w) Vᵀ); for every λ of the grid the
   coefficients are V (VᵀC / (w + λ)), so the whole λ path costs about one solve.
3. Validation and test sums of squared errors come in closed form from their statistics,
   centred with the *training* means:
   SSE = ‖Y − m_y‖² − 2 tr(WᵀC) + tr(WᵀGW), no second pass over the data.
   λ is chosen per (cell, target group) on validation, scores are read on test.

Everything runs in torch (one thread pool). Shapes: ``b`` samples of a block, ``C`` cells,
``E`` features, ``K`` target columns, ``G`` target groups of ``group_size`` columns each (a
group is one probe: the d coordinates of x(s) are pooled), ``A`` values of λ.

Plain-array entry point (what ``infoprobe.probes.estimators.RidgeProbe`` wraps)::

    fit = fit_ridge(X, Y, alphas=(0.1, 1.0, 10.0), X_val=X_val, Y_val=Y_val)
    fit.coef        # [k, E] float64
    fit.intercept   # [k]
    fit.alpha       # chosen λ (on the validation data, else by exact leave-one-out)
    fit.predict(X)  # [n, k] float64 numpy

``fit_ridge`` takes ``X [n, E]`` and ``Y [n, k]`` (or ``[n]``); one λ is chosen for all k
outputs together (pooled validation SSE), like ``RidgeCV(alpha_per_target=False)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import einops
import numpy as np
import torch

from infoprobe.probes.errors import ProbeInputError, SplitTooSmallError
from infoprobe.probes.settings import DEFAULT_ALPHAS
from infoprobe.probes.split import SPLIT_NAMES, TEST, TRAIN, VAL

Array = np.ndarray | torch.Tensor

FLUSH_ROWS = 16384
"""Rows summed in float32 (data shifted by the first block's mean) before each flush of the
partial sums into the float64 accumulators."""


def check_alphas(alphas: float | tuple[float, ...] | list[float] | np.ndarray) -> torch.Tensor:
    """Validate a λ grid (positive, finite) and return it as a float64 tensor ``[A]``."""
    grid = torch.as_tensor(np.atleast_1d(np.asarray(alphas, dtype=np.float64)))
    if grid.ndim != 1 or grid.numel() == 0 or not bool(torch.isfinite(grid).all()):
        raise ProbeInputError(f"alphas: expected a non-empty 1-D finite grid, got {alphas!r}")
    if bool((grid <= 0).any()):
        raise ProbeInputError(f"alphas: expected every λ > 0, got {grid.tolist()}")
    return grid


class RidgeAccumulator:
    """Streaming sufficient statistics of C multi-output ridge problems, one per cell.

    Args:
        n_cells: C, number of design matrices (cells).
        n_features: E, features per cell.
        n_targets: K, target columns.
        per_cell_targets: if False, one target matrix ``Y [b, K]`` is shared by all cells
            (position targets); if True, each cell has its own ``Y [b, C, K]`` (role targets).
        n_splits: number of split labels (3: train, validation, test).
        compute_dtype: dtype of the per-block products (float32 by default; the
            accumulators are always float64).
        device: torch device of the statistics.

    Memory: ``n_splits · C · E · (E + K) · 8`` bytes of float64 accumulators.
    """

    def __init__(
        self,
        n_cells: int,
        n_features: int,
        n_targets: int,
        *,
        per_cell_targets: bool = False,
        n_splits: int = 3,
        compute_dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        self.n_cells, self.n_features, self.n_targets = n_cells, n_features, n_targets
        self.per_cell_targets = per_cell_targets
        self.compute_dtype = compute_dtype
        self.device = torch.device(device)
        c_y = n_cells if per_cell_targets else 1
        f64 = {"dtype": torch.float64, "device": self.device}
        self.count = torch.zeros(n_splits, **f64)
        self.sum_x = torch.zeros(n_splits, n_cells, n_features, **f64)
        self.sum_y = torch.zeros(n_splits, c_y, n_targets, **f64)
        self.sum_xx = torch.zeros(n_splits, n_cells, n_features, n_features, **f64)
        self.sum_xy = torch.zeros(n_splits, n_cells, n_features, n_targets, **f64)
        self.sum_yy = torch.zeros(n_splits, c_y, n_targets, **f64)
        self.shift_x: torch.Tensor | None = None  # [C, E]
        self.shift_y: torch.Tensor | None = None  # [c_y, K]
        self._buffers: dict[str, torch.Tensor] = {}
        self._pending: dict[int, int] = {}  # rows in the float32 partial sums, per split

    def _as_compute(self, array: Array) -> torch.Tensor:
        return torch.as_tensor(array).to(device=self.device, dtype=self.compute_dtype)

    def update(self, X: Array, Y: Array, split: Array) -> None:
        """Add one block of samples.

        Args:
            X: states ``[b, C, E]``.
            Y: targets ``[b, K]`` (shared) or ``[b, C, K]`` (``per_cell_targets``).
            split: split label of each row ``[b]`` (0 train, 1 validation, 2 test).
        """
        x = self._as_compute(X)
        y = self._as_compute(Y)
        if y.ndim == 2:
            y = y[:, None, :]
        expected_x = (self.n_cells, self.n_features)
        expected_y = (self.n_cells if self.per_cell_targets else 1, self.n_targets)
        if x.ndim != 3 or tuple(x.shape[1:]) != expected_x:
            raise ProbeInputError(
                f"X: expected [b, {expected_x[0]}, {expected_x[1]}], got {tuple(x.shape)}"
            )
        if tuple(y.shape[1:]) != expected_y or y.shape[0] != x.shape[0]:
            raise ProbeInputError(
                f"Y: expected [{x.shape[0]}, {expected_y[0]}, {expected_y[1]}] "
                f"(or [b, K] when shared), got {tuple(torch.as_tensor(Y).shape)}"
            )
        labels = torch.as_tensor(np.asarray(split), device=self.device).long()
        if self.shift_x is None:
            self.shift_x = x.mean(0)
            self.shift_y = y.mean(0)
        # One row gather into a reused buffer (fresh 100 MB tensors per block cost more in
        # page faults than the copy): rows grouped by split, shifted in place. Each split
        # is then a contiguous range, read by bmm through a strided [C, b, E] view.
        order = torch.argsort(labels, stable=True)
        rows = self._buffer("rows", tuple(x.shape))
        torch.index_select(x, 0, order, out=rows)
        rows.sub_(self.shift_x)
        y_sorted = y[order] - self.shift_y
        counts = torch.bincount(labels, minlength=self.count.shape[0]).tolist()
        start = 0
        for s, n_rows in enumerate(counts):
            if n_rows:
                part = slice(start, start + n_rows)
                self._add(s, einops.rearrange(rows[part], "b c e -> c b e"), y_sorted[part])
            start += n_rows

    def _buffer(self, name: str, shape: tuple[int, ...], zero: bool = False) -> torch.Tensor:
        """A reused compute-dtype work buffer of ``shape`` (allocated once per shape; a
        ``zero`` buffer starts at zero and is only re-zeroed by :meth:`_flush`)."""
        size = int(np.prod(shape))
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < size:
            make = torch.zeros if zero else torch.empty
            buf = make(size, dtype=self.compute_dtype, device=self.device)
            self._buffers[name] = buf
        return buf[:size].view(shape)

    def _add(self, s: int, x_cbe: torch.Tensor, y: torch.Tensor) -> None:
        """Add shifted rows ``x_cbe [C, b, E]`` (a view of ``[b, C, E]`` rows), ``y [b, c_y,
        K]`` to split ``s``.

        The GEMMs accumulate in place into float32 partial sums (``baddbmm_``/``addmm_``,
        no temporaries), flushed into the float64 totals every :data:`FLUSH_ROWS` rows.
        Only the upper block rows and the lower-right block of the symmetric Gram are
        multiplied (3/4 of the products; 0.84 of the time of the full GEMM on one core).
        Σx is one matrix-vector product with a vector of ones, apart from the cross
        product: a ones column appended to y would make its width K + 1, which MKL runs
        at 0.7 of the speed of K = 128 (measured on one core).
        """
        n_cells, n_rows, n_feat = x_cbe.shape
        self.count[s] += n_rows
        self.sum_y[s].add_(y.sum(0))
        self.sum_yy[s].add_((y.double() ** 2).sum(0))
        half = n_feat // 2  # the Gram is symmetric: its lower-left block is left to _flush
        top = self._buffer(f"top{s}", (n_cells, half, n_feat), zero=True)
        low = self._buffer(f"low{s}", (n_cells, n_feat - half, n_feat - half), zero=True)
        cross = self._buffer(f"cross{s}", (n_cells, n_feat, y.shape[-1]), zero=True)
        sum_x = self._buffer(f"sumx{s}", (n_cells * n_feat,), zero=True)
        x_ceb = x_cbe.transpose(1, 2)
        flat = einops.rearrange(x_cbe, "c b e -> (c e) b")
        top.baddbmm_(x_ceb[:, :half], x_cbe)  # contiguous outputs: one batched GEMM each
        low.baddbmm_(x_ceb[:, half:], x_cbe[..., half:])
        sum_x.addmv_(flat, torch.ones(n_rows, dtype=flat.dtype, device=flat.device))
        if self.per_cell_targets:
            cross.baddbmm_(x_ceb, einops.rearrange(y, "b c k -> c b k"))
        else:  # one GEMM: [(C E), b] @ [b, K]
            cross.view(n_cells * n_feat, -1).addmm_(flat, y[:, 0, :])
        self._pending[s] = self._pending.get(s, 0) + n_rows
        if self._pending[s] >= FLUSH_ROWS:
            self._flush(s)

    def _flush(self, s: int | None = None) -> None:
        """Move float32 partial sums of split ``s`` (all splits if None) into float64."""
        for split in list(self._pending) if s is None else [s]:
            if not self._pending.get(split):
                continue
            n_cells, n_feat = self.n_cells, self.n_features
            half = n_feat // 2
            top = self._buffers[f"top{split}"][: n_cells * half * n_feat]
            top = top.view(n_cells, half, n_feat)
            low = self._buffers[f"low{split}"][: n_cells * (n_feat - half) ** 2]
            low = low.view(n_cells, n_feat - half, n_feat - half)
            cross = self._buffers[f"cross{split}"]
            cross = cross[: n_cells * n_feat * self.n_targets].view(n_cells, n_feat, -1)
            sum_x = self._buffers[f"sumx{split}"][: n_cells * n_feat].view(n_cells, n_feat)
            sum_xx = self.sum_xx[split]
            sum_xx[:, :half].add_(top)
            sum_xx[:, half:, :half].add_(top[:, :, half:].mT)
            sum_xx[:, half:, half:].add_(low)
            self.sum_xy[split].add_(cross)
            self.sum_x[split].add_(sum_x)
            for partial in (top, low, cross, sum_x):
                partial.zero_()
            self._pending[split] = 0

    def centred(
        self, s: int, mean_x: torch.Tensor, mean_y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Statistics of split ``s`` centred at the given means (shifted coordinates).

        Returns ``(Gram [C, E, E], cross [C, E, K], sum of squares per column [c_y, K])``:
        Σ(x−m_x)(x−m_x)ᵀ, Σ(x−m_x)(y−m_y)ᵀ, Σ(y−m_y)².
        """
        self._flush()
        n, sx, sy = self.count[s], self.sum_x[s], self.sum_y[s]
        gram = (
            self.sum_xx[s]
            - torch.einsum("ce,cf->cef", sx, mean_x)
            - torch.einsum("ce,cf->cef", mean_x, sx)
            + n * torch.einsum("ce,cf->cef", mean_x, mean_x)
        )
        cross = (
            self.sum_xy[s]
            - torch.einsum("ce,ck->cek", sx, mean_y.expand(self.n_cells, -1))
            - torch.einsum("ce,ck->cek", mean_x, sy.expand(self.n_cells, -1))
            + n * torch.einsum("ce,ck->cek", mean_x, mean_y.expand(self.n_cells, -1))
        )
        sq = self.sum_yy[s] - 2 * mean_y * sy + n * mean_y**2
        return gram, cross, sq

    def split_count(self, s: int) -> int:
        """Number of samples added to split ``s``."""
        return int(self.count[s])

    def solve(
        self,
        alphas: float | tuple[float, ...] | np.ndarray = DEFAULT_ALPHAS,
        *,
        group_size: int = 1,
        train: int = TRAIN,
        val: int | None = VAL,
        evaluate: tuple[int, ...] = (VAL, TEST),
    ) -> RidgeSolution:
        """Fit every probe on the training split, pick λ on validation, score on ``evaluate``.

        Args:
            alphas: λ grid ``[A]`` (positive; sklearn's unscaled ``alpha``).
            group_size: columns pooled into one probe (d for x(s)); K must be a multiple.
            train: split label of the training rows.
            val: split label used to choose λ per (cell, group); ``None`` needs one λ.
            evaluate: split labels whose closed-form SSE path is computed.

        Returns:
            :class:`RidgeSolution` with the chosen λ per (cell, group), coefficients, and
            SSE/SST of each evaluated split.
        """
        grid = check_alphas(alphas).to(self.device)
        self._flush()
        if self.n_targets % group_size:
            raise ProbeInputError(
                f"group_size: expected a divisor of the {self.n_targets} target columns, "
                f"got {group_size}"
            )
        n_train = self.split_count(train)
        if n_train < 2:
            raise SplitTooSmallError(
                f"split '{SPLIT_NAMES[train]}': expected at least 2 samples, got {n_train}"
            )
        mean_x = self.sum_x[train] / n_train
        mean_y = self.sum_y[train] / n_train
        gram, cross, _ = self.centred(train, mean_x, mean_y)
        wanted = set(evaluate) | ({val} if val is not None else set())
        scored = [s for s in wanted if self.split_count(s) > 0]
        means = (mean_x, mean_y, group_size)
        coef = self._cholesky_coef(gram, cross, grid) if grid.numel() == 1 else None
        if coef is not None:  # one λ: a Cholesky solve, one SSE per split
            paths = {s: self._sse_of(s, coef, *means)[None] for s in scored}
            choice = self._choose(grid, paths, val, group_size)
        else:  # the λ path: one eigendecomposition per cell
            coef, paths, choice = self._eigen_path(gram, cross, grid, scored, val, *means)
        assert self.shift_x is not None and self.shift_y is not None
        center_x = (mean_x + self.shift_x.double()).float()
        intercept = mean_y + self.shift_y.double() - torch.einsum("ce,cek->ck", mean_x, coef)
        intercept = intercept - torch.einsum("ce,cek->ck", self.shift_x.double(), coef)
        return RidgeSolution(
            alphas=grid,
            alpha_index=choice,
            coef=coef,
            intercept=intercept,
            group_size=group_size,
            sse_path=paths,
            sst={s: self._sst(s, group_size) for s in scored},
            counts={s: self.split_count(s) for s in range(self.count.shape[0])},
            center_x=center_x,
        )

    def _choose(
        self, grid: torch.Tensor, paths: dict[int, torch.Tensor], val: int | None, group_size: int
    ) -> torch.Tensor:
        """Index of the chosen λ per (cell, group) ``[C, G]``: the smallest validation SSE
        of ``paths`` (split → ``[A, C, G]``), or 0 when the grid has one value."""
        if grid.numel() == 1:
            n_groups = self.n_targets // group_size
            return torch.zeros(self.n_cells, n_groups, dtype=torch.long, device=self.device)
        if val is None or val not in paths:
            name = SPLIT_NAMES[val] if val is not None else "val"
            raise SplitTooSmallError(
                f"split '{name}': choosing among {grid.numel()} values of λ needs "
                "validation samples, got none"
            )
        return paths[val].argmin(0)

    def _eigen_path(
        self,
        gram: torch.Tensor,
        cross: torch.Tensor,
        grid: torch.Tensor,
        scored: list[int],
        val: int | None,
        mean_x: torch.Tensor,
        mean_y: torch.Tensor,
        group_size: int,
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor], torch.Tensor]:
        """The whole λ path from one ``eigh`` of the training Gram ``[C, E, E]``: the SSE of
        every split of ``scored`` for every λ ``[A, C, G]``, the λ chosen per (cell, group)
        on ``val`` and its coefficients ``[C, E, K]``."""
        evals, evecs = torch.linalg.eigh(gram)
        evals = evals.clamp_min(0.0)
        cross_eig = evecs.mT @ cross  # [C, E, K]
        paths = {
            s: self._sse_path(s, grid, evals, evecs, cross_eig, mean_x, mean_y, group_size)
            for s in scored
        }
        choice = self._choose(grid, paths, val, group_size)
        lam_cols = einops.repeat(grid[choice], "c g -> c 1 (g k)", k=group_size)
        coef = evecs @ (cross_eig / (evals[:, :, None] + lam_cols))  # [C, E, K]
        return coef, paths, choice

    def _cholesky_coef(
        self, gram: torch.Tensor, cross: torch.Tensor, grid: torch.Tensor
    ) -> torch.Tensor | None:
        """Coefficients ``[C, E, K]`` for a single λ by Cholesky (cheaper than ``eigh``);
        None if a matrix is not numerically positive definite (the eigen path then runs)."""
        eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
        chol, info = torch.linalg.cholesky_ex(gram + grid[0] * eye)
        if bool((info != 0).any()):
            return None
        return torch.cholesky_solve(cross, chol)

    def _sse_of(
        self,
        s: int,
        coef: torch.Tensor,
        mean_x: torch.Tensor,
        mean_y: torch.Tensor,
        group_size: int,
    ) -> torch.Tensor:
        """Closed-form SSE of split ``s`` for coefficients ``coef [C, E, K]``: ``[C, G]``."""
        gram, cross, sq = self.centred(s, mean_x, mean_y)
        sse = sq - 2 * (coef * cross).sum(1) + (coef * (gram @ coef)).sum(1)
        return einops.reduce(sse, "c (g k) -> c g", "sum", k=group_size)

    def _sse_path(
        self,
        s: int,
        grid: torch.Tensor,
        evals: torch.Tensor,
        evecs: torch.Tensor,
        cross_eig: torch.Tensor,
        mean_x: torch.Tensor,
        mean_y: torch.Tensor,
        group_size: int,
    ) -> torch.Tensor:
        """Closed-form SSE of split ``s`` for every λ, pooled per group: ``[A, C, G]``."""
        gram, cross, sq = self.centred(s, mean_x, mean_y)
        gram_eig = evecs.mT @ gram @ evecs  # [C, E, E]
        cross_s_eig = evecs.mT @ cross  # [C, E, K]
        out = []
        for lam in grid:
            a = cross_eig / (evals[:, :, None] + lam)  # coefficients in the eigenbasis
            sse = sq - 2 * (a * cross_s_eig).sum(1) + (a * (gram_eig @ a)).sum(1)
            out.append(einops.reduce(sse, "c (g k) -> c g", "sum", k=group_size))
        return torch.stack(out)

    def _sst(self, s: int, group_size: int) -> torch.Tensor:
        """Total sum of squares of split ``s`` around its own mean, per group: ``[c_y, G]``."""
        n = self.count[s]
        sq = self.sum_yy[s] - self.sum_y[s] ** 2 / n
        return einops.reduce(sq, "c (g k) -> c g", "sum", k=group_size)


@dataclass
class RidgeSolution:
    """Fitted ridge probes of every (cell, target column), with their held-out errors.

    Attributes:
        alphas: λ grid ``[A]``.
        alpha_index: chosen λ index per (cell, group) ``[C, G]``.
        coef: coefficients ``[C, E, K]`` float64.
        intercept: ``[C, K]`` float64.
        group_size: columns per group (probe).
        sse_path: split label → SSE for every λ ``[A, C, G]`` (training-mean centred).
        sst: split label → total sum of squares around the split's own mean ``[c_y, G]``.
        counts: split label → number of samples.
        center_x: training mean of X ``[C, E]`` float32 (used to centre before predicting).
    """

    alphas: torch.Tensor
    alpha_index: torch.Tensor
    coef: torch.Tensor
    intercept: torch.Tensor
    group_size: int
    sse_path: dict[int, torch.Tensor]
    sst: dict[int, torch.Tensor]
    counts: dict[int, int]
    center_x: torch.Tensor
    _coef32: torch.Tensor | None = field(default=None, repr=False)

    @property
    def alpha(self) -> torch.Tensor:
        """Chosen λ per (cell, group) ``[C, G]``."""
        return self.alphas[self.alpha_index]

    def sse(self, split: int = TEST) -> torch.Tensor:
        """SSE at the chosen λ per (cell, group) ``[C, G]``."""
        path = self.sse_path[split]
        return path.gather(0, self.alpha_index[None]).squeeze(0)

    def r2(self, split: int = TEST) -> torch.Tensor:
        """R² = 1 − SSE/SST pooled over each group's columns ``[C, G]`` (sklearn's
        ``variance_weighted``); NaN where the targets are constant."""
        sst = self.sst[split]
        return 1.0 - self.sse(split) / torch.where(sst > 0, sst, torch.nan)

    def nmse(self, split: int = TEST) -> torch.Tensor:
        """NMSE = MSE / Var(target) = SSE / SST per (cell, group) ``[C, G]``."""
        return 1.0 - self.r2(split)

    def predict(self, X: Array) -> torch.Tensor:
        """Predictions ``[b, C, K]`` float32 for states ``X [b, C, E]``."""
        if self._coef32 is None:
            self._coef32 = self.coef.float()
        x = torch.as_tensor(X).to(device=self.coef.device, dtype=torch.float32)
        xc = einops.rearrange(x - self.center_x, "b c e -> c b e")
        centre_pred = self.intercept + torch.einsum("ce,cek->ck", self.center_x.double(), self.coef)
        pred = torch.bmm(xc, self._coef32) + centre_pred.float()[:, None, :]
        return einops.rearrange(pred, "c b k -> b c k")
