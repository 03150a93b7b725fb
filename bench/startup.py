"""Start-up time of the ``infoprobe`` command: CPU seconds of ``infoprobe --version``,
``infoprobe --help`` and every subcommand's ``--help``, against ``python -c pass`` measured
in the same run (interleaved repeats, medians of user + system CPU of the child).

Gate: ``infoprobe --version`` under 0.5 s of CPU; any subcommand's ``--help`` under 1 s.
The last line is the ratio of ``--version`` to ``python -c pass``.

    python bench/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys

from infoprobe.commands import COMMANDS


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores")
    cli = [sys.executable, "-m", "infoprobe"]
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "infoprobe --version": [*cli, "--version"],
        "infoprobe --help": [*cli, "--help"],
        **{f"infoprobe {name} --help": [*cli, name, "--help"] for name in COMMANDS},
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # interleaved, so a burst of load hits every case alike
        for name, argv in cases.items():
            times[name].append(cpu_seconds(argv))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, value in medians.items():
        gate = 0.5 if name in ("infoprobe --version", "infoprobe --help") else 1.0
        mark = "" if name == "python -c pass" else ("ok" if value < gate else f"OVER {gate} s")
        print(f"{name:<36} {value:6.3f} s CPU  {mark}")
    version = medians["infoprobe --version"]
    ratio = version / medians["python -c pass"]
    print(f"infoprobe --version / python -c pass: {ratio:.2f}x ({version:.3f} s CPU)")


if __name__ == "__main__":
    main()
