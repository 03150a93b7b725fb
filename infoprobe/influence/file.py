"""The influence file (``influence.h5``): its layout, and its reader with validation.

Layout (docs/influence.md is the contract): the header of docs/conventions.md (root
attributes ``format`` = ``"infoprobe.influence"``, ``schema_version``, ``created``,
``infoprobe_version``, ``axes``), ``settings`` and ``provenance`` (JSON), ``T``, ``n``,
``n_layers`` (L+1, the layer-axis length; ``n_layer_axis`` in code),
``n_committed``, ``complete``, ``input_scale``, ``hook_names`` (JSON list); datasets
``/scores`` float32 [L+1, n, T+1, T], ``/state_variance`` float64 [L+1, T+1],
``/sample_index`` int64 [n] and ``/aggregate`` float64 [L+1, T+1, T], each with an ``axes``
attribute and labelled dimensions. The aggregate flow score, the membership share, is
computed from ``/scores`` (:meth:`InfluenceFile.membership_share`). Schema 1 files (``axes``
a JSON string) are still read.
The reader refuses a file that is not complete unless ``allow_incomplete``; the writer is
:mod:`infoprobe.influence.store`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from infoprobe.base import formats
from infoprobe.base.header import (
    check_format,
    is_hdf5_file,
    json_field,
    plain_attr,
)
from infoprobe.hooks.hdf5 import open_hdf5
from infoprobe.influence.errors import (
    IncompleteInfluenceError,
    InfluenceFileError,
)
from infoprobe.influence.sets import DEFAULT_FLOW_FRACTION, flow_sets, membership_share
from infoprobe.influence.settings import InfluenceSettings

FORMAT = formats.INFLUENCE
SCHEMA_VERSION = 2
"""2: the common header (root ``axes`` a list of strings) and labelled dimensions on every
dataset; schema 1 differs only there and is still read (never resumed)."""
AXES = ("layer", "sample", "token", "position")
DATASET_AXES = {
    "scores": AXES,
    "state_variance": ("layer", "token"),
    "sample_index": ("sample",),
    "aggregate": ("layer", "token", "position"),
}
SCORES, VARIANCE, SAMPLE_INDEX, AGGREGATE = "scores", "state_variance", "sample_index", "aggregate"
LOCATION_FIELDS = ("cache_path", "checkpoint_path")
"""Provenance fields that say where inputs lay; a resume does not require them to match."""
VARIANCE_RTOL = 1e-5
"""A resumed run's recomputed state variance must match the file's to this tolerance."""

BlockCallback = Callable[[int], None]
"""``on_block(n_committed)``: called after each block is committed."""


def compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def open_influence(path: Path) -> h5py.File:
    return open_hdf5(
        path,
        "r",
        what="an influence file",
        not_ours=InfluenceFileError,
        damaged=InfluenceFileError,
    )


def file_format(path: str | os.PathLike) -> str | None:
    """The root attribute ``format`` of an HDF5 file (None if absent or not HDF5)."""
    path = Path(path)
    if not is_hdf5_file(path):
        return None
    try:
        with h5py.File(path, "r") as f:
            return plain_attr(f.attrs.get("format"))
    except OSError:
        return None


REQUIRED_ATTRS = (
    "schema_version", "created", "infoprobe_version", "axes", "settings", "provenance", "T",
    "n", "n_layers", "n_committed", "complete", "input_scale", "hook_names",
)  # fmt: skip


def read_header(f: h5py.File, path: Path, allow_incomplete: bool) -> dict[str, Any]:
    check_format(
        f,
        path,
        fmt=FORMAT,
        schema_version=SCHEMA_VERSION,
        what="an influence file",
        not_ours=InfluenceFileError,
        newer=InfluenceFileError,
    )
    missing = [k for k in REQUIRED_ATTRS if k not in f.attrs]
    if missing:
        raise InfluenceFileError(f"{path}: root attribute(s) {missing} missing (damaged file)")
    header = {k: plain_attr(v) for k, v in f.attrs.items()}
    if isinstance(header["axes"], str):  # schema 1 kept the axes as a JSON string
        header["axes"] = json.loads(header["axes"])
    for name in ("T", "n", "n_layers", "n_committed"):
        value = header[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InfluenceFileError(
                f"{path}: root attribute {name!r} is {value!r}, expected an integer >= 0"
            )
    if header["n_committed"] > header["n"]:
        raise InfluenceFileError(
            f"{path}: root attribute 'n_committed' is {header['n_committed']}, expected at most "
            f"n={header['n']}"
        )
    json_field(header["hook_names"], path, "hook_names", error=InfluenceFileError, expected=list)
    for name, shape in (
        (SAMPLE_INDEX, (header["n"],)),
        (VARIANCE, (header["n_layers"], header["T"] + 1)),
    ):
        found = f[name].shape if isinstance(f.get(name), h5py.Dataset) else None
        if found != shape:
            raise InfluenceFileError(f"{path}: dataset /{name} has shape {found}, expected {shape}")
    header["complete"] = bool(header["complete"])
    if not header["complete"] and not allow_incomplete:
        raise IncompleteInfluenceError(
            f"{path} is incomplete: n_committed={header['n_committed']} of n={header['n']} "
            "samples (the run was interrupted); re-run the same command to resume it, or "
            "read it with allow_incomplete=True"
        )
    shape = (header["n_layers"], header["n"], header["T"] + 1, header["T"])
    if SCORES not in f or f[SCORES].shape != shape:
        found = f[SCORES].shape if SCORES in f else None
        raise InfluenceFileError(f"{path}: dataset /{SCORES} has shape {found}, expected {shape}")
    return header


@dataclass(frozen=True)
class InfluenceFile:
    """A read influence file (arrays loaded; only committed samples).

    Attributes:
        path: the file.
        scores: g, float32 [L+1, n_committed, T+1, T] (layer, sample, token, position).
        state_variance: v, float64 [L+1, T+1] (layer, token).
        sample_index: int64 [n_committed], the activation-cache rows covered.
        aggregate: float64 [L+1, T+1, T], mean of g over samples (None if incomplete); not
            the aggregate score, which is :meth:`membership_share`.
        settings: the :class:`InfluenceSettings` the file was written with.
        provenance: dict (cache path and provenance, inputs hash, weights hash, ...).
        header: every root attribute as a plain Python value.
    """

    path: Path
    scores: np.ndarray = field(repr=False)
    state_variance: np.ndarray = field(repr=False)
    sample_index: np.ndarray = field(repr=False)
    aggregate: np.ndarray | None = field(repr=False)
    settings: InfluenceSettings
    provenance: dict[str, Any] = field(repr=False)
    header: dict[str, Any] = field(repr=False)

    @property
    def T(self) -> int:
        return int(self.header["T"])

    @property
    def n(self) -> int:
        """Planned samples (the length of the sample axis on disk)."""
        return int(self.header["n"])

    @property
    def n_committed(self) -> int:
        return int(self.header["n_committed"])

    @property
    def n_layer_axis(self) -> int:
        """L+1, the length of the layer axis (root attribute ``n_layers`` on disk)."""
        return int(self.header["n_layers"])

    @property
    def complete(self) -> bool:
        return bool(self.header["complete"])

    @property
    def input_scale(self) -> float:
        return float(self.header["input_scale"])

    @property
    def hook_names(self) -> list[str]:
        return json.loads(self.header["hook_names"])

    def sets(self, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
        """Per-sample flow sets, bool [L+1, n_committed, T+1, T+1]."""
        return flow_sets(self.scores, fraction)

    def membership_share(self, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
        """The aggregate flow score, float64 [L+1, T+1, T] in [0, 1]: the share of the
        committed samples in which s is in the flow set of (t, l) at g ≥ fraction / T.
        Computed from ``/scores`` (the file stores only the mean, ``/aggregate``)."""
        return membership_share(self.scores, fraction)


def read_influence(path: str | os.PathLike, *, allow_incomplete: bool = False) -> InfluenceFile:
    """Read and validate an influence file.

    Raises:
        InfluenceFileError: not an HDF5 file, another format, a newer schema, damaged.
        IncompleteInfluenceError: the writer was interrupted, unless ``allow_incomplete``.
    """
    path = Path(path)
    with open_influence(path) as f:
        header = read_header(f, path, allow_incomplete)
        done = int(header["n_committed"])
        aggregate = f[AGGREGATE][()] if header["complete"] else None
        return InfluenceFile(
            path=path,
            scores=f[SCORES][:, :done],
            state_variance=f[VARIANCE][()],
            sample_index=f[SAMPLE_INDEX][:done],
            aggregate=aggregate,
            settings=_settings(header, path),
            provenance=json_field(
                header["provenance"], path, "provenance", error=InfluenceFileError
            ),
            header=header,
        )


def _settings(header: Mapping[str, Any], path: Path) -> InfluenceSettings:
    """The root attribute ``settings`` as :class:`InfluenceSettings`, or InfluenceFileError."""
    raw = json_field(header["settings"], path, "settings", error=InfluenceFileError)
    try:
        return InfluenceSettings.from_dict(raw)
    except (ValueError, TypeError, KeyError) as err:
        raise InfluenceFileError(f"{path}: root attribute 'settings' is invalid: {err}") from None
