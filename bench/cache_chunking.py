"""Chunk size and compression measurements behind docs/cache-format.md.

1. Chunk size: write N = 20480 samples x 12 residual-shaped sites [17, 64] float32 with
   the public writer (replay model of bench/cache_write.py, so no forward cost) for
   several chunk-size targets, then read every site back in the probes' pattern (a full
   sequential pass of ``iter_blocks``) and one site through 1000 random single samples.
   Chunks hold whole samples; the default target is 1 MiB.
2. Compression: real activations (the default model on intrinsic-dim: residual stream and
   attention pattern), N = 8192, stored with none / lzf / gzip-1 / gzip-4 / shuffle+gzip-1;
   size ratio (raw / stored bytes) and write / read MB/s. Float16 storage for comparison.
Prints the best lossless size ratio last: compression becomes the default only if it
reaches 1.5x without slowing writes below the disk.

    python bench/cache_chunking.py
"""

from __future__ import annotations

import statistics
import time

import h5py
import numpy as np
import torch
from cache_common import (
    SCRATCH,
    batches,
    default_model,
    default_task,
    print_environment,
    set_threads,
)
from cache_write import BATCH, ReplayModel

import infoprobe.hooks.schema as schema
from infoprobe.hooks import capture, open_cache, write_cache

N_CHUNK, N_COMPRESS = 20_480, 8192
TARGETS = {"16 KiB": 16 << 10, "128 KiB": 128 << 10, "1 MiB (default)": 1 << 20, "4 MiB": 4 << 20}
FILTERS = {
    "none": {},
    "lzf": {"compression": "lzf"},
    "gzip-1": {"compression": "gzip", "compression_opts": 1},
    "gzip-4": {"compression": "gzip", "compression_opts": 4},
    "shuffle+gzip-1": {"compression": "gzip", "compression_opts": 1, "shuffle": True},
}


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def pick_rows(ds: h5py.Dataset, rows: np.ndarray) -> None:
    for i in rows:
        ds[int(i)]


def write_batches(ds: h5py.Dataset, data: np.ndarray) -> None:
    for a in range(0, len(data), BATCH):
        ds.write_direct(data, np.s_[a : a + BATCH], np.s_[a : a + BATCH])


def chunk_sweep() -> None:
    model = ReplayModel(12)
    x = np.zeros((BATCH, 16, 1), dtype=np.float32)
    path = SCRATCH / "bench_cache_chunking.h5"
    provenance = {"checkpoint_sha256": None, "model_config": {}, "data_spec": {}}
    gb = N_CHUNK * 12 * 17 * 64 * 4 / 1e9
    print(f"chunk size sweep: {gb:.2f} GB, batches of {BATCH}")
    print(f"  {'target':<17}{'chunk':<15}{'write GB/s':>11}{'scan GB/s':>11}{'1000 rows/s':>13}")
    default = schema.CHUNK_TARGET_BYTES
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(N_CHUNK, 1000, replace=False))
    try:
        for label, target in TARGETS.items():
            schema.CHUNK_TARGET_BYTES = target
            write = statistics.median(
                timed(
                    lambda: write_cache(
                        path,
                        model,
                        lambda b, s: (x[:s], x[:s, 0]),
                        n=N_CHUNK,
                        batch_size=BATCH,
                        sites="all",
                        provenance=provenance,
                        overwrite=True,
                        progress=False,
                    )
                )
                for _ in range(2)
            )
            with open_cache(path) as cache:
                site = cache.hook_names[0]
                scan = statistics.median(
                    timed(lambda: sum(1 for _ in cache.iter_blocks(include_inputs=False)))
                    for _ in range(2)
                )
                ds = cache.acts(site)
                picks = timed(pick_rows, ds, rows)
                chunk = "x".join(map(str, ds.chunks))
            print(
                f"  {label:<17}{chunk:<15}{gb / write:>11.2f}{gb / scan:>11.2f}"
                f"{1000 / picks:>13.0f}"
            )
    finally:
        schema.CHUNK_TARGET_BYTES = default
        path.unlink(missing_ok=True)


def compression_table() -> float:
    task = default_task()
    model = default_model(task)
    names = ["blocks.1.hook_resid_post", "blocks.1.attn.hook_pattern"]
    acts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for xb, _ in batches(task, N_COMPRESS, BATCH, 10_000):
        for name, tensor in capture(model, xb, names).items():
            acts[name].append(tensor.numpy())
    arrays = {n: np.concatenate(v) for n, v in acts.items()}
    print(f"compression on real activations (default model, N={N_COMPRESS}):")
    print(f"  {'site':<28}{'filter':<16}{'ratio':>7}{'write MB/s':>12}{'read MB/s':>11}")
    path = SCRATCH / "bench_cache_compression.h5"
    best = 1.0
    try:
        for name, data in arrays.items():
            rows = schema.chunk_rows(data[0].nbytes, BATCH, len(data))
            for label, options in FILTERS.items():
                with h5py.File(path, "w") as f:
                    ds = f.create_dataset(
                        "a",
                        shape=data.shape,
                        dtype=data.dtype,
                        chunks=(rows, *data.shape[1:]),
                        **options,
                    )
                    write = timed(write_batches, ds, data)
                    stored = ds.id.get_storage_size()
                with h5py.File(path, "r") as f:
                    read = timed(lambda f=f: f["a"][:])
                ratio = data.nbytes / stored
                if label != "none":
                    best = max(best, ratio)
                mb = data.nbytes / 1e6
                print(f"  {name:<28}{label:<16}{ratio:>7.2f}{mb / write:>12.0f}{mb / read:>11.0f}")
            half = data.astype(np.float16)
            err = np.abs(half.astype(np.float32) - data).max() / np.abs(data).max()
            print(
                f"  {name:<28}{'float16':<16}{2.0:>7.2f}{'':>12}{'':>11}  max rel. error {err:.1e}"
            )
    finally:
        path.unlink(missing_ok=True)
    return best


def main() -> None:
    set_threads(1)
    print_environment()
    chunk_sweep()
    best = compression_table()
    print(
        f"ratio: {best:.2f}x best lossless size reduction on float32 activations "
        f"(compression would become the default only at >= 1.5x)"
    )


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
