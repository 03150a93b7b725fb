"""Input checks shared by the probes: finiteness and shapes, with messages that name the array."""

from __future__ import annotations

import numpy as np
import torch

from infoprobe.probes.errors import NonFiniteActivationError, ProbeInputError

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
