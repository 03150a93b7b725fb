"""Opening an HDF5 file with one clear error per failure, and JSON differences.

:func:`open_hdf5` raises one error per failure (missing, not HDF5, damaged, locked);
:func:`json_differences` lists the field paths at which two JSON values differ. The
activation cache uses them, and so does the hub (influence files, run folders), so every
file fails the same way.

The file header (docs/conventions.md, "File headers") has one helper,
``infoprobe.base.header``, which this leaf may import (a leaf imports nothing of the hub
but ``infoprobe.base``); its names the cache code uses are re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py

from infoprobe.base.header import (
    axes_of,
    check_format,
    is_hdf5_file,
    label_axes,
    plain_attr,
    utc_now,
)

__all__ = [
    "axes_of",
    "check_format",
    "is_hdf5_file",
    "json_differences",
    "label_axes",
    "open_hdf5",
    "plain_attr",
    "utc_now",
]


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


def json_differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Paths (``where.a.b``; ``a.b`` without ``where``) at which two JSON values differ,
    with both values: ``"where.a.b: file has 1, this run has 2"`` (``<absent>`` for a key
    one side lacks). The one JSON diff of infoprobe: the hub imports it from here."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for key in sorted(set(old) | set(new))
            for line in json_differences(
                old.get(key, "<absent>"),
                new.get(key, "<absent>"),
                f"{where}.{key}" if where else str(key),
            )
        ]
    return [] if old == new else [f"{where}: file has {old!r}, this run has {new!r}"]
