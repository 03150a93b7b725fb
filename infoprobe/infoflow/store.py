"""HDF5 files of predicted sets: written by ``infoprobe predict --out``, read by compare.

Layout (``h5dump -H`` explains it): dataset ``/sets`` bool ``[L+1, N, T+1, T+1]``
(axes layer, sample, token, position; 0-based, CLS = T, layer 0 = embedding) and
``/inputs/x`` float32 ``[N, T, d]`` (axes sample, position, d_in), each with an ``axes``
attribute and labelled dimensions. Root attributes: the header of docs/conventions.md
(``format``, ``schema_version``, ``created``, ``infoprobe_version``, ``axes``),
``task`` / ``arch`` / ``provenance`` / ``prediction`` (JSON), ``program`` (text),
``inputs_sha256``. Written to ``NAME.tmp-<pid>`` and renamed. Schema 1 files (one root
attribute ``schema = "infoprobe.predicted-sets/1"``) are still read.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output
from infoprobe.base.header import (
    axes_of,
    check_header,
    json_field,
    label_axes,
    make_header,
    write_attrs,
)

from .arch import Architecture, as_architecture
from .errors import SetsFileError
from .execute import DEFAULT_CHUNK, execute
from .predict import Prediction, refuse_non_finite

FORMAT = formats.PREDICTED_SETS
SCHEMA_VERSION = 2
"""2: the common header (``format`` + ``schema_version``, ``axes`` lists, dimension labels)."""
LEGACY_SCHEMA = f"{FORMAT}/1"
"""Schema 1 marked its files with this one root attribute ``schema``."""
AXES = ("layer", "sample", "token", "position")
X_AXES = ("sample", "position", "d_in")
CONVENTION = (
    "0-based: data tokens/positions 0..T-1 are the paper's 1..T, CLS is T (paper T+1); "
    "layer 0 = embedding (blocks.0.hook_resid_pre), layer l = blocks.{l-1}.hook_resid_post"
)
JSON_ATTRS = ("task", "arch", "provenance", "prediction")


@dataclass(frozen=True)
class SetsFile:
    """Contents of a predicted-sets file; ``sets`` bool [L+1, N, T+1, T+1], ``x`` [N, T, d]."""

    sets: np.ndarray
    x: np.ndarray
    task: dict[str, Any] | None
    arch: dict[str, Any]
    provenance: dict[str, Any]
    prediction: dict[str, Any]
    program: str


def inputs_hash(x: np.ndarray) -> str:
    """SHA-256 of input samples x [N, T, d] as contiguous float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()


