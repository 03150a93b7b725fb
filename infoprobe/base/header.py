"""The header of every file infoprobe writes (docs/conventions.md, "File headers").

Five fields, as the top-level keys of a JSON file or the root attributes of an HDF5 file:
``format`` (the kind, e.g. ``"infoprobe.influence"``), ``schema_version`` (int, bumped
whenever the layout changes), ``created`` (when the file was written, ISO 8601 UTC,
``2026-01-31T12:00:00Z``),
``infoprobe_version`` and ``axes`` (list of the axis names the file's arrays use, from
:data:`AXES`, in order of first appearance). Every HDF5 array dataset also carries its own
``axes`` attribute and the same names as HDF5 dimension labels, which h5py
(``[d.label for d in ds.dims]``), ``h5dump -H`` and HDFView show; xarray's HDF5 engines
read dimension scales instead and name the axes ``phony_dim_*`` (docs/conventions.md
gives the one line that names them from the labels).

This module is the hub's one header helper. The leaves cannot import the hub, so
``infoprobe.hooks`` (hooks/hdf5.py) and ``infoprobe.probes`` (probes/results.py) keep a
small copy of their own that writes the same fields.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from infoprobe import __version__

FIELDS = ("format", "schema_version", "created", "infoprobe_version", "axes")
"""The header fields, in the order they are written."""

AXES = (
    "sample", "layer", "token", "position", "query", "key", "head", "role", "tau",
    "d_in", "d_out", "d_model", "d_head", "d_mlp", "one",
)  # fmt: skip
"""The axis vocabulary (docs/conventions.md): ``token`` indexes the T+1 states (CLS = T),
``position`` the input positions s, ``query``/``key`` the two token axes of an attention
pattern, ``tau`` a threshold sweep; ``d_*`` are feature axes named after their size."""


def utc_now() -> str:
    """The current time as ISO 8601 UTC to the second: ``2026-01-31T12:00:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def axes_of(*axes: Iterable[str]) -> list[str]:
    """Every axis name of ``axes`` (one list per array), in order of first appearance."""
    return list(dict.fromkeys(name for names in axes for name in names))


def make_header(fmt: str, schema_version: int, axes: Iterable[str] = ()) -> dict[str, Any]:
    """The five header fields of a new file (``created`` = now)."""
    names = list(axes)
    unknown = [a for a in names if a not in AXES]
    if unknown:
        raise ValueError(f"axis name(s) {unknown} are not in the vocabulary {AXES}")
    return {
        "format": fmt,
        "schema_version": int(schema_version),
        "created": utc_now(),
        "infoprobe_version": __version__,
        "axes": names,
    }


def read_json_object(
    path: str | os.PathLike, error: type[Exception], fix: str = ""
) -> dict[str, Any]:
    """The JSON object in ``path``; ``error`` naming the file when it is not valid JSON
    (truncated, say) or holds another JSON value, with ``fix`` (what to do) appended."""
    tail = f"; {fix}" if fix else ""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise error(f"{path}: not a text file ({err}){tail}") from None
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON (truncated?): {err}{tail}") from None
    if not isinstance(document, dict):
        raise error(f"{path}: expected a JSON object, got a JSON {type(document).__name__}{tail}")
    return document


def with_header(
    document: Mapping[str, Any], fmt: str, schema_version: int, axes: Iterable[str] = ()
) -> dict[str, Any]:
    """``document`` with this version's header first (``created`` = now), replacing any
    header fields it had: for a file rewritten whole (a manifest, a summary), possibly
    read from an older schema."""
    rest = {k: v for k, v in document.items() if k not in FIELDS}
    return {**make_header(fmt, schema_version, axes), **rest}


def check_header(
    found: Mapping[str, Any],
    where: str | os.PathLike,
    *,
    fmt: str,
    readable: range,
    error: type[Exception],
    legacy_version: str | None = None,
    unversioned: int | None = None,
    what: str = "field",
) -> int:
    """Check a file's ``format`` and ``schema_version``; return the version.

    Args:
        found: the file's top-level fields (JSON) or root attributes (HDF5, plain Python).
        where: the file, named in the error.
        fmt: the expected ``format``.
        readable: the schema versions this infoprobe reads (e.g. ``range(1, 3)``).
        error: the exception class to raise.
        legacy_version: the field an older schema kept its version in (``format_version``),
            read when ``schema_version`` is absent.
        unversioned: the version of a file with neither field (files that had no version).
        what: ``"field"`` (JSON) or ``"root attribute"`` (HDF5), for the message.

    Raises ``error`` naming the file, the field, the expected and the found value.
    """
    found_format = _plain(found.get("format"))
    if found_format != fmt:
        raise error(f"{where}: {what} 'format' is {found_format!r}, expected {fmt!r}")
    field = "schema_version"
    if field not in found and legacy_version is not None and legacy_version in found:
        field = legacy_version
    version = _plain(found.get(field, unversioned))
    is_int = isinstance(version, int) and not isinstance(version, bool)
    if not is_int or version not in readable:
        newest = readable[-1]
        newer = is_int and version > newest
        hint = "upgrade infoprobe to read it" if newer else "the file is damaged or foreign"
        raise error(
            f"{where}: {what} {field!r} is {version!r}, expected an integer in "
            f"{readable[0]}..{newest} (this infoprobe writes {newest}); {hint}"
        )
    return version


def _plain(value: Any) -> Any:
    """An HDF5 attribute value (numpy scalar, bytes) as plain Python."""
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value


def write_attrs(attrs: MutableMapping[str, Any], header: Mapping[str, Any]) -> None:
    """Store a header as HDF5 root attributes (``axes`` as an array of strings)."""
    for key, value in header.items():
        attrs[key] = list(value) if key == "axes" else value


def label_axes(dataset: Any, axes: Iterable[str]) -> None:
    """Name the axes of an HDF5 dataset: its ``axes`` attribute and its dimension labels."""
    names = list(axes)
    if len(names) != dataset.ndim:
        raise ValueError(f"{dataset.name}: {len(names)} axis names {names} for {dataset.ndim} axes")
    dataset.attrs["axes"] = names
    for i, name in enumerate(names):
        dataset.dims[i].label = name


def json_field(
    raw: Any,
    where: str | os.PathLike,
    name: str,
    *,
    error: type[Exception],
    expected: type | tuple[type, ...] = dict,
    what: str = "root attribute",
) -> Any:
    """Parse the JSON text ``raw`` of field ``name`` of file ``where`` and check its type.

    Returns the parsed value; raises ``error`` naming the file, the field, what was
    expected and what was found (not JSON, or JSON of another type).
    """
    text = _plain(raw)
    kinds = expected if isinstance(expected, tuple) else (expected,)
    words = {dict: "a JSON object", list: "a JSON list"}
    names = " or ".join(words.get(k, k.__name__) for k in kinds)
    if not isinstance(text, str):
        raise error(f"{where}: {what} {name!r} is {type(text).__name__}, expected JSON text")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise error(f"{where}: {what} {name!r} is {shown!r}, expected {names} (not JSON)") from None
    if not isinstance(value, kinds):
        raise error(f"{where}: {what} {name!r} is a JSON {type(value).__name__}, expected {names}")
    return value
