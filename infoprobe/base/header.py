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

This module is infoprobe's one header helper: the hub and the pillars (``infoprobe.hooks``,
``infoprobe.probes``, which may import ``infoprobe.base``) write, read and check headers
with it, so every file fails the same way: an error naming the file, the field, the
expected and the found value. It imports nothing of infoprobe but ``__version__``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

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


MODEL_IDENTITY = ("checkpoint_sha256", "model_code_sha256")
"""The provenance fields that name a model: the SHA-256 of its weights file and of a
foreign model's code (None for infoprobe's own model). Files made from two models that
differ in either are never combined."""


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
    if not Path(path).is_file():
        what = "a folder, not a JSON file" if Path(path).is_dir() else "no such file"
        raise error(f"{path}: {what}{tail}")
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise error(f"{path}: not a text file ({err}){tail}") from None
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON (truncated?): {err}{tail}") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply to be a file infoprobe wrote{tail}") from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise error(f"{path}: JSON that cannot be read as numbers ({err}){tail}") from None
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
    newer: type[Exception] | None = None,
    legacy_version: str | None = None,
    unversioned: int | None = None,
    what: str = "field",
    kind: str | None = None,
) -> int:
    """Check a file's ``format`` and ``schema_version``; return the version.

    Args:
        found: the file's top-level fields (JSON) or root attributes (HDF5: ``f.attrs``;
            values are read with :func:`plain_attr`).
        where: the file, named in the error.
        fmt: the expected ``format``.
        readable: the schema versions this infoprobe reads (e.g. ``range(1, 3)``).
        error: the exception class to raise.
        newer: the exception class for a version newer than this infoprobe reads
            (default ``error``).
        legacy_version: the field an older schema kept its version in (``format_version``),
            read when ``schema_version`` is absent.
        unversioned: the version of a file with neither field (files that had no version).
        what: ``"field"`` (JSON) or ``"root attribute"`` (HDF5), for the message.
        kind: what the file should be (``"an influence file"``): a wrong ``format`` then
            reads ``FILE is not KIND: ...``.

    Raises ``error`` (or ``newer``) naming the file, the field, the expected and the found
    value; the version must be an integer in ``readable``.
    """
    found_format = plain_attr(found.get("format"))
    if found_format != fmt:
        prefix = f"{where} is not {kind}:" if kind else f"{where}:"
        raise error(f"{prefix} {what} 'format' is {found_format!r}, expected {fmt!r}")
    field = "schema_version"
    if field not in found and legacy_version is not None and legacy_version in found:
        field = legacy_version
    version = plain_attr(found.get(field, unversioned))
    is_int = isinstance(version, int) and not isinstance(version, bool)
    if not is_int or version not in readable:
        newest = readable[-1]
        is_newer = is_int and version > newest
        hint = "upgrade infoprobe to read it" if is_newer else "the file is damaged or foreign"
        refusal = (newer or error) if is_newer else error
        raise refusal(
            f"{where}: {what} {field!r} is {version!r}, expected an integer in "
            f"{readable[0]}..{newest} (this infoprobe writes {newest}); {hint}"
        )
    return version


def check_format(
    f: Any,
    path: str | os.PathLike,
    *,
    fmt: str,
    schema_version: int,
    what: str,
    not_ours: type[Exception],
    newer: type[Exception],
    oldest: int = 1,
) -> int:
    """:func:`check_header` for an open HDF5 file ``f`` that should be ``what`` ("an
    influence file"), reading schema versions ``oldest..schema_version``: ``not_ours`` for
    another ``format`` or a version that is not such an integer, ``newer`` for a newer one."""
    return check_header(
        f.attrs, path, fmt=fmt, readable=range(oldest, schema_version + 1), error=not_ours,
        newer=newer, what="root attribute", kind=what,
    )  # fmt: skip


def plain_attr(value: Any) -> Any:
    """An HDF5 attribute value as plain Python (str, int, float, bool, lists of those):
    bytes decoded, numpy scalars unwrapped, arrays as (nested) lists."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [plain_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def is_hdf5_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a non-empty regular file with an HDF5 signature."""
    import h5py  # here, so JSON-only users of this module do not load HDF5

    path = Path(path)
    return path.is_file() and path.stat().st_size > 0 and h5py.is_hdf5(path)


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
    text = plain_attr(raw)
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