def write_sets(
    path: str | os.PathLike,
    prediction: Prediction,
    x: np.ndarray,
    provenance: dict[str, Any],
    *,
    overwrite: bool = False,
    chunk: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> Path:
    """Compute the predicted sets of ``x`` [N, T, d] chunk by chunk and write them to ``path``.

    ``provenance``: how ``x`` was made (e.g. data seed, N), stored as JSON.
    """
    x = prediction.task.check_inputs(x).astype(np.float32)
    refuse_non_finite(x, f"{path}: inputs x", SetsFileError)
    summary = {k: v for k, v in prediction.to_dict().items() if k != "program"}

    def fill(sets: h5py.Dataset, step: int) -> None:
        for start in range(0, len(x), step):
            stop = min(len(x), start + step)
            sets[:, start:stop] = execute(prediction.program, x[start:stop], progress=progress)

    meta = {"task": prediction.task.to_dict(), "arch": prediction.arch.to_dict(),
            "provenance": provenance, "prediction": summary}  # fmt: skip
    return _write(path, x, prediction.program.n_layers, meta, prediction.program_text(), fill,
                  overwrite=overwrite, chunk=chunk)  # fmt: skip


def write_given_sets(
    path: str | os.PathLike,
    sets: np.ndarray,
    x: np.ndarray,
    meta: dict[str, Any],
    program: str,
    *,
    overwrite: bool = False,
) -> Path:
    """Write sets made elsewhere (bool [L+1, N, T+1, T+1] over inputs x [N, T, d]) in the
    same format; ``meta`` holds the ``task`` (dict or None), ``arch``, ``provenance`` and
    ``prediction`` attributes, ``program`` says where the sets come from."""

    def fill(dataset: h5py.Dataset, step: int) -> None:
        for start in range(0, len(x), step):
            dataset[:, start : start + step] = sets[:, start : start + step]

    return _write(path, x, sets.shape[0] - 1, meta, program, fill, overwrite=overwrite)


def _write(path, x, L, meta, program, fill, *, overwrite: bool, chunk: int = DEFAULT_CHUNK):
    """The predicted-sets file at ``path`` (module doc), its ``/sets`` filled by
    ``fill(dataset, step)``; under a temporary name, renamed when complete."""
    n, T, _ = x.shape
    with atomic_output(path, overwrite=overwrite, what="predicted-sets file", kind=FORMAT) as tmp:
        with h5py.File(tmp, "w") as f:
            write_attrs(f.attrs, make_header(FORMAT, SCHEMA_VERSION, axes_of(AXES, X_AXES)))
            f.attrs["convention"] = CONVENTION
            for key in JSON_ATTRS:
                f.attrs[key] = json.dumps(meta[key], sort_keys=True, default=str)
            f.attrs["program"] = program
            f.attrs["inputs_sha256"] = inputs_hash(x)
            label_axes(f.create_dataset("inputs/x", data=x), X_AXES)
            step = max(1, min(chunk, n))
            sets = f.create_dataset(
                "sets", shape=(L + 1, n, T + 1, T + 1), dtype=bool,
                chunks=(1, min(step, max(1, n)), T + 1, T + 1), compression="gzip",
            )  # fmt: skip
            label_axes(sets, AXES)
            fill(sets, step)
    return Path(path)


def read_sets(path: str | os.PathLike) -> SetsFile:
    """Read a file written by :func:`write_sets`; SetsFileError names what is wrong.

    Every field is validated: the JSON attributes are objects, ``task`` a valid task,
    ``arch`` an architecture of L blocks, ``/inputs/x`` finite float [N, T, d] of the
    task's T and d, ``/sets`` bool [L+1, N, T+1, T+1].
    """
    from infoprobe.tasks import task_from_dict  # hub pillar, imported where needed

    path = Path(path)
    if not path.is_file():
        raise SetsFileError(f"{path}: no such predicted-sets file")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise SetsFileError(f"{path}: not an HDF5 file ({err})") from err
    with f:
        found = dict(f.attrs)
        if "format" not in found and found.get("schema") == LEGACY_SCHEMA:
            found = {"format": FORMAT, "schema_version": 1}
        check_header(found, path, fmt=FORMAT, readable=range(1, SCHEMA_VERSION + 1),
                     error=SetsFileError, what="root attribute")  # fmt: skip
        for field in (*JSON_ATTRS, "program"):
            if field not in f.attrs:
                raise SetsFileError(f"{path}: missing root attribute {field!r}")
        for name in ("sets", "inputs/x"):
            if not isinstance(f.get(name), h5py.Dataset):
                raise SetsFileError(f"{path}: missing dataset '/{name}'")
        meta = {  # task null: sets given for inputs from a file (write_given_sets)
            field: json_field(f.attrs[field], path, field, error=SetsFileError,
                              expected=(dict, type(None)) if field == "task" else dict)
            for field in JSON_ATTRS
        }  # fmt: skip
        x_ds, sets_ds = f["inputs/x"], f["sets"]
        if x_ds.ndim != 3 or x_ds.dtype.kind != "f":
            raise SetsFileError(
                f"{path}: dataset '/inputs/x' must be float [N, T, d], got {x_ds.dtype} "
                f"{list(x_ds.shape)}"
            )
        n, T = x_ds.shape[:2]
        if sets_ds.ndim != 4 or sets_ds.shape[1:] != (n, T + 1, T + 1) or sets_ds.dtype != bool:
            raise SetsFileError(
                f"{path}: dataset '/sets' must be bool [L+1, {n}, {T + 1}, {T + 1}], "
                f"got {sets_ds.dtype} {list(sets_ds.shape)}"
            )
        sets, x = sets_ds[()], x_ds[()]
        program = plain_text(f.attrs["program"])
    if not np.isfinite(x).all():
        raise SetsFileError(f"{path}: dataset '/inputs/x' holds NaN or inf (damaged file)")
    if meta["task"] is None:  # sets given for inputs from a file: no task to check
        _check_arch(meta["arch"], sets.shape[0] - 1, path)
        _check_prediction(meta["prediction"], path)
        return SetsFile(sets=sets, x=x, program=program, **meta)
    try:
        task = task_from_dict(meta["task"])
    except (ValueError, TypeError, KeyError) as err:
        raise SetsFileError(f"{path}: root attribute 'task' is not a valid task: {err}") from None
    if (task.T, task.d) != (T, x.shape[2]):
        raise SetsFileError(
            f"{path}: dataset '/inputs/x' is [N, {T}, {x.shape[2]}] but root attribute 'task' "
            f"has T={task.T}, d={task.d}"
        )
    _check_arch(meta["arch"], sets.shape[0] - 1, path)
    _check_prediction(meta["prediction"], path)
    return SetsFile(sets=sets, x=x, program=program, **meta)


def plain_text(value: Any) -> str:
    """An HDF5 string attribute as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_prediction(prediction: dict[str, Any], path: Path) -> None:
    """Refuse a root attribute ``prediction`` without its text ``verdict`` and ``exponent``
    or with an ``orientation`` that is not an object of texts (files before orientation
    was recorded have none)."""
    wrong = [k for k in ("verdict", "exponent") if not isinstance(prediction.get(k), str)]
    orientation = prediction.get("orientation")
    if orientation is not None and not (
        isinstance(orientation, dict) and all(isinstance(v, str) for v in orientation.values())
    ):
        wrong.append("orientation")
    if wrong:
        raise SetsFileError(
            f"{path}: root attribute 'prediction' has field(s) {wrong} of the wrong type or "
            "missing (expected text verdict and exponent, orientation an object of texts); "
            "re-run `infoprobe predict`"
        )


def _check_arch(arch: dict[str, Any], n_layers: int, path: Path) -> None:
    """Refuse a root attribute ``arch`` that is not an architecture of ``n_layers`` blocks."""
    try:
        Architecture(
            heads=tuple(arch["heads"]),
            d_model=arch["d_model"],
            d_heads=tuple(arch["d_heads"]),
            positions=arch["positions"],
        )
        as_architecture(arch["heads"], d_model=arch["d_model"], d_head=1, n_layers=n_layers)
        ints = [*arch["d_heads"], arch["d_model"], *arch["heads"]]
        if len(arch["d_heads"]) != n_layers or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in ints
        ):
            raise ValueError(f"heads and d_heads must list {n_layers} integers >= 1")
        if not isinstance(arch["positions"], bool):
            raise ValueError(f"field 'positions' must be true or false, got {arch['positions']!r}")
    except (KeyError, TypeError, ValueError) as err:
        raise SetsFileError(
            f"{path}: root attribute 'arch' is not an architecture of {n_layers} block(s) "
            f"(the layers of '/sets'): {err}"
        ) from None
