"""Does a writer thread stall the forward pass? h5py ``write_direct`` vs ``os.pwrite``.

The main thread runs forward passes of the default model on a batch of 512 (one torch
thread) while a second thread writes one cache batch (11 datasets of 512 samples shaped
like the default sites, 12.4 MB) per forward pass, as the cache writer does: through
h5py's ``Dataset.write_direct`` into chunked datasets allocated early, or with
``os.pwrite`` of the same bytes. Printed: the forward passes' wall time against the same
passes with no writer thread (medians of interleaved repeats), and the process CPU time.
h5py holds the GIL for the whole write, so the forward pass waits; ``os.pwrite`` releases
it. Only meaningful with a core free for the writer (compare the CPU times otherwise).

    python bench/cache_gil.py [--passes 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import torch
from cache_common import (
    SCRATCH,
    default_model,
    default_task,
    interleaved_medians,
    print_environment,
    set_threads,
)

BATCH, SITES, ROW = 512, 11, 550  # 11 datasets of 550 float32 (2.2 KB) per sample
SLOTS = 4  # batches the file holds; the writer cycles through them
Writer = Callable[[int], None]


def batch_arrays(seed: int = 0) -> list[np.ndarray]:
    """One cache batch: ``SITES`` arrays [BATCH, ROW] float32."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((BATCH, ROW), dtype=np.float32) for _ in range(SITES)]


def h5py_writer(folder: Path, arrays: list[np.ndarray]) -> tuple[Writer, Callable[[], None]]:
    """``write(slot)`` through ``write_direct`` + flush, as the cache's HDF5 path; close."""
    f = h5py.File(folder / "gil.h5", "w", rdcc_nbytes=0)
    datasets = []
    for i in range(SITES):
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        datasets.append(
            f.create_dataset(
                f"d{i}",
                shape=(SLOTS * BATCH, ROW),
                maxshape=(None, ROW),
                dtype="f4",
                chunks=(BATCH // 2, ROW),
                dcpl=dcpl,
                fill_time="never",
            )
        )

    def write(slot: int) -> None:
        for ds, array in zip(datasets, arrays, strict=True):
            ds.write_direct(array, dest_sel=np.s_[slot * BATCH : (slot + 1) * BATCH])
        f.flush()

    return write, f.close


def pwrite_writer(folder: Path, arrays: list[np.ndarray]) -> tuple[Writer, Callable[[], None]]:
    """``write(slot)`` of the same bytes with ``os.pwrite`` into a plain file; close."""
    fd = os.open(folder / "gil.raw", os.O_RDWR | os.O_CREAT, 0o644)
    batch_bytes = sum(a.nbytes for a in arrays)

    def write(slot: int) -> None:
        offset = slot * batch_bytes
        for array in arrays:
            os.pwrite(fd, memoryview(array.reshape(-1).view(np.uint8)), offset)
            offset += array.nbytes

    return write, lambda: os.close(fd)


def with_writer(work: Callable[[], None], write: Writer | None, pace: float) -> Callable[[], None]:
    """``work`` run while a thread calls ``write`` once every ``pace`` seconds."""
    if write is None:
        return work

    def run() -> None:
        stop = threading.Event()

        def loop() -> None:
            slot = 0
            while not stop.wait(pace):
                write(slot % SLOTS)
                slot += 1

        thread = threading.Thread(target=loop)
        thread.start()
        try:
            work()
        finally:
            stop.set()
            thread.join()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    set_threads(1)
    print_environment()
    task = default_task()
    model = default_model(task)
    x = torch.from_numpy(task.sample(BATCH, np.random.default_rng(0))[0])

    def forwards() -> None:
        with torch.inference_mode():
            for _ in range(args.passes):
                model(x)

    forwards()
    start = time.perf_counter()
    forwards()
    pace = (time.perf_counter() - start) / args.passes
    arrays = batch_arrays()
    megabytes = sum(a.nbytes for a in arrays) / 1e6
    print(
        f"{args.passes} forward passes of {BATCH}; writer: {megabytes:.1f} MB every "
        f"{pace * 1e3:.1f} ms (one forward pass)"
    )
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        h5_write, h5_close = h5py_writer(Path(tmp), arrays)
        raw_write, raw_close = pwrite_writer(Path(tmp), arrays)
        for write in (h5_write, raw_write):
            for slot in range(SLOTS):  # allocate the page-cache pages before timing
                write(slot)
        try:
            t = interleaved_medians(
                {
                    "no writer": forwards,
                    "h5py write_direct": with_writer(forwards, h5_write, pace),
                    "os.pwrite": with_writer(forwards, raw_write, pace),
                },
                repeats=args.repeats,
            )
        finally:
            h5_close()
            raw_close()
    for name in ("h5py write_direct", "os.pwrite"):
        print(f"forward time with a {name} writer: {t[name] / t['no writer']:.2f}x alone")


if __name__ == "__main__":
    main()
