"""Every probe's fit judged on validation data, refitted when it failed, flagged when it
still fails.

A batched fit trains every cell from one start with one budget; a cell can end in a bad
optimum (a mixture component that never took the content it should hold) or be cut short,
and nothing in its test scores says so. After the fit each probe (a cell, or a (cell,
target) pair for the MLP probes) is judged from its **validation** samples only:

- ``no_progress``: its best validation loss is not below that of its initial weights
  (for a squared-error probe: unless it is within :data:`MEAN_MARGIN` of the loss of
  predicting the training mean: a probe of a state that holds nothing of its target can
  do no better than the mean, and one that starts there has nothing to improve: an empty
  cell is a result, not a failure);
- what the probe's design reads in its validation statistics: ``below_null`` (the critic:
  a density below the null it contains at some position) and ``below_linear`` (worse
  than a ridge reference where that reference clearly reads x(s): for the critic in
  telling matched from mismatched validation pairs, :mod:`infoprobe.probes.critic`; for
  the MLP and query probes in R², :mod:`infoprobe.probes.references`).

A fit still improving when its epoch budget ends is not counted as failed (its test is
exact whatever it learned, and it has improved on its start): its ``best_epoch`` shows it.
A cell with a failed probe is trained again from another start (start r draws its weights
from ``SeedSequence([seed, cell, r])``), up to ``TrainingBudget.restarts`` (default 2)
more times; each probe keeps the start with the lowest validation loss. The selection
sees validation samples only, never the test samples its scores and p-values are computed
on, so it cannot bias them: the test of a kept fit is the test of a fit chosen before the
test data were read.
A probe that still fails is flagged (``ChunkedFit.failures``), never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["FAILURES", "MEAN_MARGIN", "failure_names", "fit_failures", "refit_failed"]

MEAN_MARGIN = 0.01
"""A squared-error probe whose best validation loss is within this fraction of the mean
predictor's loss made no progress only because none was possible (``no_progress``)."""
FAILURES = ("no_progress", "below_null", "below_linear")
"""The failure reasons: bit i of a reason code is ``FAILURES[i]`` (0: a good fit)."""


def failure_names(code: int) -> list[str]:
    """The reasons a reason code holds."""
    return [name for i, name in enumerate(FAILURES) if int(code) >> i & 1]


def fit_failures(engine, judge=None) -> np.ndarray:
    """Reason codes ``[C, ...probe axes]`` (uint8, 0 = a good fit) of one fitted dataset
    (:class:`~infoprobe.probes.chunked_fit.ChunkedFit`); ``judge``: the design's reading of
    its validation statistics (failure bits ``[C, ...]``), if any."""
    stuck = ~(engine.best_val_loss < engine.start_val_loss)  # NaN: failed
    mean = getattr(engine, "mean_val_loss", None)
    if mean is not None:
        stuck &= ~(engine.best_val_loss <= mean * (1 + MEAN_MARGIN))
    codes = stuck.astype(np.uint8)
    if judge is not None and engine.val_stats is not None:
        bits = np.asarray(judge(engine.val_stats), dtype=np.uint8)
        while bits.ndim > codes.ndim:  # per position, for a probe of a whole cell
            bits = np.bitwise_or.reduce(bits, axis=-1)
        codes |= bits.reshape(bits.shape + (1,) * (codes.ndim - bits.ndim))
    return codes


def _cells_of(codes: np.ndarray) -> np.ndarray:
    """Cells with at least one failed probe."""
    return np.flatnonzero(codes.reshape(len(codes), -1).any(axis=1))


def _along(mask: np.ndarray, target: np.ndarray, axis: int) -> np.ndarray:
    """``mask [F, ...probe axes]`` broadcast against ``target``, whose axes from ``axis``
    on are the F cells and then the probe axes."""
    shape = (1,) * axis + mask.shape + (1,) * (target.ndim - axis - mask.ndim)
    return np.broadcast_to(mask.reshape(shape), target.shape)


def _take(engine, sub, cells: np.ndarray, better: np.ndarray) -> None:
    """Put the probes of ``sub`` (a fit of ``cells`` only) where ``better`` into ``engine``."""
    for name, values in engine.params.items():
        keep = _along(better, sub.params[name], 0)
        values[cells] = np.where(keep, sub.params[name], values[cells])
    for name in ("best_val_loss", "best_epoch", "start_val_loss"):
        values = getattr(engine, name)
        values[cells] = np.where(better, getattr(sub, name), values[cells])
    test = engine.test_pred
    keep = _along(better, sub.test_pred, 1)
    test[:, cells] = np.where(keep, sub.test_pred, test[:, cells])
    if engine.val_stats is not None:
        keep = _along(better.reshape(len(cells), -1).any(axis=1), sub.val_stats, 0)
        engine.val_stats[cells] = np.where(keep, sub.val_stats, engine.val_stats[cells])


def _restarted(make, keys: list[tuple[int, int]]):
    """A module factory of the cells ``keys`` (cell, start), addressed as 0 .. len - 1."""
    return lambda part, arrays: make([keys[i] for i in part], arrays)


def refit_failed(
    datasets: Sequence[tuple[object, np.ndarray]],
    engines: list,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    design,
    fit,
    restarts: int = 2,
) -> list[np.ndarray]:
    """Refit the failed cells of every fitted dataset from up to ``restarts`` more starts
    (module docstring), in place; returns each dataset's final reason codes.

    ``fit(pairs, splits, n_cells, design)`` is the batched fit (:func:`fit_chunked` with the
    caller's device and memory budget) run on the failed cells' states only.
    """
    judge = design.judge
    codes = [fit_failures(e, judge) for e in engines]
    for start in range(1, restarts + 1):
        for d, ((X, y), engine) in enumerate(zip(datasets, engines, strict=True)):
            cells = _cells_of(codes[d])
            if not len(cells):
                continue
            states = np.stack([np.asarray(X[:, int(c)]) for c in cells], axis=1)
            keys = [(int(c), start) for c in cells]
            again = dataclasses.replace(design, make_module=_restarted(design.make_module, keys))
            sub = fit([(states, y)], splits, len(cells), again)[0]
            better = sub.best_val_loss < engine.best_val_loss[cells]
            _take(engine, sub, cells, better)
            engine.starts[cells] += 1
            codes[d] = fit_failures(engine, judge)
    return codes
