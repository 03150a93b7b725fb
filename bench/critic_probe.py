"""The critic probe vs the query probe on the demo's workload (the gate: critic <= 2x).

Workload: ``infoprobe probe acts.h5 --probe {query,critic} --control acts-random-init.h5``
on an activation cache of the demo's architecture (intrinsic-dim D = 2, T = 16, E = 32,
heads (2, 2)) with N = 4096 samples: three fits each (the probe, the random-init control,
the shuffled control) of 51 cells × 16 positions, hidden 64, each probe with its default
budget (the critic's is lr 1e-2; both up to 100 epochs, patience 10). Pass the demo's
caches with ``--cache``/``--control`` (``infoprobe demo`` writes them under
``runs/demo/heads-2-2``); without them an untrained model of the same architecture is
cached (same shapes; early stopping, and so the time, differs from a trained model).
One run of each, wall time, one process; the last line is the ratio critic / query.

    python bench/critic_probe.py [--cache acts.h5 --control acts-random-init.h5] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from cache_common import print_environment
from query_probe import demo_caches

from infoprobe.pipeline.probing import ProbeSettings, probe_cache


def timed(cache: Path, control: Path, probe: str) -> float:
    """Seconds of one :func:`probe_cache` of ``probe`` with its controls."""
    start = time.perf_counter()
    probe_cache(cache, control_path=control, settings=ProbeSettings(probe=probe), progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--control", type=Path)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print_environment()
    with tempfile.TemporaryDirectory() as tmp:
        if args.cache is None:
            cache, control = demo_caches(Path(tmp), args.n)
        else:
            cache, control = args.cache, args.control
        query = timed(cache, control, "query")
        critic = timed(cache, control, "critic")
    print(f"query probe: {query:.1f} s; critic probe: {critic:.1f} s (3 fits each)")
    print(f"critic / query wall time: {critic / query:.2f}x (gate <= 2x)")


if __name__ == "__main__":
    main()
