"""Write a resumable activation cache from a batch function, in bounded memory.

Batch b holds samples ``[b*B, min((b+1)*B, N))``; ``batch_fn(b, size)`` regenerates it
deterministically, so a resumed run needs nothing but the file. Every dataset is created
at full size with its chunks allocated up front (no metadata changes while filling), and
the root attribute ``n_committed`` advances only after a whole batch of every dataset is
flushed to the operating system (and, with ``durable=True``, fsync'ed to the disk). A
killed run therefore resumes at ``n_committed``: samples past the cursor are rewritten,
never duplicated, and the result is byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tqdm.auto import tqdm
from transformer_lens import HookedRootModule

from infoprobe.base.atomic import output_lock, temp_name
from infoprobe.hooks.capture import capture
from infoprobe.hooks.errors import (
    BatchFunctionError,
    CacheError,
    Float16OverflowError,
    InsufficientDiskError,
    NotACacheError,
    ProvenanceMismatchError,
    TruncatedCacheError,
)
from infoprobe.hooks.hdf5 import (
    axes_of,
    is_hdf5_file,
    json_differences,
    label_axes,
    plain_attr,
    utc_now,
)
from infoprobe.hooks.raw import raw_rows
from infoprobe.hooks.reader import read_header
from infoprobe.hooks.schema import (
    FORMAT,
    IDENTITY_ATTRS,
    SCHEMA_VERSION,
    STORAGE_DTYPES,
    X_AXES,
    X_PATH,
    Y_AXES,
    Y_PATH,
    DatasetPlan,
    acts_path,
    canonical_json,
    dataset_plan,
    package_version,
)
from infoprobe.hooks.sites import axis_names, count_blocks, resolve_sites

BatchFn = Callable[[int, int], tuple[np.ndarray, np.ndarray]]
"""``batch_fn(index, size) -> (x [size, T, d] float32, y [size, d_out] float32)``."""

DISK_MARGIN_BYTES = 16 << 20
"""Free space kept beyond the data bytes (HDF5 metadata, file-system slack)."""

RAW_WRITES = True
"""Write plain sample rows with ``os.pwrite`` (see :mod:`infoprobe.hooks.raw`); False
sends every dataset through h5py's ``write_direct`` (same file, slower to overlap)."""


