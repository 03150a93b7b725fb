"""Read an activation cache: validated header, lazy h5py-backed access, block iteration.

``open_cache(path)`` checks the file before handing anything out: not an infoprobe
cache, a newer schema, a damaged (truncated) file and an unfinished one (``n_committed``
< N) each raise their own :class:`~infoprobe.hooks.errors.CacheError` saying exactly that.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.utilities import get_act_name

from infoprobe.hooks.errors import (
    CacheError,
    IncompleteCacheError,
    NewerSchemaError,
    NotACacheError,
    TruncatedCacheError,
    UnknownSiteError,
)
from infoprobe.hooks.schema import FORMAT, SCHEMA_VERSION, X_PATH, Y_PATH, acts_path

REQUIRED_ATTRS = (
    "schema_version",
    "infoprobe_version",
    "created_utc",
    "n",
    "batch_size",
    "n_committed",
    "dtype",
    "hook_names",
    "n_blocks",
    "checkpoint_sha256",
    "model_config_json",
    "data_spec_json",
    "provenance_json",
)
BLOCK_TARGET_BYTES = 64 << 20
"""Default bytes per block of :meth:`CacheFile.iter_blocks` (all requested datasets)."""
READ_CACHE_BYTES = 4 << 20
"""HDF5 raw-data chunk cache per dataset when reading (chunks are at most 1 MiB)."""


def _plain(value: Any) -> Any:
    """An HDF5 attribute value as plain Python (str, int, list of str)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _open_h5(path: Path, mode: str, **kwargs: Any) -> h5py.File:
    if not path.is_file():
        raise NotACacheError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    if path.stat().st_size == 0 or not h5py.is_hdf5(path):
        raise NotACacheError(f"{path} is not an HDF5 file, so not an infoprobe activation cache")
    try:
        return h5py.File(path, mode, **kwargs)
    except OSError as err:
        if "unable to lock" in str(err).lower():
            raise CacheError(f"{path} is open for writing by another process: {err}") from None
        raise TruncatedCacheError(
            f"{path} is a damaged HDF5 file (truncated or corrupt), it cannot be opened: {err}"
        ) from None


def validate_header(f: h5py.File, path: Path, allow_incomplete: bool) -> dict[str, Any]:
    """Check an open file against the schema and return its root attributes as Python values.

    Raises:
        NotACacheError: no ``format`` attribute naming an infoprobe activation cache.
        NewerSchemaError: ``schema_version`` is newer than this reader.
        TruncatedCacheError: attributes or datasets missing, or datasets shorter than N.
        IncompleteCacheError: ``n_committed`` < N and ``allow_incomplete`` is false.
    """
    fmt = _plain(f.attrs.get("format"))
    if fmt != FORMAT:
        raise NotACacheError(
            f"{path} is not an infoprobe activation cache: root attribute 'format' is "
            f"{fmt!r}, expected {FORMAT!r}"
        )
    version = _plain(f.attrs.get("schema_version"))
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{path}: attribute 'schema_version' is {version!r}, this infoprobe reads "
            f"schema <= {SCHEMA_VERSION}; upgrade infoprobe to read it"
        )
    missing = [key for key in REQUIRED_ATTRS if key not in f.attrs]
    if missing:
        raise TruncatedCacheError(f"{path}: root attribute(s) {missing} missing")
    header = {key: _plain(value) for key, value in f.attrs.items()}
    n = header["n"]
    for name in (X_PATH, Y_PATH, *(acts_path(h) for h in header["hook_names"])):
        length = f[name].shape[0] if isinstance(f.get(name), h5py.Dataset) else None
        if length != n:
            raise TruncatedCacheError(
                f"{path}: dataset /{name} has {length} samples, attribute 'n' says {n}"
            )
    if header["n_committed"] < n and not allow_incomplete:
        raise IncompleteCacheError(
            f"{path} is incomplete: n_committed={header['n_committed']} of n={n} samples "
            f"(the writer was interrupted); re-run the same command to resume it"
        )
    return header


def read_header(path: str | os.PathLike, *, allow_incomplete: bool = False) -> dict[str, Any]:
    """Validated root attributes of the cache at ``path`` (see :func:`validate_header`)."""
    path = Path(path)
    with _open_h5(path, "r") as f:
        return validate_header(f, path, allow_incomplete)


