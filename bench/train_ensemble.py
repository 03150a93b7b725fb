"""Benchmark: training throughput (model-steps per second) of compiled steps and batched
ensembles against 8 runs of the local backend as it trains by default (eager, one run per
worker, one worker per core).

Workload: the intrinsic-dim quick profile's (2,2) model (D=2, T=16, E=32, FFN 128, batch
256 of fresh samples), 8 runs. Each configuration is measured with its workers running at
the same time, as the local backend runs them: every worker times ``--steps`` training
steps (median, after warm-up; the compilation, if any, is timed apart) and the
configuration's throughput is the sum over workers of members / median step time.
Configurations are measured in interleaved rounds (``--rounds``); medians are reported.

    configuration            workers x threads   members per worker   compiled
    eager (baseline)         cores x 1           1                    no
    compiled                 cores x 1           1                    yes
    ensemble                 cores x 1           8 / cores            no
    ensemble compiled        cores x 1           8 / cores            yes
    ensemble x8 compiled     1 x cores           8                    yes

The table also gives the throughput over a 10k-step run with the compilation counted.
The last line is the ratio of the fastest configuration's throughput to the baseline's,
measured in the same run. With ``--device cuda`` (when a GPU is present) the same table
is measured on the GPU with one worker (runs share the device).

    python bench/train_ensemble.py [--steps 30] [--rounds 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from infoprobe.reproduce.claims import CLAIMS
from infoprobe.reproduce.grid import RunSpec
from infoprobe.reproduce.timing import time_ensemble, time_point

RUNS = 8
RUN_STEPS = 10_000


def point():
    points = CLAIMS["intrinsic-dim"].profile("quick").points
    return next(p for p in points if p.label == "(2,2) D=2")


def configurations(cores: int, device: str) -> dict[str, dict]:
    if device.startswith("cuda"):
        return {
            "eager (baseline)": {"workers": 1, "threads": cores, "members": 1, "compile": False},
            "compiled": {"workers": 1, "threads": cores, "members": 1, "compile": True},
            "ensemble x8": {"workers": 1, "threads": cores, "members": 8, "compile": False},
            "ensemble x8 compiled": {"workers": 1, "threads": cores, "members": 8, "compile": True},
        }
    per = max(1, RUNS // cores)
    return {
        "eager (baseline)": {"workers": cores, "threads": 1, "members": 1, "compile": False},
        "compiled": {"workers": cores, "threads": 1, "members": 1, "compile": True},
        "ensemble": {"workers": cores, "threads": 1, "members": per, "compile": False},
        "ensemble compiled": {"workers": cores, "threads": 1, "members": per, "compile": True},
        "ensemble x8 compiled": {"workers": 1, "threads": cores, "members": 8, "compile": True},
    }


def worker(members: int, threads: int, compile: bool, steps: int, device: str) -> dict:
    """Time one worker's training steps: {"step": s, "compile": s, "members": M}."""
    p = point()
    if members == 1:
        t = time_point(p, threads=threads, device=device, steps=steps, compile=compile)
    else:
        group = [RunSpec("bench", "quick", p, s, device, threads, compile) for s in range(members)]
        t = time_ensemble(group, steps=steps)
    return {"step": t.step_seconds, "compile": t.compile_seconds, "members": members}


def measure(setting: dict, steps: int, device: str) -> dict:
    """Run the setting's workers at the same time; its throughput and compile time."""
    args = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps({**setting, "steps": steps, "device": device}),
    ]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(setting["workers"])
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    rate = sum(r["members"] / r["step"] for r in results)
    compile_s = max(r["compile"] for r in results)
    runs_per_worker = RUNS / (setting["workers"] * setting["members"])
    step = statistics.median(r["step"] for r in results)
    # a 10k-step run per member, compilation counted once per worker and group
    wall = runs_per_worker * (RUN_STEPS * step + compile_s)
    return {"rate": rate, "compile": compile_s, "with_compile": RUNS * RUN_STEPS / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per worker")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        w = json.loads(args.worker)
        result = worker(w["members"], w["threads"], w["compile"], w["steps"], w["device"])
        print(json.dumps(result))
        return
    settings = configurations(args.cores, args.device)
    measured: dict[str, list[dict]] = {name: [] for name in settings}
    for r in range(args.rounds):
        for name, setting in settings.items():
            measured[name].append(measure(setting, args.steps, args.device))
            print(f"round {r + 1}: {name}: {measured[name][-1]['rate']:.1f} model-steps/s")
    rows = {
        name: {
            k: statistics.median(m[k] for m in runs) for k in ("rate", "compile", "with_compile")
        }
        for name, runs in measured.items()
    }
    base = rows["eager (baseline)"]["rate"]
    print(f"\n{RUNS} runs of the (2,2) D=2 quick model on {args.device}, {args.cores} cores")
    print(
        f"{'configuration':24s} {'model-steps/s':>14s} {'x baseline':>10s} {'compile s':>10s}"
        f" {'10k-step runs, compile counted':>31s}"
    )
    for name, row in rows.items():
        print(
            f"{name:24s} {row['rate']:14.1f} {row['rate'] / base:10.2f} {row['compile']:10.1f}"
            f" {row['with_compile']:24.1f} ({row['with_compile'] / base:.2f}x)"
        )
    best = max(rows, key=lambda n: rows[n]["rate"])
    print(f"fastest: {best}")
    print(f"fastest / baseline model-steps per second: {rows[best]['rate'] / base:.2f}")


if __name__ == "__main__":
    main()
