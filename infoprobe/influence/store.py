"""Writing the influence file (layout: :mod:`infoprobe.influence.file`), resumably.

Writing follows the activation cache: the file is created at full size under
``NAME.tmp-<pid>``, its bytes reserved on disk (so a full disk is refused before the first
block, never met inside HDF5), and renamed onto NAME with ``n_committed = 0``; each block
of samples is written and flushed before ``n_committed`` advances; after the last block
the aggregate is computed from the stored scores and only then is ``complete`` set. A
killed run re-run with the same arguments resumes at ``n_committed`` and produces the
same bytes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from transformer_lens import HookedRootModule

from infoprobe.base.atomic import OutputExistsError, atomic_output, locked_output
from infoprobe.base.header import (
    axes_of,
    label_axes,
    make_header,
    write_attrs,
)
from infoprobe.hooks.hdf5 import json_differences
from infoprobe.hooks.schema import chunk_rows
from infoprobe.influence.errors import (
    InfluenceDiskError,
    InfluenceError,
    InfluenceFileError,
    InfluenceMismatchError,
)
from infoprobe.influence.file import (
    AGGREGATE,
    DATASET_AXES,
    FORMAT,
    LOCATION_FIELDS,
    SAMPLE_INDEX,
    SCHEMA_VERSION,
    SCORES,
    VARIANCE,
    VARIANCE_RTOL,
    BlockCallback,
    InfluenceFile,
    compact_json,
    file_format,
    open_influence,
    read_header,
    read_influence,
)
from infoprobe.influence.sensitivity import (
    FlowPlan,
    block_scores,
    check_inputs,
    iterate_blocks,
    layer_names,
    plan_influence,
)
from infoprobe.influence.settings import InfluenceSettings
from infoprobe.infoflow.store import inputs_hash


def _attrs(plan: FlowPlan, provenance: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **make_header(FORMAT, SCHEMA_VERSION, axes_of(*DATASET_AXES.values())),
        "settings": compact_json(plan.settings.to_dict()),
        "provenance": compact_json(dict(provenance)),
        "T": plan.T,
        "n": plan.n,
        "n_layers": plan.n_layer_axis,  # on-disk name; the value is L+1
        "n_committed": 0,
        "complete": False,
        "input_scale": plan.input_scale,
        "hook_names": json.dumps(list(plan.hook_names)),
    }


def _allocated_early() -> h5py.h5p.PropDCID:
    """Dataset creation properties: its space is allocated when it is created."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return dcpl


def _create(path: Path, plan: FlowPlan, attrs: Mapping[str, Any], sample_index: np.ndarray) -> None:
    """Create the whole file (datasets allocated, cursor 0) under a temp name, then rename."""
    row = plan.n_layer_axis * (plan.T + 1) * plan.T * 4
    rows = chunk_rows(row, plan.block_size, plan.n)
    with atomic_output(path, overwrite=True, what="influence file", kind=FORMAT) as tmp:
        with h5py.File(tmp, "w") as f:
            write_attrs(f.attrs, attrs)
            scores = f.create_dataset(
                SCORES,
                shape=plan.score_shape,
                dtype="float32",
                chunks=(plan.n_layer_axis, rows, plan.T + 1, plan.T),
                dcpl=_allocated_early(),
                fill_time="never",
                track_times=False,
            )
            label_axes(scores, DATASET_AXES[SCORES])
            var = f.create_dataset(VARIANCE, data=plan.state_variance, track_times=False)
            label_axes(var, DATASET_AXES[VARIANCE])
            index = f.create_dataset(SAMPLE_INDEX, data=sample_index, track_times=False)
            label_axes(index, DATASET_AXES[SAMPLE_INDEX])
            agg = f.create_dataset(
                AGGREGATE,
                shape=(plan.n_layer_axis, plan.T + 1, plan.T),
                dtype="float64",
                fillvalue=np.nan,
                dcpl=_allocated_early(),
                track_times=False,
            )
            label_axes(agg, DATASET_AXES[AGGREGATE])
        reserve_disk(tmp, path)


def file_bytes(plan: FlowPlan) -> int:
    """Bytes of the datasets of an influence file of ``plan`` (its metadata is not counted)."""
    cells = plan.n_layer_axis * (plan.T + 1) * plan.T
    return plan.n * cells * 4 + cells * 8 + plan.n_layer_axis * (plan.T + 1) * 8 + plan.n * 8