@dataclass(frozen=True)
class CachePlan:
    """What a cache file will hold, known before anything is written.

    ``hook_names`` are in the order the hooks fire; ``datasets`` are x, y and one per site.
    """

    n: int
    batch_size: int
    dtype: str
    hook_names: tuple[str, ...]
    n_blocks: int
    datasets: tuple[DatasetPlan, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of all datasets (the file is this plus a little metadata)."""
        return sum(d.nbytes for d in self.datasets)

    def bytes_after(self, n_done: int) -> int:
        """Bytes still to write once the first ``n_done`` samples are committed."""
        return sum(d.row_bytes for d in self.datasets) * (self.n - n_done)


@dataclass(frozen=True)
class CacheSummary:
    """Result of :func:`write_cache`: the file, its datasets and this run's work."""

    path: Path
    plan: CachePlan
    resumed_from: int
    seconds: float

    @property
    def n_written(self) -> int:
        return self.plan.n - self.resumed_from


def batch_sizes(n: int, batch_size: int) -> list[int]:
    """Sizes of batches 0, 1, ...: all ``batch_size`` except a shorter last one."""
    full, rest = divmod(n, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


def _checked_batch(
    batch_fn: BatchFn, index: int, size: int, shapes: tuple[tuple[int, ...], ...] | None
) -> tuple[np.ndarray, np.ndarray]:
    out = batch_fn(index, size)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise BatchFunctionError(f"batch_fn({index}, {size}) must return (x, y), got {type(out)}")
    x, y = (np.ascontiguousarray(a, dtype=np.float32) for a in out)
    for label, arr, want in zip(("x", "y"), (x, y), shapes or (None, None), strict=True):
        if arr.ndim < 2 or arr.shape[0] != size or (want is not None and arr.shape[1:] != want):
            expected = f"[{size}, {', '.join(map(str, want))}]" if want else f"[{size}, ...]"
            raise BatchFunctionError(
                f"batch_fn({index}, {size}) returned {label} of shape {list(arr.shape)}, "
                f"expected {expected}"
            )
    return x, y


def plan_cache(
    model: HookedRootModule,
    batch_fn: BatchFn,
    *,
    n: int,
    batch_size: int,
    sites: str | Sequence[str],
    dtype: str = "float32",
) -> CachePlan:
    """Resolve ``sites`` and find every dataset's shape with a forward on two samples.

    Raises:
        UnknownSiteError, SiteCaptureError, BatchFunctionError, CacheError (bad n,
        batch size or dtype).
    """
    if n < 1 or batch_size < 1:
        raise CacheError(f"n and batch_size must be >= 1, got n={n}, batch_size={batch_size}")
    if dtype not in STORAGE_DTYPES:
        raise CacheError(f"dtype must be one of {STORAGE_DTYPES}, got {dtype!r}")
    names = resolve_sites(model.hook_dict, sites)
    x, y = _checked_batch(batch_fn, 0, min(2, n), None)
    acts = capture(model, x, names, early_stop=False)
    datasets = [
        dataset_plan(X_PATH, x.shape[1:], "float32", n, batch_size, X_AXES[: x.ndim]),
        dataset_plan(Y_PATH, y.shape[1:], "float32", n, batch_size, Y_AXES[: y.ndim]),
    ]
    for name, tensor in acts.items():
        datasets.append(
            dataset_plan(
                acts_path(name),
                tuple(tensor.shape[1:]),
                dtype,
                n,
                batch_size,
                axis_names(name, tensor.ndim),
            )
        )
    return CachePlan(
        n, batch_size, dtype, tuple(acts), count_blocks(model.hook_dict), tuple(datasets)
    )


def _header_attrs(plan: CachePlan, provenance: Mapping[str, Any]) -> dict[str, Any]:
    checkpoint = provenance.get("checkpoint_sha256") or ""
    return {  # the header first (docs/conventions.md), then the cache's own attributes
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "created": utc_now(),
        "infoprobe_version": package_version(),
        "axes": axes_of(*(d.axes for d in plan.datasets)),
        "n": plan.n,
        "batch_size": plan.batch_size,
        "n_committed": 0,
        "dtype": plan.dtype,
        "hook_names": list(plan.hook_names),
        "n_blocks": plan.n_blocks,
        "checkpoint_sha256": str(checkpoint),
        "model_config_json": canonical_json(provenance.get("model_config", {})),
        "data_spec_json": canonical_json(provenance.get("data_spec", {})),
        "provenance_json": canonical_json(dict(provenance)),
    }


def _create(path: Path, plan: CachePlan, attrs: Mapping[str, Any]) -> None:
    """Create the whole file (datasets allocated, cursor 0) under a temp name, then rename."""
    tmp = temp_name(path)
    try:
        with h5py.File(tmp, "w") as f:
            for key, value in attrs.items():
                f.attrs[key] = value
            for d in plan.datasets:
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
                ds = f.create_dataset(
                    d.path,
                    shape=d.shape,
                    maxshape=(None, *d.shape[1:]),
                    dtype=d.dtype,
                    chunks=d.chunks,
                    dcpl=dcpl,
                    fill_time="never",
                    track_times=False,
                )
                label_axes(ds, d.axes)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_identity(
    path: Path, header: Mapping[str, Any], attrs: Mapping[str, Any], plan: CachePlan
) -> None:
    """Raise :class:`ProvenanceMismatchError` unless the file was made by the same run."""
    lines: list[str] = []
    for key in IDENTITY_ATTRS:
        old, new = header[key], attrs[key]
        if key == "provenance_json":
            lines += json_differences(json.loads(old), json.loads(new), "provenance")
        elif key == "hook_names":
            lines += _hook_differences(list(old), list(new))
        elif old != new:
            lines.append(f"{key}: file has {old!r}, this run has {new!r}")
    with h5py.File(path, "r") as f:
        for d in plan.datasets:
            shape = f[d.path].shape if d.path in f else None
            if shape is not None and shape != d.shape:  # a missing one: named by hook_names
                lines.append(f"dataset {d.path}: file has shape {shape}, this run needs {d.shape}")
    if lines:
        more = f"\n  (and {len(lines) - 6} more differences)" if len(lines) > 6 else ""
        raise ProvenanceMismatchError(
            f"{path} was written by a different run, refusing to append (file untouched):\n  "
            + "\n  ".join(line if len(line) <= 300 else line[:297] + "..." for line in lines[:6])
            + more
            + "\npass overwrite=True (--overwrite) to replace it, or choose another output"
        )


def _names(names: Sequence[str], shown: int = 3) -> str:
    rest = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + rest


def _hook_differences(old: list[str], new: list[str]) -> list[str]:
    """The hook names one side has and the other lacks (a few named, the rest counted)."""
    if old == new:
        return []
    extra = [name for name in new if name not in old]
    missing = [name for name in old if name not in new]
    if not extra and not missing:
        return ["hook_names: the same hooks in another order"]
    parts = [f"this run adds {_names(extra)}" if extra else "",
             f"the file also has {_names(missing)}" if missing else ""]  # fmt: skip
    return [f"hook_names ({len(old)} in the file, {len(new)} in this run): "
            + "; ".join(p for p in parts if p)]  # fmt: skip


def _check_disk(path: Path, needed: int) -> None:
    free = shutil.disk_usage(path.parent).free
    if free < needed + DISK_MARGIN_BYTES:
        raise InsufficientDiskError(
            f"{path}: the cache needs {needed / 1e6:.1f} MB more plus a margin of "
            f"{DISK_MARGIN_BYTES / 2**20:.0f} MiB (HDF5 metadata, file-system slack), "
            f"{(needed + DISK_MARGIN_BYTES) / 1e6:.1f} MB in all, but the file system has "
            f"{free / 1e6:.1f} MB free; free space, use --dtype float16, fewer sites or a "
            "smaller --n"
        )


def _prepare(path: Path, plan: CachePlan, attrs: Mapping[str, Any], overwrite: bool) -> int:
    """Create or validate the file; return the sample index to start writing at."""
    if (path.exists() or path.is_symlink()) and overwrite and not _is_cache(path):
        raise NotACacheError(
            f"{path} is not an infoprobe activation cache (no 'format' attribute "
            f"{FORMAT!r}); --overwrite only replaces a cache: move it away or choose "
            "another output"
        )
    if path.exists() and not overwrite:
        header = read_header(path, allow_incomplete=True)
        _check_identity(path, header, attrs, plan)
        start = int(header["n_committed"])
        if start % plan.batch_size and start != plan.n:
            raise TruncatedCacheError(
                f"{path}: n_committed={start} is not a multiple of batch_size="
                f"{plan.batch_size}; the file is damaged, pass overwrite=True to rewrite it"
            )
        _check_disk(path, plan.bytes_after(start))
        return start
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_disk(path, plan.nbytes)
    _create(path, plan, attrs)
    return 0


def _is_cache(path: Path) -> bool:
    """Whether ``path`` is an HDF5 file whose root ``format`` names an activation cache."""
    if not is_hdf5_file(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            return plain_attr(f.attrs.get("format")) == FORMAT
    except OSError:
        return False


def _to_storage(name: str, tensor: torch.Tensor, dtype: str) -> np.ndarray:
    """An activation as a C-contiguous numpy array of the storage dtype."""
    if dtype == "float16":
        half = tensor.to(torch.float16)
        overflow = torch.isinf(half) & torch.isfinite(tensor)
        if bool(overflow.any()):
            peak = float(tensor[overflow].abs().max())
            raise Float16OverflowError(
                f"hook site {name!r}: activation magnitude {peak:.4g} exceeds the float16 "
                f"range (65504); write the cache with dtype float32"
            )
        tensor = half
    return np.ascontiguousarray(tensor.cpu().numpy())


class _Committer:
    """Writes whole batches into the open file and advances ``n_committed`` after each.

    A dataset whose storage is plain C-order samples (:func:`raw_rows`) is written with
    ``os.pwrite`` on HDF5's own file descriptor, which releases the GIL while the kernel
    copies (h5py's ``write_direct`` holds it, stalling the forward pass in the other
    thread); any other dataset, or an array HDF5 would have to convert, goes through
    ``write_direct``. The file must be open with the chunk cache off (``rdcc_nbytes=0``)
    so that HDF5 never holds chunk data of its own to write back over the raw bytes.
    """

    def __init__(self, f: h5py.File, plan: CachePlan, durable: bool = False, raw: bool = True):
        self.file = f
        self.datasets = {d.path: f[d.path] for d in plan.datasets}
        self.raw = {p: r for p, ds in self.datasets.items() if raw and (r := raw_rows(ds))}
        self.fd = f.id.get_vfd_handle() if durable or self.raw else None
        self.durable = durable

    def write(self, start: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Write samples ``[start, start + k)`` of every dataset (arrays [k, ...] by
        dataset path), then move the cursor to ``start + k``."""
        stop = start + len(next(iter(arrays.values())))
        for path, array in arrays.items():
            raw = self.raw.get(path)
            if raw is not None and raw.accepts(array):
                raw.write(self.fd, start, array)
            else:
                self.datasets[path].write_direct(array, dest_sel=np.s_[start:stop])
        self.file.flush()  # the operating system holds the data before the cursor moves
        if self.durable:
            os.fsync(self.fd)  # durable: the data is on the disk before the cursor moves
        self.file.attrs.modify("n_committed", stop)
        self.file.flush()


class _BackgroundCommits:
    """Runs :meth:`_Committer.write` in one background thread, in submission order.

    The disk I/O of batch b overlaps the forward pass of batch b+1; at most ``depth``
    batches wait in the queue, so memory stays bounded. An error in the thread is
    re-raised by the next :meth:`submit` or by :meth:`close`.

    The thread polls the queue (:data:`POLL_SECONDS`) instead of waiting for a wake-up, and
    :meth:`close` sets an event instead of queueing a sentinel: a signal that interrupts the
    main thread inside ``Queue.put`` (between storing an item and waking the thread, or
    while the queue is full) can then neither leave the thread asleep beside a queued
    batch nor leave :meth:`close` blocked, so Ctrl-C and SIGTERM always get through.
    """

    POLL_SECONDS = 0.05

    def __init__(self, committer: _Committer, on_commit: Callable[[int], None], depth: int = 1):
        self.committer, self.on_commit = committer, on_commit
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.closing = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._work, name="cache-writer", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while True:
            try:
                item = self.queue.get(timeout=self.POLL_SECONDS)
            except queue.Empty:
                if self.closing.is_set():
                    return  # every batch submitted before close() is committed
                continue
            if self.error is not None:
                continue
            try:
                self.committer.write(*item)
                self.on_commit(len(next(iter(item[1].values()))))
            except BaseException as err:  # re-raised in the caller's thread
                self.error = err

    def _reraise(self) -> None:
        if self.error is not None:
            raise self.error

    def submit(self, start: int, arrays: Mapping[str, np.ndarray]) -> None:
        self._reraise()
        self.queue.put((start, arrays))

    def close(self, reraise: bool = True) -> None:
        """Wait until every submitted batch is committed (or failed)."""
        self.closing.set()
        self.thread.join()
        if reraise:
            self._reraise()


def write_cache(
    path: str | os.PathLike,
    model: HookedRootModule,
    batch_fn: BatchFn,
    *,
    n: int,
    batch_size: int,
    sites: str | Sequence[str],
    provenance: Mapping[str, Any],
    dtype: str = "float32",
    overwrite: bool = False,
    progress: bool = True,
    plan: CachePlan | None = None,
    durable: bool = False,
) -> CacheSummary:
    """Capture ``sites`` of ``model`` on N samples into the HDF5 cache at ``path``.

    Args:
        path: output file; an existing cache from the same run is resumed at its
            ``n_committed`` cursor (a complete one is left as is).
        model: any ``HookedRootModule``; its forward takes the batch's x.
        batch_fn: ``batch_fn(b, size) -> (x [size, ...], y [size, ...])``, float32 arrays
            of batch b (samples ``b*batch_size ...``); must be deterministic in (b, size).
        n: number of samples N.
        batch_size: samples per forward pass and per commit.
        sites: hook sites (presets, ``re:`` regexes or names; see ``resolve_sites``).
        provenance: JSON-serialisable dict describing everything that determines the
            data: ``checkpoint_sha256`` (str or None), ``model_config`` (dict),
            ``data_spec`` (dict), plus any extra keys. A resume must match it exactly.
        dtype: storage dtype of the activations, ``"float32"`` or ``"float16"``
            (inputs and targets are always float32).
        overwrite: replace an existing file instead of resuming it.
        progress: show a tqdm bar (samples/s).
        plan: a plan from :func:`plan_cache` with the same arguments (saves one forward).
        durable: fsync every batch before advancing the cursor, so the committed samples
            also survive a power loss or OS crash (a killed process never needs it).

    Raises:
        ProvenanceMismatchError: ``path`` holds a cache of a different run (untouched).
        InsufficientDiskError: not enough free space for the remaining bytes.
        Float16OverflowError: an activation does not fit float16.
        NotACacheError, TruncatedCacheError: ``path`` exists but is not a usable cache.
    """
    path = Path(path)
    plan = plan or plan_cache(model, batch_fn, n=n, batch_size=batch_size, sites=sites, dtype=dtype)
    if (plan.n, plan.batch_size, plan.dtype) != (n, batch_size, dtype):
        raise CacheError(
            f"plan is for n={plan.n}, batch_size={plan.batch_size}, dtype={plan.dtype}; "
            f"this call has n={n}, batch_size={batch_size}, dtype={dtype}"
        )
    attrs = _header_attrs(plan, provenance)
    begin = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(path):  # one writer at a time: a second is refused at once
        start = _prepare(path, plan, attrs, overwrite)
        shapes = (plan.datasets[0].shape[1:], plan.datasets[1].shape[1:])
        sizes = batch_sizes(n, batch_size)
        with (
            h5py.File(path, "r+", rdcc_nbytes=0) as f,  # whole-chunk writes bypass the cache
            tqdm(
                total=n,
                initial=start,
                unit="sample",
                unit_scale=True,
                disable=not progress,
                desc=path.name,
            ) as bar,
        ):
            commits = _BackgroundCommits(_Committer(f, plan, durable, RAW_WRITES), bar.update)
            try:
                for index in range(-(-start // batch_size), len(sizes)):  # ceil: skip committed
                    x, y = _checked_batch(batch_fn, index, sizes[index], shapes)
                    acts = capture(model, x, plan.hook_names)
                    arrays = {X_PATH: x, Y_PATH: y}
                    arrays.update({acts_path(k): _to_storage(k, v, dtype) for k, v in acts.items()})
                    commits.submit(index * batch_size, arrays)
            except BaseException:
                commits.close(reraise=False)
                raise
            commits.close()
        return CacheSummary(path, plan, start, time.perf_counter() - begin)
