"""Small helpers shared by every self-describing file infoprobe writes.

Opening with one clear error per failure (missing, not HDF5, damaged, locked), the file
header (docs/conventions.md, "File headers": root attributes ``format``,
``schema_version``, ``created``, ``infoprobe_version``, ``axes``; every dataset's axes as
an ``axes`` attribute and HDF5 dimension labels) and its check, attribute values as plain
Python, and the field paths at which two JSON values differ. The activation cache uses
them, and so does the hub (influence files, run folders), so every file fails the same way.

This is the ``infoprobe.hooks`` leaf's own small header helper: a leaf imports nothing from
the hub but its base of file helpers (``infoprobe.base.atomic``: temporary names, output
locks), so the hub keeps its own header helper (``infoprobe.base.header``), which writes the
same fields.
``json_differences`` has no copy: the hub imports it from here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import h5py
import numpy as np


def utc_now() -> str:
    """The current time as ISO 8601 UTC to the second (the header's ``created``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def axes_of(*axes: Iterable[str]) -> list[str]:
    """Every axis name of ``axes`` (one list per dataset), in order of first appearance:
    the root attribute ``axes``."""
    return list(dict.fromkeys(name for names in axes for name in names))


def label_axes(dataset: h5py.Dataset, axes: Iterable[str]) -> None:
    """Name the axes of a dataset: its ``axes`` attribute and its dimension labels."""
    names = list(axes)
    if len(names) != dataset.ndim:
        raise ValueError(f"{dataset.name}: {len(names)} axis names {names} for {dataset.ndim} axes")
    dataset.attrs["axes"] = names
    for i, name in enumerate(names):
        dataset.dims[i].label = name


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
    oldest: int = 1,
) -> int:
    """Refuse a file whose root ``format`` is not ``fmt`` (``not_ours``), whose
    ``schema_version`` is newer than ``schema_version`` (``newer``) or not an integer of at
    least ``oldest`` (``not_ours``); return the version."""
    found = plain_attr(f.attrs.get("format"))
    if found != fmt:
        raise not_ours(
            f"{path} is not {what}: root attribute 'format' is {found!r}, expected {fmt!r}"
        )
    version = plain_attr(f.attrs.get("schema_version"))
    is_int = isinstance(version, int) and not isinstance(version, bool)
    if not is_int or not oldest <= version <= schema_version:
        error = newer if is_int and version > schema_version else not_ours
        hint = "upgrade infoprobe to read it" if error is newer else "the file is damaged"
        raise error(
            f"{path}: root attribute 'schema_version' is {version!r}, expected an integer in "
            f"{oldest}..{schema_version} (this infoprobe writes {schema_version}); {hint}"
        )
    return version


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