def check_disk(path: Path, plan: FlowPlan) -> None:
    """Refuse to start a file of ``plan`` that the file system holding ``path`` cannot hold."""
    needed, free = file_bytes(plan), shutil.disk_usage(path.parent).free
    if free < needed:
        raise InfluenceDiskError(
            f"{path}: the influence file needs {needed / 1e6:.1f} MB but the file system has "
            f"{free / 1e6:.1f} MB free; free space, write it elsewhere or use a smaller --n"
        )


def reserve_disk(file: Path, path: Path) -> None:
    """Allocate every byte of ``file`` (the influence file ``path`` or its temporary name) on
    disk now.

    The datasets are allocated at creation but left as holes; a block written into a hole
    on a full disk fails inside HDF5, which cannot recover from it (its file objects stay
    broken and the interpreter crashes at exit). After this, the blocks and the aggregate
    are written into space the file already owns. A file system without fallocate support
    is left as it is.
    """
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is None:
        return
    size = file.stat().st_size
    fd = os.open(file, os.O_RDWR)
    try:
        allocate(fd, 0, size)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return
        free = shutil.disk_usage(file.parent).free
        raise InfluenceDiskError(
            f"{path}: cannot reserve the {size / 1e6:.1f} MB of the influence file "
            f"({err.strerror}; the file system has {free / 1e6:.1f} MB free); free space and "
            "re-run the same command, which resumes an unfinished file"
        ) from err
    finally:
        os.close(fd)


def _identity(header: Mapping[str, Any], attrs: Mapping[str, Any]) -> list[str]:
    """Lines naming every field in which an unfinished file differs from this run."""
    lines = json_differences(
        json.loads(header["settings"]), json.loads(attrs["settings"]), "settings"
    )
    old, new = (
        {k: v for k, v in json.loads(h["provenance"]).items() if k not in LOCATION_FIELDS}
        for h in (header, attrs)
    )
    lines += json_differences(old, new, "provenance")
    for key in ("schema_version", "T", "n", "n_layers", "hook_names", "input_scale"):
        if header[key] != attrs[key]:
            lines.append(f"{key}: file has {header[key]!r}, this run has {attrs[key]!r}")
    return lines


def _mismatch(path: Path, lines: list[str]) -> InfluenceMismatchError:
    return InfluenceMismatchError(
        f"{path} was written by a different run, refusing to resume it (file untouched):\n  "
        + "\n  ".join(lines)
        + "\npass overwrite=True (--overwrite) to replace it, or choose another output"
    )


def preflight(path: Path, overwrite: bool) -> dict[str, Any] | None:
    """Check an existing ``path`` before any work; return its header if it is to be resumed.

    Refuses (nothing touched): anything that is not an influence file, with or without
    ``overwrite``; a complete influence file without ``overwrite``.
    """
    if not path.exists() and not path.is_symlink():
        return None
    fmt = file_format(path)
    if fmt != FORMAT:
        what = "a folder" if path.is_dir() else f"a file with format {fmt!r}"
        raise InfluenceFileError(
            f"{path} exists and is {what}, not an influence file (root attribute 'format' = "
            f"{FORMAT!r}); refusing to replace it: choose another output"
        )
    if overwrite:
        return None
    with open_influence(path) as f:
        header = read_header(f, path, allow_incomplete=True)
    if header["complete"]:
        raise OutputExistsError(
            f"influence file {path} already exists (complete); pass --overwrite "
            "(overwrite=True) to replace it"
        )
    return header


def _committed_start(path: Path, header: Mapping[str, Any], plan: FlowPlan) -> int:
    start = int(header["n_committed"])
    if start % plan.block_size and start != plan.n:
        raise InfluenceFileError(
            f"{path}: n_committed={start} is not a multiple of block_size={plan.block_size}; "
            "the file is damaged, pass overwrite=True to rewrite it"
        )
    return start


