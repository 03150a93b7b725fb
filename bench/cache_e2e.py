"""End to end: ``infoprobe cache`` vs forward-only over the same samples (gate <= 1.5).

The baseline is the full forward: every position of every block, which is what a cache
of the residual stream and attention must compute. ``model(x)`` alone computes the last
block for the CLS token only (the readout reads nothing else), about 40 % fewer FLOPs for
two blocks; that forward is timed too and its ratio printed beside, but it is not work a
cache can skip.

The cache side is the CLI command itself (``infoprobe.cli.main`` in process, so the
interpreter start-up is not counted; its printed summary is muted): load the checkpoint,
plan, then sample + forward + capture + write N samples with the default sites
``residual,attention`` to a fresh file, with its default commit policy (flush per batch,
no fsync). The baseline draws the same batches from the task and runs the plain forward
under ``torch.inference_mode``. Both use one torch thread (the writer's I/O thread takes
the second core). Untimed before every run: the last output is deleted and ``os.sync()``
flushes dirty pages, so each run starts like a user's single run, with no writeback
pending. Pass ``--durable`` to time the fsync-every-batch mode instead, and
``--hdf5-writes`` to also time, interleaved with the others, the same command with every
dataset written through h5py's ``write_direct`` instead of ``os.pwrite`` (the writer's
``RAW_WRITES = False``).

    python bench/cache_e2e.py [--n 20000] [--batch 512] [--repeats 3] [--durable]
                              [--hdf5-writes]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from pathlib import Path

import torch
from cache_common import (
    SCRATCH,
    batches,
    default_task,
    interleaved_medians,
    make_checkpoint,
    print_environment,
    set_threads,
    settle_disk,
    through_hdf5,
)

from infoprobe.checkpoint import load_checkpoint
from infoprobe.cli import main as cli_main
from infoprobe.pipeline.cache_settings import DATA_SEED_OFFSET

GATE = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--sites", default="residual,attention")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--hdf5-writes", action="store_true")
    args = parser.parse_args()
    set_threads(args.threads)
    print_environment()
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        folder = Path(tmp)
        checkpoint = make_checkpoint(folder)
        model = load_checkpoint(checkpoint).model
        task = default_task()
        out = folder / "acts.h5"

        full = load_checkpoint(checkpoint).model
        full.trim_last_block = False  # every position of the last block, as a cache needs

        def forward_of(net):
            def forward() -> None:
                for x, _ in batches(task, args.n, args.batch, DATA_SEED_OFFSET):
                    with torch.inference_mode():
                        net(torch.from_numpy(x))

            return forward

        def cache_command() -> None:
            command = [
                "cache",
                str(checkpoint),
                "--n",
                str(args.n),
                "--cache-batch",
                str(args.batch),
                "--sites",
                args.sites,
                "--out",
                str(out),
                "--quiet",
                "--threads",
                str(args.threads),
                *(["--durable"] if args.durable else []),
            ]
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli_main(command) == 0

        units = {
            "forward only": forward_of(full),
            "forward, CLS-only last block": forward_of(model),
            "infoprobe cache": cache_command,
        }
        if args.hdf5_writes:
            units["infoprobe cache, h5py writes"] = through_hdf5(cache_command)

        print(f"N={args.n}, batch {args.batch}, sites {args.sites}:")
        t = interleaved_medians(
            units,
            repeats=args.repeats,
            between=lambda: settle_disk(out),
        )
    for name in units:
        if name != "forward only":
            print(f"ratio ({name}): {t[name] / t['forward only']:.2f}x forward-only time")
    print(f"gate: infoprobe cache <= {GATE}x the full forward (the work a cache must do)")
    print(
        f"ratio: infoprobe cache / full forward = {t['infoprobe cache'] / t['forward only']:.2f}x"
        f" ({t['infoprobe cache'] / t['forward, CLS-only last block']:.2f}x the CLS-only forward)"
    )


if __name__ == "__main__":
    main()
