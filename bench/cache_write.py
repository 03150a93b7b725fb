"""Write throughput: an HDF5 activation cache of >= 1 GB vs numpy + fsync (gate >= 0.5).

Both write the same bytes: activations shaped like a real cache (sites [B, T+1, E] with
T = 16, E = 64), N samples in batches of 512. The HDF5 side is the public writer,
``write_cache`` with ``durable=True``, on a replay model whose forward only passes stored
tensors through its hook points, so the time is the cache's own work (capture,
conversion, whole-batch writes, flush + fsync + cursor commit per batch). The baseline
appends the same arrays to one raw file with ``ndarray.tofile`` and one fsync at the
end. Ratio = baseline time / HDF5 time (inputs and targets add < 1 % to the HDF5 side).
``--hdf5-writes`` also times, interleaved, the cache with every dataset written through
h5py's ``write_direct`` instead of ``os.pwrite``.

    python bench/cache_write.py [--n 20480] [--sites 12] [--repeats 3] [--hdf5-writes]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from cache_common import (
    SCRATCH,
    interleaved_medians,
    print_environment,
    set_threads,
    through_hdf5,
)
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.hooks import write_cache

GATE = 0.5
T, E, BATCH = 16, 64, 512


class ReplayModel(HookedRootModule):
    """Hook points ``blocks.{i}.hook_resid_post`` that emit stored [B, T+1, E] tensors."""

    def __init__(self, sites: int, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.blocks = torch.nn.ModuleList(torch.nn.Module() for _ in range(sites))
        for block in self.blocks:
            block.hook_resid_post = HookPoint()
        self.stored = [torch.randn(BATCH, T + 1, E, generator=gen) for _ in range(sites)]
        self.setup()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block, tensor in zip(self.blocks, self.stored, strict=True):
            block.hook_resid_post(tensor[: len(x)])
        return x[:, 0, :1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_480)
    parser.add_argument("--sites", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hdf5-writes", action="store_true")
    args = parser.parse_args()
    set_threads(args.threads)
    print_environment()
    model = ReplayModel(args.sites)
    x = np.zeros((BATCH, T, 1), dtype=np.float32)
    acts = [t.numpy() for t in model.stored]
    nbytes = args.n * args.sites * (T + 1) * E * 4
    print(
        f"writing {nbytes / 1e9:.2f} GB: {args.n} samples x {args.sites} sites "
        f"[{T + 1}, {E}] float32 in batches of {BATCH}"
    )
    h5_path, raw_path = SCRATCH / "bench_cache_write.h5", SCRATCH / "bench_cache_write.raw"
    provenance = {"checkpoint_sha256": None, "model_config": {}, "data_spec": {}}

    def write_hdf5() -> None:
        write_cache(
            h5_path,
            model,
            lambda b, size: (x[:size], x[:size, 0]),
            n=args.n,
            batch_size=BATCH,
            sites="all",
            provenance=provenance,
            overwrite=True,
            progress=False,
            durable=True,
        )
        h5_path.unlink()

    def write_numpy() -> None:
        with open(raw_path, "wb") as fh:
            for start in range(0, args.n, BATCH):
                for array in acts:
                    array[: min(BATCH, args.n - start)].tofile(fh)
            fh.flush()
            os.fsync(fh.fileno())
        raw_path.unlink()

    try:
        units = {"hdf5 cache": write_hdf5, "numpy + fsync": write_numpy}
        if args.hdf5_writes:
            units["hdf5 cache, h5py writes"] = through_hdf5(write_hdf5)
        t = interleaved_medians(units, repeats=args.repeats)
    finally:
        h5_path.unlink(missing_ok=True)
        raw_path.unlink(missing_ok=True)
    gb = nbytes / 1e9
    print(", ".join(f"{name} {gb / seconds:.2f} GB/s" for name, seconds in t.items()))
    for name in t:
        if name != "numpy + fsync":
            print(
                f"ratio ({name}): {t['numpy + fsync'] / t[name]:.2f}x throughput of numpy + fsync"
            )
    print(f"gate: hdf5 cache >= {GATE}x")


if __name__ == "__main__":
    main()
