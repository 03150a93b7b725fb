"""Small HDF5 helpers shared by every self-describing file infoprobe writes.

Opening with one clear error per failure (missing, not HDF5, damaged, locked), the root
``format`` / ``schema_version`` check, attribute values as plain Python, and the field
paths at which two JSON values differ. The activation cache uses them, and so do the
hub's other HDF5 files (influence files), so every file fails the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np


def plain_attr(value: Any) -> Any:
    """An HDF5 attribute value as plain Python (str, int, float, lists of those)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [plain_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def is_hdf5_file(path: Path) -> bool:
    """Whether ``path`` is a non-empty regular file with an HDF5 signature."""
    return path.is_file() and path.stat().st_size > 0 and h5py.is_hdf5(path)


def open_hdf5(
    path: Path,
    mode: str,
    *,
    what: str,
    not_ours: type[Exception],
    damaged: type[Exception],
    busy: type[Exception] | None = None,
    **kwargs: Any,
) -> h5py.File:
    """Open ``path`` as ``what`` ("an influence file"), raising ``not_ours`` when it is
    missing or not HDF5, ``busy`` (if given) when another process holds its lock, and
    ``damaged`` when HDF5 cannot open it (truncated or corrupt)."""
    if not path.is_file():
        raise not_ours(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    if not is_hdf5_file(path):
        raise not_ours(f"{path} is not an HDF5 file, so not {what}")
    try:
        return h5py.File(path, mode, **kwargs)
    except OSError as err:
        if busy is not None and "unable to lock" in str(err).lower():
            raise busy(f"{path} is open for writing by another process: {err}") from None
        raise damaged(
            f"{path} is a damaged HDF5 file (truncated or corrupt), it cannot be opened: {err}"
        ) from None


def check_format(
    f: h5py.File,
    path: Path,
    *,
    fmt: str,
    schema_version: int,
    what: str,
    not_ours: type[Exception],
    newer: type[Exception],
) -> None:
    """Refuse a file whose root ``format`` is not ``fmt`` (``not_ours``) or whose
    ``schema_version`` is not an int at most ``schema_version`` (``newer``)."""
    found = plain_attr(f.attrs.get("format"))
    if found != fmt:
        raise not_ours(
            f"{path} is not {what}: root attribute 'format' is {found!r}, expected {fmt!r}"
        )
    version = plain_attr(f.attrs.get("schema_version"))
    if not isinstance(version, int) or version > schema_version:
        raise newer(
            f"{path}: attribute 'schema_version' is {version!r}, this infoprobe reads "
            f"schema <= {schema_version}; upgrade infoprobe to read it"
        )


def json_differences(old: Any, new: Any, where: str) -> list[str]:
    """Paths (``where.a.b``) at which two JSON values differ, with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for key in sorted(set(old) | set(new))
            for line in json_differences(
                old.get(key, "<absent>"), new.get(key, "<absent>"), f"{where}.{key}"
            )
        ]
    return [] if old == new else [f"{where}: file has {old!r}, this run has {new!r}"]