def _check_variance(path: Path, f: h5py.File, plan: FlowPlan) -> FlowPlan:
    """The plan with the file's state variance (checked against the recomputed one)."""
    stored = f[VARIANCE][()]
    if stored.shape != plan.state_variance.shape or not np.allclose(
        stored, plan.state_variance, rtol=VARIANCE_RTOL, atol=0
    ):
        diff = (
            float(np.max(np.abs(stored - plan.state_variance)))
            if stored.shape == plan.state_variance.shape
            else stored.shape
        )
        raise _mismatch(path, [f"state_variance: file and this run differ (max {diff})"])
    return FlowPlan(
        plan.settings, plan.hook_names, plan.n, plan.T, plan.d, plan.input_scale, stored
    )


def _finish(f: h5py.File, plan: FlowPlan) -> None:
    """Aggregate from the stored scores (block by block, float64), then mark complete."""
    total = np.zeros((plan.n_layer_axis, plan.T + 1, plan.T), dtype=np.float64)
    for block in range(plan.n_sample_blocks):
        start, stop = plan.block_range(block)
        total += f[SCORES][:, start:stop].astype(np.float64).sum(axis=1)
    f[AGGREGATE][...] = total / plan.n
    f.flush()
    f.attrs.modify("complete", True)
    f.flush()


@locked_output("path")
def write_influence(
    path: str | os.PathLike,
    model: HookedRootModule,
    x: np.ndarray | torch.Tensor,
    settings: InfluenceSettings | None = None,
    provenance: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_block: BlockCallback | None = None,
    sample_index: np.ndarray | None = None,
) -> InfluenceFile:
    """Compute flow scores of ``model`` on ``x`` [n, T, d] into the influence file ``path``.

    Args:
        path: output file. An unfinished influence file written with the same settings
            and provenance is resumed at its ``n_committed`` cursor.
        model: ``HookedRootModule`` with the L+1 layer sites, forward on x [b, T, d].
        x: inputs float [n, T, d] (e.g. an activation cache's ``/inputs/x``, rows 0..n-1).
        settings: :class:`InfluenceSettings` (defaults if None).
        provenance: JSON-serialisable dict describing the model and the inputs; the
            SHA-256 of ``x`` is added as ``inputs_sha256``.
        overwrite: replace an existing influence file (never any other file).
        progress: tqdm bars; False is quiet.
        on_block: called with ``n_committed`` after each committed block.
        sample_index: the activation-cache row of each of the n samples, int [n]
            (default 0..n-1), stored as ``/sample_index``.

    Returns:
        The written file, read back (:class:`InfluenceFile`).

    Raises:
        InfluenceError: bad settings, model without layer sites, non-finite inputs or
            states (nothing written). InfluenceMismatchError: ``path`` is an unfinished
            file of another run. InfluenceFileError: ``path`` is not an influence file.
        OutputExistsError: ``path`` is a complete influence file and not ``overwrite``.
        InfluenceDiskError: the file system cannot hold the file (a new file: nothing
            written; an unfinished one: unchanged, to resume once there is space).
    """
    path = Path(path)
    settings = (settings or InfluenceSettings()).resolved()
    x = check_inputs(x)
    layer_names(model)
    provenance = {**dict(provenance or {}), "inputs_sha256": inputs_hash(x)}
    header = preflight(path, overwrite)
    plan = plan_influence(model, x, settings, progress=progress)
    attrs = _attrs(plan, provenance)
    if header is not None:
        lines = _identity(header, attrs)
        if lines:
            raise _mismatch(path, lines)
        start = _committed_start(path, header, plan)
        reserve_disk(path, path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        index = np.arange(plan.n) if sample_index is None else np.asarray(sample_index)
        if index.shape != (plan.n,):
            raise InfluenceError(
                f"sample_index: expected {plan.n} cache rows (one per sample), got shape "
                f"{index.shape}"
            )
        check_disk(path, plan)
        _create(path, plan, attrs, index.astype(np.int64))
        start = 0
    with h5py.File(path, "r+") as f:
        if header is not None:
            plan = _check_variance(path, f, plan)
        scores = f[SCORES]
        for block, lo, hi in iterate_blocks(plan, first=start, progress=progress):
            scores[:, lo:hi] = block_scores(model, x, plan, block)
            f.flush()  # the scores are with the operating system before the cursor moves
            f.attrs.modify("n_committed", hi)
            f.flush()
            if on_block is not None:
                on_block(hi)
        if not bool(f.attrs["complete"]):
            _finish(f, plan)
    return read_influence(path)
