"""Linear (ridge) probes of every cell and target in two streaming passes over the states.

Pass 1 accumulates the ridge statistics (:class:`~infoprobe.probes.ridge.RidgeAccumulator`)
of every (cell, target), together with the shuffled-pairing control as extra target
columns (same Gram, no extra pass). λ is chosen on validation, R²/NMSE of the test split
come in closed form. Pass 2 reads the test rows again to predict, giving identification
accuracy and per-sample normalised errors. States arrive from a *block source*: a callable
returning an iterator of ``(start, states [b, C, E])`` in sample order, so the data never
have to fit in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import einops
import numpy as np
import torch
from tqdm.auto import tqdm

from infoprobe.probes.controls import shuffled_pairing
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.metrics import identification_hits, per_sample_error
from infoprobe.probes.ridge import DEFAULT_ALPHAS, RidgeAccumulator, RidgeSolution
from infoprobe.probes.split import TEST, VAL
from infoprobe.probes.validate import check_finite

BlockSource = Callable[[], Iterable[tuple[int, np.ndarray]]]
"""Returns a fresh iterator of ``(start, states [b, C, E])`` blocks, in sample order."""


@dataclass
class ProbeTargets:
    """What the probes decode, and how to score identification.

    Attributes:
        values: target vectors, shared by every cell ``[n, G, d]`` (position targets: x(s)
            for G = T positions), or one set per row ``[n, P, G, d]`` (role targets, P =
            T+1 tokens) selected per cell by ``cell_row``.
        inputs: the candidates of identification, ``[n, T, d]``.
        true_index: index in 0..T-1 of each target among ``inputs``: ``[G]`` (shared) or
            ``[n, P, G]`` (per row).
        cell_row: for per-row targets, the row of each cell ``[C]`` (the cell's token).
    """

    values: np.ndarray
    inputs: np.ndarray
    true_index: np.ndarray
    cell_row: np.ndarray | None = None

    @property
    def per_cell(self) -> bool:
        """Whether every cell has its own targets."""
        return self.cell_row is not None

    @property
    def n_groups(self) -> int:
        """G, number of targets (probes) per cell."""
        return self.values.shape[-2]

    @property
    def dim(self) -> int:
        """d, coordinates per target."""
        return self.values.shape[-1]

    def block(self, rows: slice | np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
        """Flattened targets of some rows: ``[b, G·d]`` shared or ``[b, C, G·d]`` per cell.

        ``order`` optionally re-pairs rows (the shuffled control): row i takes the target
        of sample ``order[i]``.
        """
        idx = np.arange(self.values.shape[0])[rows]
        if order is not None:
            idx = order[idx]
        vals = self.values[idx]
        if self.cell_row is None:
            return einops.rearrange(vals, "b g d -> b (g d)")
        return einops.rearrange(vals[:, self.cell_row], "b c g d -> b c (g d)")

    def block_true_index(self, rows: np.ndarray) -> np.ndarray:
        """True identification index of some rows, broadcastable to ``[b, C, G]``."""
        if self.cell_row is None:
            return self.true_index
        return self.true_index[rows][:, self.cell_row]


@dataclass
class LinearProbeScores:
    """Scores of every (cell, target) linear probe; arrays are ``[C, G]`` unless stated.

    Attributes:
        r2, nmse: test R² (pooled over d) and NMSE at the λ chosen on validation.
        identification: test identification accuracy (NaN if not computed).
        alpha: chosen λ.
        val_r2_path: validation R² for every λ ``[A, C, G]``.
        shuffled_r2, shuffled_nmse: the same probe on shuffled pairings (None if off).
        per_sample_error: normalised error of each test sample ``[n_test, C, G]`` float32.
        test_index: sample indices of the test split ``[n_test]``.
        solution: the fitted :class:`RidgeSolution` (real targets, then shuffled ones).
    """

    r2: np.ndarray
    nmse: np.ndarray
    identification: np.ndarray
    alpha: np.ndarray
    val_r2_path: np.ndarray
    shuffled_r2: np.ndarray | None
    shuffled_nmse: np.ndarray | None
    per_sample_error: np.ndarray | None
    test_index: np.ndarray
    solution: RidgeSolution


def _blocks(source: BlockSource, name: str, progress: bool, desc: str) -> Iterator:
    for start, states in tqdm(source(), desc=desc, disable=not progress, leave=False):
        check_finite(states, name, offset=start)
        yield start, states


def fit_linear_probes(
    source: BlockSource,
    targets: ProbeTargets,
    split: np.ndarray,
    *,
    alphas: float | tuple[float, ...] | np.ndarray = DEFAULT_ALPHAS,
    shuffle_seed: int | None = 0,
    second_pass: bool = True,
    source_name: str = "states",
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> LinearProbeScores:
    """Fit every (cell, target) ridge probe from streamed states and score it.

    Args:
        source: block source of states ``[b, C, E]`` covering samples 0..n-1 in order.
        targets: the targets (see :class:`ProbeTargets`).
        split: split labels ``[n]`` (0 train, 1 validation, 2 test), decided beforehand.
        alphas: λ grid; λ is chosen per (cell, target) on validation.
        shuffle_seed: seed of the shuffled-pairing control; ``None`` skips the control.
        second_pass: read the test rows again for identification and per-sample errors.
        source_name: what the states are, for error messages.
        device: torch device of the statistics.
        progress: show tqdm bars.

    Returns:
        :class:`LinearProbeScores`.
    """
    labels = np.asarray(split)
    if targets.values.shape[0] != labels.shape[0]:
        raise ProbeInputError(
            f"targets: expected {labels.shape[0]} samples (the split's length), "
            f"got {targets.values.shape[0]}"
        )
    perm = shuffled_pairing(labels, shuffle_seed) if shuffle_seed is not None else None
    acc = _accumulate(source, targets, labels, perm, source_name, device, progress)
    sol = acc.solve(alphas, group_size=targets.dim)
    ident = np.full((acc.n_cells, targets.n_groups), np.nan)
    errors = None
    if second_pass:
        ident, errors = _test_pass(source, sol, targets, labels, progress, source_name)
    return _scores(sol, targets.n_groups, perm is not None, labels, ident, errors)


def _accumulate(
    source: BlockSource,
    targets: ProbeTargets,
    labels: np.ndarray,
    perm: np.ndarray | None,
    source_name: str,
    device: str | torch.device,
    progress: bool,
) -> RidgeAccumulator:
    """Pass 1: the ridge statistics of every (cell, target column) over all blocks, the
    shuffled pairing ``perm`` (if any) as extra target columns."""
    n = labels.shape[0]
    acc: RidgeAccumulator | None = None
    seen = 0
    for start, states in _blocks(source, source_name, progress, "ridge statistics"):
        stop = start + states.shape[0]
        if start != seen:
            raise ProbeInputError(
                f"{source_name}: blocks expected in order, block starting at {seen}; "
                f"got a block starting at {start}"
            )
        seen = stop
        y = targets.block(slice(start, stop))
        if perm is not None:
            y = np.concatenate([y, targets.block(slice(start, stop), perm)], axis=-1)
        if acc is None:
            acc = RidgeAccumulator(
                states.shape[1],
                states.shape[2],
                y.shape[-1],
                per_cell_targets=targets.per_cell,
                device=device,
            )
        acc.update(states, y, labels[start:stop])
    if acc is None or seen != n:
        raise ProbeInputError(f"{source_name}: expected {n} samples, the blocks covered {seen}")
    return acc


def _scores(
    sol: RidgeSolution,
    n_groups: int,
    shuffled: bool,
    labels: np.ndarray,
    identification: np.ndarray,
    errors: np.ndarray | None,
) -> LinearProbeScores:
    """The scores of the real targets (the first ``n_groups`` groups of ``sol``) and of
    the shuffled control (the rest, when ``shuffled``)."""
    r2 = sol.r2(TEST).cpu().numpy()
    real = slice(0, n_groups)
    val_path = 1.0 - sol.sse_path[VAL] / sol.sst[VAL]
    return LinearProbeScores(
        r2=r2[:, real],
        nmse=1.0 - r2[:, real],
        identification=identification,
        alpha=sol.alpha[:, real].cpu().numpy(),
        val_r2_path=val_path[:, :, real].cpu().numpy(),
        shuffled_r2=r2[:, n_groups:] if shuffled else None,
        shuffled_nmse=1.0 - r2[:, n_groups:] if shuffled else None,
        per_sample_error=errors,
        test_index=np.flatnonzero(labels == TEST),
        solution=sol,
    )


def _test_pass(
    source: BlockSource,
    sol: RidgeSolution,
    targets: ProbeTargets,
    labels: np.ndarray,
    progress: bool,
    source_name: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Predict the test rows: identification accuracy ``[C, G]``, errors ``[n_test, C, G]``."""
    n_groups, dim = targets.n_groups, targets.dim
    n_test = sol.counts[TEST]
    sst = sol.sst[TEST][:, :n_groups].float().cpu() / n_test  # per-sample variance scale
    hits_sum = torch.zeros(sol.coef.shape[0], n_groups)
    errors = []
    for start, states in _blocks(source, source_name, progress, "test predictions"):
        rows = np.flatnonzero(labels[start : start + states.shape[0]] == TEST)
        if rows.size == 0:
            continue
        glob = start + rows
        pred = sol.predict(states[rows])[:, :, : n_groups * dim].cpu()
        pred = einops.rearrange(pred, "b c (g d) -> b c g d", d=dim)
        truth = torch.as_tensor(targets.block(glob)).float()
        truth = einops.rearrange(truth, "b ... (g d) -> b ... g d", d=dim)
        if not targets.per_cell:
            truth = truth[:, None]
        errors.append(per_sample_error(truth, pred, sst))
        hits = identification_hits(pred, targets.inputs[glob], targets.block_true_index(glob))
        hits_sum += hits.sum(0)
    return (hits_sum / n_test).double().numpy(), torch.cat(errors).numpy()
