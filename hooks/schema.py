"""The on-disk layout of an activation cache (docs/cache-format.md is the contract).

One HDF5 file: the header (docs/conventions.md, "File headers") and root attributes for
provenance and the commit cursor, ``/inputs/x``, ``/targets/y`` and one
``/acts/<hook name>`` dataset per site, every dataset ``[N, ...]`` with an ``axes``
attribute and labelled dimensions. Chunks hold whole samples (the probes read many
samples of one site) and are sized by :func:`chunk_rows`.

Schema 2 (this version) has the common header (``created``, root ``axes``) and the axis
names ``token`` / ``position``; schema 1 files (``created_utc``, axis name ``pos``) are
still read (:data:`OLDEST_READABLE`), but never resumed: a resume refuses them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from math import prod
from typing import Any

import numpy as np

from infoprobe.base.formats import CACHE

FORMAT = CACHE
SCHEMA_VERSION = 2
OLDEST_READABLE = 1
"""Oldest schema the reader accepts (schema 1 differs only in header and axis names)."""
X_PATH, Y_PATH, ACTS_GROUP = "inputs/x", "targets/y", "acts"
X_AXES, Y_AXES = ("sample", "position", "d_in"), ("sample", "d_out")
STORAGE_DTYPES = ("float32", "float16")

CHUNK_TARGET_BYTES = 1 << 20
"""Upper bound of a chunk (h5py guidance: 10 KiB–1 MiB); see docs/cache-format.md."""
CHUNK_MIN_BYTES = 64 << 10
"""Smallest chunk accepted when aligning chunks to the write batch."""

JSON_ATTRS = ("model_config_json", "data_spec_json", "provenance_json")
"""Root attributes holding a JSON object (canonical JSON, see :func:`canonical_json`)."""

IDENTITY_ATTRS = ("schema_version", "n", "batch_size", "dtype", "hook_names", "provenance_json")
"""Root attributes a resumed run must match exactly."""


def package_version() -> str:
    """Installed infoprobe version (read from package metadata, not from the hub)."""
    try:
        return metadata.version("infoprobe")
    except metadata.PackageNotFoundError:
        return "unknown"


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for provenance attributes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def acts_path(name: str) -> str:
    """HDF5 path of the dataset holding hook site ``name``: ``acts/<name>`` verbatim."""
    return f"{ACTS_GROUP}/{name}"


def chunk_rows(row_bytes: int, batch_size: int, n: int) -> int:
    """Samples per chunk for a dataset whose one sample takes ``row_bytes`` bytes.

    The largest count with chunk ≤ :data:`CHUNK_TARGET_BYTES` that divides ``batch_size``
    (so each batch write covers whole chunks), unless that makes chunks smaller than
    :data:`CHUNK_MIN_BYTES`; then the largest count under the target. Never more than n
    or the batch size, never less than one sample.
    """
    cap = max(1, min(CHUNK_TARGET_BYTES // max(row_bytes, 1), batch_size, n))
    aligned = max(d for d in range(1, cap + 1) if batch_size % d == 0)
    return aligned if aligned * row_bytes >= min(CHUNK_MIN_BYTES, cap * row_bytes) else cap


@dataclass(frozen=True)
class DatasetPlan:
    """One dataset of the file: HDF5 path, shape [N, ...], dtype, chunk shape, axis names."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    axes: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def row_bytes(self) -> int:
        return prod(self.shape[1:]) * np.dtype(self.dtype).itemsize


def dataset_plan(
    path: str,
    row_shape: tuple[int, ...],
    dtype: str,
    n: int,
    batch_size: int,
    axes: tuple[str, ...],
) -> DatasetPlan:
    """Plan a dataset [n, *row_shape] with chunks of whole samples (see :func:`chunk_rows`)."""
    row_bytes = prod(row_shape) * np.dtype(dtype).itemsize
    rows = chunk_rows(row_bytes, batch_size, n)
    return DatasetPlan(path, (n, *row_shape), dtype, (rows, *row_shape), axes)
