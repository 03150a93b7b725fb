"""The demo's probe workload on a CUDA device against the CPU: each family's time and the
largest difference of its results.

Workload: ``infoprobe probe acts.h5 --probe {mlp,query,critic} --control
acts-random-init.h5`` on an activation cache of the demo's architecture (intrinsic-dim
D = 2, T = 16, E = 32, heads (2, 2), N = 4096 samples; an untrained model unless
``--cache``/``--control`` name the demo's caches): the probe and both controls, the
default budgets. Each family runs once on the CPU (the fused kernel, ``--threads``) and
once on ``cuda`` (the engine's autograd step), each in a fresh process; printed: the two
times, their ratio and the largest absolute difference between the two results files
(float32 rounding and a different summation order; early stopping can then pick another
epoch in a few cells, which shows here as a larger difference). Without a CUDA device it
says so and exits with status 2.

    python bench/device_check.py [--cache acts.h5 --control acts-random-init.h5] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from cache_common import print_environment
from engine_baseline import largest_difference, probe_seconds
from query_probe import demo_caches

FAMILIES = ("mlp", "query", "critic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--control", type=Path)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    print_environment()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        sys.exit(2)
    print(f"device: {torch.cuda.get_device_name(0)}")
    total = {"cpu": 0.0, "cuda": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        cache, control = args.cache, args.control
        if cache is None:
            cache, control = demo_caches(Path(tmp), args.n)
        for family in args.families.split(","):
            outs = {device: Path(tmp) / f"{family}-{device}.h5" for device in total}
            times = {
                device: probe_seconds(
                    cache, control, family, outs[device], threads=args.threads, device=device
                )
                for device in total
            }
            for device in total:
                total[device] += times[device]
            diff, where = largest_difference(outs["cpu"], outs["cuda"])
            print(
                f"{family}: cpu {times['cpu']:.1f} s, cuda {times['cuda']:.1f} s "
                f"({times['cpu'] / times['cuda']:.2f}x); largest difference {diff:.2e} in "
                f"{where}"
            )
    print(f"ratio: {total['cpu'] / total['cuda']:.2f}x (all families, cpu / cuda)")


if __name__ == "__main__":
    main()
