"""Held-out split of samples into train / validation / test, decided before any fitting."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infoprobe.probes.errors import SplitTooSmallError

TRAIN, VAL, TEST = 0, 1, 2
SPLIT_NAMES = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.7, 0.15, 0.15)
MIN_SPLIT_SAMPLES = (8, 2, 2)


def check_fractions(fractions: Sequence[float]) -> np.ndarray:
    """``fractions`` as float64 [3] if they are (train, val, test) split fractions: three
    finite non-negative numbers summing to 1; else :class:`SplitTooSmallError`."""
    try:
        fr = np.asarray(fractions, dtype=float)
    except (TypeError, ValueError):
        fr = np.full(0, np.nan)
    if (
        fr.shape != (3,)
        or not np.isfinite(fr).all()
        or (fr < 0).any()
        or not np.isclose(fr.sum(), 1.0)
    ):
        raise SplitTooSmallError(
            f"split fractions: expected three non-negative numbers summing to 1 "
            f"(train, val, test), got {fractions!r}"
        )
    return fr


def make_split(
    n: int,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
    min_samples: tuple[int, int, int] = MIN_SPLIT_SAMPLES,
) -> np.ndarray:
    """Assign each of ``n`` samples to train (0), validation (1) or test (2) at random.

    The counts are ``round(n * fraction)`` for validation and test, the rest is train; the
    assignment is a seeded permutation, so it never depends on the data.

    Args:
        n: number of samples.
        fractions: (train, val, test), non-negative, summing to 1.
        seed: seed of the local ``numpy.random.Generator``.
        min_samples: minimum count per split; fewer raises :class:`SplitTooSmallError`.

    Returns:
        int8 labels ``[n]`` with values in {0, 1, 2}.
    """
    fr = check_fractions(fractions)
    n_val, n_test = round(n * fr[1]), round(n * fr[2])
    counts = (n - n_val - n_test, n_val, n_test)
    for name, count, least in zip(SPLIT_NAMES, counts, min_samples, strict=True):
        if count < least:
            raise SplitTooSmallError(
                f"split '{name}': expected at least {least} samples, got {count} "
                f"(n={n}, fractions={tuple(fractions)}); use more samples"
            )
    labels = np.repeat(np.arange(3, dtype=np.int8), counts)
    return labels[np.random.default_rng(seed).permutation(n)]


def split_indices(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted sample indices ``(train_idx, val_idx, test_idx)`` of split labels ``[n]``."""
    return tuple(np.flatnonzero(labels == s) for s in (TRAIN, VAL, TEST))  # type: ignore[return-value]
