"""Input checks shared by the probes, with messages that name the array or setting.

Finiteness and axes of any array; the batched probes' ``X [n, C, E]`` / ``Y [n, S, k]``
pair, their disjoint train/val/test sample-index splits and positive-int settings.
"""

from __future__ import annotations

import numpy as np
import torch

from infoprobe.probes.errors import (
    NonFiniteActivationError,
    ProbeInputError,
    SplitTooSmallError,
)

ArrayLike = np.ndarray | torch.Tensor


def check_finite(array: ArrayLike, name: str, offset: int = 0) -> None:
    """Raise :class:`NonFiniteActivationError` if ``array`` holds NaN or Inf.

    Args:
        array: any shape; axis 0 is the sample axis.
        name: what the array is (e.g. ``"acts/blocks.0.hook_resid_post"``), used in the message.
        offset: global index of ``array[0]`` so the message gives the index in the whole file.
    """
    tensor = torch.as_tensor(array)
    if not tensor.is_floating_point() or bool(torch.isfinite(tensor.sum())):
        return  # fast path: one read, no mask (a sum of finite values overflows only at ~1e38)
    finite = torch.isfinite(tensor)
    if bool(finite.all()):
        return  # the sum overflowed, every value is finite
    bad = torch.nonzero(~finite)[0].tolist()
    bad[0] += offset
    value = tensor[tuple(int(i) for i in torch.nonzero(~finite)[0])].item()
    raise NonFiniteActivationError(
        f"{name}: expected finite values, got {value} at index {tuple(bad)} "
        "(first non-finite entry; sample index first)"
    )


def check_ndim(array: ArrayLike, ndim: int, name: str, axes: str) -> None:
    """Raise :class:`ProbeInputError` unless ``array`` has ``ndim`` axes (named ``axes``)."""
    if array.ndim != ndim:
        raise ProbeInputError(
            f"{name}: expected {ndim} axes [{axes}], got shape {tuple(array.shape)}"
        )


def check_same_length(a: ArrayLike, b: ArrayLike, name_a: str, name_b: str) -> None:
    """Raise :class:`ProbeInputError` unless ``a`` and ``b`` have the same number of samples."""
    if a.shape[0] != b.shape[0]:
        raise ProbeInputError(
            f"{name_a} and {name_b}: expected the same number of samples (axis 0), "
            f"got {a.shape[0]} and {b.shape[0]}"
        )


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