class CacheFile:
    """A read-only activation cache; datasets are read lazily from disk.

    Shapes: ``x`` [N, T, d_in], ``y`` [N, d_out], ``acts(name)`` [N, ...] with the
    dataset's ``axes`` attribute naming the axes (residual: sample, pos, d_model).
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike, *, allow_incomplete: bool = False):
        self.path = Path(path)
        self._file = _open_h5(self.path, "r", rdcc_nbytes=READ_CACHE_BYTES)
        try:
            self.header = validate_header(self._file, self.path, allow_incomplete)
        except BaseException:
            self._file.close()
            raise

    # --- metadata -------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Usable samples: ``n_committed`` (= N for a complete cache)."""
        return int(self.header["n_committed"])

    @property
    def n_total(self) -> int:
        """Planned samples N (the length of every dataset)."""
        return int(self.header["n"])

    @property
    def complete(self) -> bool:
        return self.n == self.n_total

    @property
    def dtype(self) -> str:
        """Storage dtype of the activations (``float32`` or ``float16``)."""
        return self.header["dtype"]

    @property
    def hook_names(self) -> list[str]:
        """Cached hook sites, TransformerLens names, in the order the hooks fire."""
        return list(self.header["hook_names"])

    @property
    def n_blocks(self) -> int:
        """Blocks L of the model that wrote the cache."""
        return int(self.header["n_blocks"])

    @property
    def checkpoint_sha256(self) -> str:
        return self.header["checkpoint_sha256"]

    @cached_property
    def provenance(self) -> dict[str, Any]:
        """The writer's provenance dict (checkpoint hash, model config, data spec, ...)."""
        return json.loads(self.header["provenance_json"])

    @cached_property
    def spec(self) -> dict[str, Any]:
        """The data spec (task, N, data seed, batch size) the samples were drawn from."""
        return json.loads(self.header["data_spec_json"])

    @cached_property
    def model_config(self) -> dict[str, Any]:
        return json.loads(self.header["model_config_json"])

    # --- datasets -------------------------------------------------------------------
    @property
    def x(self) -> h5py.Dataset:
        """Inputs [N, T, d_in] float32 (lazy)."""
        return self._file[X_PATH]

    @property
    def y(self) -> h5py.Dataset:
        """Targets [N, d_out] float32 (lazy)."""
        return self._file[Y_PATH]

    def acts(self, name: str) -> h5py.Dataset:
        """Activations of hook site ``name`` [N, ...] (lazy h5py dataset)."""
        if name not in self.header["hook_names"]:
            raise UnknownSiteError(
                f"{self.path} has no hook site {name!r}; it holds {self.hook_names}"
            )
        return self._file[acts_path(name)]

    def axes(self, name: str) -> tuple[str, ...]:
        """Axis names of a site's dataset, e.g. ``("sample", "pos", "d_model")``."""
        return tuple(_plain(self.acts(name).attrs["axes"]))

    def resolve(self, key: str | tuple) -> str:
        """Hook name for a full name or TransformerLens shorthand (``("resid_post", -1)``)."""
        if isinstance(key, str):
            return key if key in self.header["hook_names"] else get_act_name(key)
        name, layer, *rest = key
        if layer is not None and layer < 0:
            layer += self.n_blocks
        return get_act_name(name, layer, *rest)

    def __getitem__(self, key: str | tuple) -> h5py.Dataset:
        """``cache["resid_post", 0]``, ``cache["pattern", -1]``, or a full hook name."""
        return self.acts(self.resolve(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str | tuple) and self.resolve(key) in self.header["hook_names"]

    def datasets(self) -> list[tuple[str, h5py.Dataset]]:
        """(HDF5 path, dataset) of x, y and every site, in file order."""
        paths = [X_PATH, Y_PATH, *(acts_path(h) for h in self.hook_names)]
        return [(p, self._file[p]) for p in paths]

    # --- bulk reading ---------------------------------------------------------------
    def default_block_size(self, names: Sequence[str]) -> int:
        """Samples per block so one block of ``names`` (+ x, y) is about 64 MiB."""
        row = sum(self.acts(n).dtype.itemsize * int(np.prod(self.acts(n).shape[1:])) for n in names)
        row += 4 * (int(np.prod(self.x.shape[1:])) + int(np.prod(self.y.shape[1:])))
        return max(1, BLOCK_TARGET_BYTES // max(row, 1))

    def iter_blocks(
        self,
        names: Sequence[str] | None = None,
        block_size: int | None = None,
        *,
        start: int = 0,
        stop: int | None = None,
        include_inputs: bool = True,
        dtype: np.dtype | str | None = np.float32,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Yield consecutive sample blocks as ``{name: array [b, ...]}`` (out-of-core reads).

        Args:
            names: hook sites to read (default: all).
            block_size: samples per block (default: about 64 MiB per block).
            start, stop: sample range (default: all committed samples).
            include_inputs: add ``"x"`` [b, T, d_in] and ``"y"`` [b, d_out].
            dtype: convert activations to this dtype (default float32; None keeps the
                storage dtype).
        """
        names = self.hook_names if names is None else list(names)
        stop = self.n if stop is None else stop
        if not 0 <= start <= stop <= self.n:
            raise CacheError(f"{self.path}: sample range [{start}, {stop}) outside [0, {self.n})")
        sources = {name: self.acts(name) for name in names}
        if include_inputs:
            sources = {"x": self.x, "y": self.y, **sources}
        step = block_size or self.default_block_size(names)
        for a in range(start, stop, step):
            b = min(a + step, stop)
            block = {}
            for key, ds in sources.items():
                out = np.empty((b - a, *ds.shape[1:]), dtype=ds.dtype)
                ds.read_direct(out, source_sel=np.s_[a:b])
                block[key] = (
                    out if dtype is None or key in ("x", "y") else out.astype(dtype, copy=False)
                )
            yield block

    def to_activation_cache(
        self,
        model: HookedRootModule,
        samples: slice | range = slice(None),
        names: Sequence[str] | None = None,
    ) -> ActivationCache:
        """A ``transformer_lens.ActivationCache`` of ``samples`` (float32 tensors)."""
        names = self.hook_names if names is None else list(names)
        rows = (
            slice(*samples.indices(self.n))
            if isinstance(samples, slice)
            else slice(samples.start, samples.stop, samples.step)
        )
        cache = {
            name: torch.from_numpy(np.asarray(self.acts(name)[rows], dtype=np.float32))
            for name in names
        }
        return ActivationCache(cache, model)

    # --- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CacheFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "complete" if self.complete else f"incomplete {self.n}/{self.n_total}"
        return (
            f"CacheFile({str(self.path)!r}, n={self.n_total} ({state}), "
            f"dtype={self.dtype}, sites={len(self.hook_names)})"
        )


def open_cache(path: str | os.PathLike, *, allow_incomplete: bool = False) -> CacheFile:
    """Open the activation cache at ``path`` read-only (see :class:`CacheFile`).

    Raises:
        NotACacheError, NewerSchemaError, TruncatedCacheError, IncompleteCacheError.
    """
    return CacheFile(path, allow_incomplete=allow_incomplete)
