"""Write sample rows of an HDF5 dataset with ``os.pwrite`` at the file offsets of its chunks.

h5py holds the GIL (and its own global lock) for the whole of ``Dataset.write_direct``,
so a background thread copying a batch into the file through HDF5 stalls every other
Python thread for the length of the copy. ``os.pwrite`` releases the GIL while the
kernel copies, so the writer thread's copy overlaps the next forward pass.

A dataset qualifies (:func:`unsupported_reason` returns None) when its bytes on disk are
exactly numpy's C-order bytes of its rows: chunked storage whose chunks span whole
samples (chunk shape ``[rows, *shape[1:]]``), no filters, every chunk allocated, a
fixed-size numeric type in the machine's byte order, in a single-file (``sec2``) HDF5
file without a user block. Then samples ``[a, b)`` inside chunk ``c`` (samples
``[c*rows, (c+1)*rows)``) are one contiguous byte range starting at
``offset[c] + (a - c*rows) * row_bytes``, so a batch that starts or ends inside a chunk
needs no read-modify-write: only its own samples' bytes are written.

HDF5 never sees these writes; the caller must keep HDF5 from writing the same chunks
(the writer opens the file with the chunk cache off and writes a dataset's rows either
here or through HDF5, never both at once) and flushes HDF5's metadata afterwards as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from math import prod

import h5py
import numpy as np

from infoprobe.hooks.errors import CacheError


def unsupported_reason(ds: h5py.Dataset) -> str | None:
    """Why the rows of ``ds`` cannot be written raw, or None when they can."""
    f = ds.file
    if f.driver != "sec2":
        return f"file driver {f.driver!r} is not 'sec2'"
    if f.userblock_size:
        return f"the file has a user block of {f.userblock_size} bytes"
    if ds.chunks is None:
        return "the dataset is not chunked"
    if tuple(ds.chunks[1:]) != tuple(ds.shape[1:]):
        return f"chunks {ds.chunks} do not span whole samples of shape {ds.shape}"
    if ds.id.get_create_plist().get_nfilters():
        return "the dataset has filters (compression, shuffle or checksums)"
    native = ds.dtype.newbyteorder("=")
    if ds.dtype.kind not in "fiu" or not ds.id.get_type().equal(h5py.h5t.py_create(native)):
        return f"storage type {ds.dtype.str} is not the machine's own {native.name}"
    if not hasattr(ds.id, "chunk_iter"):
        return "this h5py/HDF5 cannot list chunk addresses (H5Dchunk_iter)"
    return None


@dataclass(frozen=True)
class RawRows:
    """Where the samples of one dataset lie in its file.

    Chunk ``c`` holds samples ``[c*rows, min((c+1)*rows, n))`` and starts at file byte
    ``offsets[c]``; a sample is ``row_shape`` values of ``dtype`` in C order.
    """

    name: str
    filename: str
    n: int
    rows: int
    row_shape: tuple[int, ...]
    dtype: np.dtype
    offsets: np.ndarray  # [n_chunks] int64

    @property
    def row_bytes(self) -> int:
        return prod(self.row_shape) * self.dtype.itemsize

    def accepts(self, array: np.ndarray) -> bool:
        """Whether ``array`` [k, *row_shape] is already in the storage type and C order
        (anything else goes through HDF5, which converts as it always has)."""
        return (
            array.dtype == self.dtype
            and array.flags.c_contiguous
            and array.ndim == 1 + len(self.row_shape)
            and tuple(array.shape[1:]) == self.row_shape
        )

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """Samples ``[start, stop)`` split at chunk boundaries, as ``(file offset, first,
        last)``: samples ``[first, last)`` of the batch (0 = sample ``start``) are the
        contiguous bytes at that offset."""
        if not 0 <= start <= stop <= self.n:
            raise CacheError(
                f"{self.filename}: dataset {self.name}: samples [{start}, {stop}) are "
                f"outside [0, {self.n})"
            )
        out = []
        for chunk in range(start // self.rows, -(-stop // self.rows)):
            a, b = max(start, chunk * self.rows), min(stop, (chunk + 1) * self.rows)
            offset = int(self.offsets[chunk]) + (a - chunk * self.rows) * self.row_bytes
            out.append((offset, a - start, b - start))
        return out

    def write(self, fd: int, start: int, array: np.ndarray) -> None:
        """Write ``array`` [k, *row_shape] (see :meth:`accepts`) as samples ``[start, start+k)``."""
        if not self.accepts(array):
            raise CacheError(
                f"{self.filename}: dataset {self.name}: expected a C-contiguous "
                f"{self.dtype} array [k, {', '.join(map(str, self.row_shape))}], got "
                f"{array.dtype} {list(array.shape)}"
            )
        data = memoryview(array.reshape(-1).view(np.uint8))
        for offset, first, last in self.pieces(start, start + len(array)):
            pwrite_all(fd, data[first * self.row_bytes : last * self.row_bytes], offset)


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """``os.pwrite`` every byte of ``data`` at ``offset`` (a write may return short)."""
    while data:
        written = os.pwrite(fd, data, offset)
        if written <= 0:
            raise OSError(f"pwrite wrote {written} bytes at offset {offset}")
        data, offset = data[written:], offset + written


def chunk_offsets(ds: h5py.Dataset) -> np.ndarray | None:
    """File offset of every chunk of ``ds`` in sample order ([n_chunks] int64), or None
    when a chunk is unallocated or not stored at its full unfiltered size."""
    rows = ds.chunks[0]
    n_chunks = -(-ds.shape[0] // rows)
    chunk_bytes = prod(ds.chunks) * ds.dtype.itemsize
    offsets = np.full(n_chunks, -1, dtype=np.int64)

    def record(info) -> None:
        index = info.chunk_offset[0] // rows
        if index < n_chunks and info.size == chunk_bytes and not info.filter_mask:
            offsets[index] = info.byte_offset

    ds.id.chunk_iter(record)
    return None if (offsets < 0).any() else offsets


def raw_rows(ds: h5py.Dataset) -> RawRows | None:
    """The raw layout of ``ds`` (see the module docstring), or None when it must be
    written through HDF5."""
    if unsupported_reason(ds) is not None:
        return None
    offsets = chunk_offsets(ds)
    if offsets is None:
        return None
    return RawRows(
        name=ds.name,
        filename=ds.file.filename,
        n=ds.shape[0],
        rows=ds.chunks[0],
        row_shape=tuple(ds.shape[1:]),
        dtype=ds.dtype,
        offsets=offsets,
    )
