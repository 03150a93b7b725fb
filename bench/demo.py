"""`infoprobe demo` end to end: each stage's time and the total against 300 s (the goal: 120 s).

Runs ``infoprobe demo --out DIR`` in a fresh process (from scratch: DIR must not exist)
and reads each stage's ``done in N s`` line of both models; with ``--from-log LOG`` it
reads a log of an earlier run instead. Prints the time of every stage by model, the sum
per stage over the models, the wall time, and last the wall time as a ratio to 300 s.
The models train side by side (one per core) unless the demo is told otherwise, so the
stages' sum can exceed the wall time.

    python bench/demo.py [--out bench-out/demo] [--threads 2] [--from-log demo.log]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from cache_common import print_environment

GOAL_S = 300.0
STAGE = re.compile(r"^\[(?P<model>[^\]]+)\] \[\d+/\d+\] (?P<stage>\S+)\s+done in (?P<s>\d+) s")
WALL = re.compile(r"^real\s+(?:(?P<m>\d+)m)?(?P<s>[\d.]+)s")


def stage_times(log: str) -> dict[str, dict[str, float]]:
    """{model: {stage: seconds}} from a demo's printed lines."""
    times: dict[str, dict[str, float]] = defaultdict(dict)
    for line in log.splitlines():
        if found := STAGE.match(line.strip()):
            times[found["model"]][found["stage"]] = float(found["s"])
    return dict(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out/demo"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--from-log", type=Path, help="read this log instead of running")
    args = parser.parse_args()
    print_environment()
    if args.from_log is not None:
        log = args.from_log.read_text()
        wall = next((60 * float(m["m"] or 0) + float(m["s"]) for line in log.splitlines()
                     if (m := WALL.match(line.strip()))), float("nan"))  # fmt: skip
    else:
        if args.out.exists():
            sys.exit(f"{args.out} exists: the demo would resume; give a new --out")
        command = [sys.executable, "-m", "infoprobe", "demo", "--out", str(args.out)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        log = done.stdout + done.stderr
    times = stage_times(log)
    by_stage: dict[str, float] = defaultdict(float)
    for model, stages in times.items():
        print(f"{model}: " + ", ".join(f"{stage} {s:.0f} s" for stage, s in stages.items()))
        for stage, seconds in stages.items():
            by_stage[stage] += seconds
    print("both models: " + ", ".join(f"{stage} {s:.0f} s" for stage, s in by_stage.items()))
    print(f"stages {sum(by_stage.values()):.0f} s in all; wall {wall:.0f} s")
    print(f"ratio: {wall / GOAL_S:.2f} (wall / {GOAL_S:.0f} s; the goal is 120 s)")


if __name__ == "__main__":
    main()
