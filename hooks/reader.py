"""Read an activation cache: validated header, lazy h5py-backed access, block iteration.

``open_cache(path)`` checks the file before handing anything out: not an infoprobe
cache, a newer schema, a damaged (truncated) file and an unfinished one (``n_committed``
< N) each raise their own :class:`~infoprobe.hooks.errors.CacheError` saying exactly that.
Schema 1 caches are read too: their ``created_utc`` is served as ``created``.
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
from infoprobe.hooks.hdf5 import check_format, open_hdf5, plain_attr
from infoprobe.hooks.schema import (
    FORMAT,
    JSON_ATTRS,
    OLDEST_READABLE,
    SCHEMA_VERSION,
    STORAGE_DTYPES,
    X_PATH,
    Y_PATH,
    acts_path,
)

REQUIRED_ATTRS = (
    "schema_version",
    "infoprobe_version",
    "created",
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


def _block_range(n_blocks: int) -> str:
    return f"blocks 0..{n_blocks - 1} (-{n_blocks}..-1 counting from the end)"


def check_block_index(key: Any, n_blocks: int, where: str) -> None:
    """Refuse a TransformerLens shorthand ``(name, block, ...)`` whose block index is out
    of range, naming the blocks that exist (TransformerLens would build a name like
    ``blocks.-3.hook_resid_post`` and fail with a bare KeyError)."""
    if not isinstance(key, tuple) or len(key) < 2:
        return
    block = key[1]
    if isinstance(block, int | np.integer) and not -n_blocks <= block < n_blocks:
        raise UnknownSiteError(
            f"{where}: block {int(block)} of {key[0]!r} is out of range; it has "
            f"{_block_range(n_blocks)}"
        )


class CheckedActivationCache(ActivationCache):
    """A ``transformer_lens.ActivationCache`` whose shorthand keys check their block index
    (``cache["resid_post", -5]`` on a 2-block model names the blocks that exist)."""

    def __getitem__(self, key: Any) -> torch.Tensor:
        check_block_index(key, self.model.cfg.n_layers, "ActivationCache")
        return super().__getitem__(key)


def alias_resid_pre(cache: dict[str, torch.Tensor], n_blocks: int) -> dict[str, torch.Tensor]:
    """Add ``blocks.k.hook_resid_pre`` (k >= 1) where only ``blocks.{k-1}.hook_resid_post``
    is present: the same tensor object under both names (they are the same activation),
    so ``cache["resid_pre", k]`` and ``accumulated_resid()`` work without a copy."""
    for k in range(1, n_blocks):
        pre, post = f"blocks.{k}.hook_resid_pre", f"blocks.{k - 1}.hook_resid_post"
        if pre not in cache and post in cache:
            cache[pre] = cache[post]
    return cache


def _open_h5(path: Path, mode: str, **kwargs: Any) -> h5py.File:
    return open_hdf5(
        path,
        mode,
        what="an infoprobe activation cache",
        not_ours=NotACacheError,
        damaged=TruncatedCacheError,
        busy=CacheError,
        **kwargs,
    )


def validate_header(f: h5py.File, path: Path, allow_incomplete: bool) -> dict[str, Any]:
    """Check an open file against the schema and return its root attributes as Python values.

    Raises:
        NotACacheError: no ``format`` attribute naming an infoprobe activation cache.
        NewerSchemaError: ``schema_version`` is newer than this reader.
        TruncatedCacheError: attributes or datasets missing, or datasets shorter than N.
        IncompleteCacheError: ``n_committed`` < N and ``allow_incomplete`` is false.
    """
    version = check_format(
        f,
        path,
        fmt=FORMAT,
        schema_version=SCHEMA_VERSION,
        oldest=OLDEST_READABLE,
        what="an infoprobe activation cache",
        not_ours=NotACacheError,
        newer=NewerSchemaError,
    )
    header = {key: plain_attr(value) for key, value in f.attrs.items()}
    if version == 1 and "created_utc" in header:  # schema 1 named it created_utc
        header["created"] = header.pop("created_utc")
    missing = [key for key in REQUIRED_ATTRS if key not in header]
    if missing:
        raise TruncatedCacheError(f"{path}: root attribute(s) {missing} missing")
    check_attributes(header, path)
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_attributes(header: dict[str, Any], path: Path) -> None:
    """Refuse root attributes of the wrong type or range (a damaged or edited file).

    Raises :class:`TruncatedCacheError` naming the file, the attribute, what was
    expected and what was found.
    """

    def bad(key: str, expected: str) -> TruncatedCacheError:
        value = header[key]
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        return TruncatedCacheError(
            f"{path}: root attribute {key!r} is {shown}, expected {expected} "
            "(the file is damaged or was edited)"
        )

    for key, low in (("n", 1), ("batch_size", 1), ("n_blocks", 0)):
        if not _is_int(header[key]) or header[key] < low:
            raise bad(key, f"an integer >= {low}")
    n = header["n"]
    if not _is_int(header["n_committed"]) or not 0 <= header["n_committed"] <= n:
        raise bad("n_committed", f"an integer in 0..{n} (the attribute 'n')")
    if header["dtype"] not in STORAGE_DTYPES:
        raise bad("dtype", f"one of {STORAGE_DTYPES}")
    names = header["hook_names"]
    if not isinstance(names, list) or not all(isinstance(h, str) for h in names):
        raise bad("hook_names", "a list of hook names")
    if not isinstance(header["checkpoint_sha256"], str):
        raise bad("checkpoint_sha256", "a string")
    for key in JSON_ATTRS:
        try:
            value = json.loads(header[key])
        except (TypeError, ValueError) as err:
            raise bad(key, f"valid JSON ({err})") from None
        if not isinstance(value, dict):
            raise bad(key, "a JSON object")
    heads = json.loads(header["model_config_json"]).get("heads")
    if isinstance(heads, list) and heads and len(heads) != header["n_blocks"]:
        raise bad("n_blocks", f"{len(heads)}, the layers of attribute 'model_config_json'")
    for name in names:
        parts = name.split(".")
        if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit():
            if int(parts[1]) >= header["n_blocks"]:
                raise bad("n_blocks", f"more than the block of hook name {name!r}")


def read_header(path: str | os.PathLike, *, allow_incomplete: bool = False) -> dict[str, Any]:
    """Validated root attributes of the cache at ``path`` (see :func:`validate_header`)."""
    path = Path(path)
    with _open_h5(path, "r") as f:
        return validate_header(f, path, allow_incomplete)


class CacheFile:
    """A read-only activation cache; datasets are read lazily from disk.

    Shapes: ``x`` [N, T, d_in], ``y`` [N, d_out], ``acts(name)`` [N, ...] with the
    dataset's ``axes`` attribute naming the axes (residual: sample, token, d_model).
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
        """Axis names of a site's dataset, e.g. ``("sample", "token", "d_model")``."""
        return tuple(plain_attr(self.acts(name).attrs["axes"]))

    def resolve(self, key: str | tuple) -> str:
        """Hook name for a full name or TransformerLens shorthand (``("resid_post", -1)``)."""
        if isinstance(key, str):
            return key if key in self.header["hook_names"] else get_act_name(key)
        check_block_index(key, self.n_blocks, str(self.path))
        name, layer, *rest = key
        if layer is not None and layer < 0:
            layer += self.n_blocks
        return get_act_name(name, layer, *rest)

    def __getitem__(self, key: str | tuple) -> h5py.Dataset:
        """``cache["resid_post", 0]``, ``cache["pattern", -1]``, or a full hook name."""
        return self.acts(self.resolve(key))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str | tuple):
            return False
        try:
            return self.resolve(key) in self.header["hook_names"]
        except UnknownSiteError:
            return False

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
        names = (
            self.hook_names if names is None else [names] if isinstance(names, str) else list(names)
        )
        if block_size is not None and (
            isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
        ):
            raise CacheError(f"block_size: expected None or an integer >= 1, got {block_size!r}")
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
        """A ``transformer_lens.ActivationCache`` of ``samples`` (float32 tensors).

        ``blocks.k.hook_resid_pre`` (k >= 1), which the cache does not store because it is
        ``blocks.{k-1}.hook_resid_post``, is served from that dataset (one tensor under
        both names), so ``cache["resid_pre", 1]`` and ``accumulated_resid()`` work.
        Block indices out of range raise :class:`UnknownSiteError` naming the blocks.
        """
        if not isinstance(model, HookedRootModule):
            raise TypeError(
                f"to_activation_cache: model: expected the HookedRootModule the cache was "
                f"made from, got {type(model).__name__}"
            )
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
        return CheckedActivationCache(alias_resid_pre(cache, self.n_blocks), model)

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
