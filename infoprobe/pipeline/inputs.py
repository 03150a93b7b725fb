"""Inputs (and targets) from a file, for a model whose samples are the user's own.

``infoprobe cache CKPT --inputs X.npy [--targets Y.npy]`` caches rows 0..N-1 of ``x``
instead of a task's samples. A file is one of

- ``.npy``: the array itself (read with ``allow_pickle=False``: opening it runs nothing);
- ``.h5`` / ``.hdf5``: the dataset ``x`` (``y`` for targets);
- ``.safetensors``: the tensor ``x`` (``y``).

x must be floating, finite and ``[n, T, d]`` with the checkpoint's T and d; y floating,
finite and ``[n]`` or ``[n, d_out]``. Both are stored as float32. A cache made from a file
records the file's path, dataset, shape and SHA-256 in its ``data_spec`` (``inputs``,
``targets``), so a resume or a later stage can tell another file from the same one.
Without a targets file ``/targets/y`` holds NaN: there is nothing to compare the
model's output with, and no stage reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from infoprobe.base.digest import file_sha256
from infoprobe.base.errors import UserError

SUFFIXES = (".npy", ".h5", ".hdf5", ".safetensors")
SAMPLER = "rows 0..n-1 of the inputs file"


class InputsError(UserError):
    """An inputs or targets file is missing, of another format, shape or dtype."""


def read_array(path: str | os.PathLike, name: str) -> np.ndarray:
    """The array of ``path`` (``.npy``), or its dataset / tensor ``name`` (HDF5,
    safetensors), refused in one line naming the file when it cannot be read."""
    path = Path(path)
    if not path.is_file():
        what = "not a regular file (a FIFO, device or folder)" if path.exists() else "no such file"
        raise InputsError(f"{path}: {what}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":  # mapped first: a header claiming more than the file holds is
            # refused before any memory is taken for it
            return np.array(np.load(path, mmap_mode="r", allow_pickle=False))
        if suffix in (".h5", ".hdf5"):
            with h5py.File(path, "r") as f:
                link = f.get(name, getlink=True)
                if isinstance(link, h5py.ExternalLink | h5py.SoftLink):
                    raise InputsError(
                        f"{path}: dataset {name!r} is a link ({type(link).__name__} to "
                        f"{getattr(link, 'filename', '')}{link.path}): its data lie elsewhere, "
                        "unhashed; store the array itself in the file"
                    )
                if name not in f or not isinstance(f[name], h5py.Dataset):
                    raise InputsError(f"{path}: no dataset {name!r} (it holds {sorted(f)})")
                if f[name].is_virtual:
                    raise InputsError(
                        f"{path}: dataset {name!r} is a virtual dataset (its data lie in other "
                        "files, which may be missing or change unhashed); store the array "
                        "itself in the file"
                    )
                return f[name][()]
        if suffix == ".safetensors":
            from safetensors.numpy import load_file

            tensors = load_file(str(path))
            if name not in tensors:
                raise InputsError(f"{path}: no tensor {name!r} (it holds {sorted(tensors)})")
            return tensors[name]
    except InputsError:
        raise
    except MemoryError:
        raise InputsError(
            f"{path}: its array does not fit in memory ({path.stat().st_size} bytes on disk)"
        ) from None
    except Exception as err:  # not the format its name says (safetensors has its own class)
        if (
            not isinstance(err, OSError | ValueError)
            and "safetensor" not in type(err).__name__.lower()
        ):
            raise
        raise InputsError(
            f"{path}: not a readable {suffix} file ({' '.join(str(err).split())[:160]})"
        ) from None
    raise InputsError(f"{path}: expected a file ending in {', '.join(SUFFIXES)}, got {suffix!r}")


def _floating(array: np.ndarray, path: Path, what: str) -> np.ndarray:
    if not np.issubdtype(array.dtype, np.floating):
        raise InputsError(
            f"{path}: {what} has dtype {array.dtype}, expected floating point (float16/32/64)"
        )
    array = np.ascontiguousarray(array, dtype=np.float32)
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputsError(f"{path}: {what} holds {array[index]} at index {list(index)}, "
                          "expected finite numbers")  # fmt: skip
    return array


@dataclass(frozen=True)
class FileInputs:
    """Inputs x [n, T, d] float32 and targets y [n, d_out] float32 (NaN: none given) read
    from files, and their description for a cache's ``data_spec``."""

    x: np.ndarray
    y: np.ndarray
    inputs: dict[str, Any]
    targets: dict[str, Any] | None

    def batch_fn(self, batch_size: int):
        """``batch_fn(b, size)``: rows ``b * batch_size`` onwards (the cache's batches)."""

        def batch(index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
            start = index * batch_size
            return self.x[start : start + size], self.y[start : start + size]

        return batch

    def spec(self, n: int, batch_size: int) -> dict[str, Any]:
        """The ``data_spec`` of a cache of the first ``n`` rows."""
        return {
            "task": None,
            "inputs": self.inputs,
            "targets": self.targets,
            "n": n,
            "batch_size": batch_size,
            "data_seed": None,
            "sampler": SAMPLER,
        }


def read_inputs(
    inputs: str | os.PathLike,
    targets: str | os.PathLike | None,
    *,
    T: int,
    d: int,
    d_out: int,
) -> FileInputs:
    """Read and check ``inputs`` (x [n, T, d]) and ``targets`` (y [n] or [n, d_out])."""
    path = Path(inputs)
    x = read_array(path, "x")
    if x.ndim != 3 or x.shape[1:] != (T, d):
        raise InputsError(
            f"{path}: inputs x have shape {list(x.shape)}, expected [n, T={T}, d={d}] (the "
            "checkpoint's model_config n_ctx and d_in)"
        )
    if x.shape[0] < 1:
        raise InputsError(f"{path}: inputs x have no rows (shape {list(x.shape)})")
    x = _floating(x, path, "inputs x")
    described = {"file": str(path.resolve()), "sha256": file_sha256(path), "shape": list(x.shape)}
    if targets is None:
        return FileInputs(x, np.full((len(x), d_out), np.nan, np.float32), described, None)
    tpath = Path(targets)
    y = read_array(tpath, "y")
    y = y[:, None] if y.ndim == 1 else y
    if y.ndim != 2 or y.shape != (len(x), d_out):
        raise InputsError(
            f"{tpath}: targets y have shape {list(y.shape)}, expected [n={len(x)}] or "
            f"[n={len(x)}, d_out={d_out}] (one row per input)"
        )
    y = _floating(y, tpath, "targets y")
    target = {"file": str(tpath.resolve()), "sha256": file_sha256(tpath), "shape": list(y.shape)}
    return FileInputs(x, y, described, target)
