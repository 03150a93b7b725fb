"""The critic probe vs the query probe on the demo's workload (the gate: critic <= 2x).

Workload: ``infoprobe probe acts.h5 --probe {query,critic} --control acts-random-init.h5``
on an activation cache of the demo's architecture (intrinsic-dim D = 2, T = 16, E = 32,
heads (2, 2)) with N = 4096 samples: three fits each (the probe, the random-init control,
the shuffled control) of 51 cells × 16 positions, hidden 64, each probe with its default
budget (the critic's is lr 1e-2; both up to 100 epochs, patience 10). Pass the demo's
caches with ``--cache``/``--control`` (``infoprobe demo`` writes them under
``runs/demo/heads-2-2``); without them an untrained model of the same architecture is
cached (same shapes; early stopping, and so the time, differs from a trained model).
Each probe runs three ways in one run (:func:`engine_baseline.engine_table`): the code
before the one engine, this code with the kernel and with the engine's autograd step, one
fresh process each, wall time; the last line is the ratio critic / query (this code, with
the kernel).

    python bench/critic_probe.py [--cache acts.h5 --control acts-random-init.h5] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cache_common import print_environment
from engine_baseline import engine_table
from query_probe import demo_caches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--control", type=Path)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print_environment()
    with tempfile.TemporaryDirectory() as tmp:
        if args.cache is None:
            cache, control = demo_caches(Path(tmp), args.n)
        else:
            cache, control = args.cache, args.control
        query = engine_table(cache, control, "query", args.threads)
        critic = engine_table(cache, control, "critic", args.threads)
    print(f"before the one engine: critic / query {critic['baseline'] / query['baseline']:.2f}x")
    print(f"critic / query wall time: {critic['kernel'] / query['kernel']:.2f}x (gate <= 2x)")


if __name__ == "__main__":
    main()
