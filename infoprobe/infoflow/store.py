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

from infoprobe.atomic import atomic_output
from infoprobe.header import axes_of, check_header, label_axes, make_header, write_attrs

from .errors import SetsFileError
from .execute import DEFAULT_CHUNK, execute
from .predict import Prediction

FORMAT = "infoprobe.predicted-sets"
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
    task: dict[str, Any]
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
    n, T, _ = x.shape
    L = prediction.program.n_layers
    summary = {k: v for k, v in prediction.to_dict().items() if k != "program"}
    with atomic_output(path, overwrite=overwrite, what="predicted-sets file", kind=FORMAT) as tmp:
        with h5py.File(tmp, "w") as f:
            write_attrs(f.attrs, make_header(FORMAT, SCHEMA_VERSION, axes_of(AXES, X_AXES)))
            f.attrs["convention"] = CONVENTION
            f.attrs["task"] = json.dumps(prediction.task.to_dict(), sort_keys=True)
            f.attrs["arch"] = json.dumps(prediction.arch.to_dict(), sort_keys=True)
            f.attrs["provenance"] = json.dumps(provenance, sort_keys=True, default=str)
            f.attrs["prediction"] = json.dumps(summary, sort_keys=True)
            f.attrs["program"] = prediction.program_text()
            f.attrs["inputs_sha256"] = inputs_hash(x)
            label_axes(f.create_dataset("inputs/x", data=x), X_AXES)
            step = max(1, min(chunk, n))
            sets = f.create_dataset(
                "sets", shape=(L + 1, n, T + 1, T + 1), dtype=bool,
                chunks=(1, min(step, max(1, n)), T + 1, T + 1), compression="gzip",
            )  # fmt: skip
            label_axes(sets, AXES)
            for start in range(0, n, step):
                stop = min(n, start + step)
                sets[:, start:stop] = execute(prediction.program, x[start:stop], progress=progress)
    return Path(path)


def read_sets(path: str | os.PathLike) -> SetsFile:
    """Read a file written by :func:`write_sets`; SetsFileError names what is wrong."""
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
            if name not in f:
                raise SetsFileError(f"{path}: missing dataset '/{name}'")
        sets, x = f["sets"][()], f["inputs/x"][()]
        meta = {field: json.loads(f.attrs[field]) for field in JSON_ATTRS}
        program = str(f.attrs["program"])
    n, T = x.shape[:2]
    if sets.ndim != 4 or sets.shape[1:] != (n, T + 1, T + 1) or sets.dtype != bool:
        raise SetsFileError(
            f"{path}: dataset '/sets' must be bool [L+1, {n}, {T + 1}, {T + 1}], "
            f"got {sets.dtype} {list(sets.shape)}"
        )
    return SetsFile(sets=sets, x=x, program=program, **meta)
