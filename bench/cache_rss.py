"""Peak memory: caching 80k vs 20k samples of the same model (gate: ratio <= 1.1).

Each run is a fresh process executing ``infoprobe cache`` (in process via
``infoprobe.cli.main``) on the same untrained default checkpoint, sites
``residual,attention``, batch 512, and reporting its peak resident set size
(``ru_maxrss``). A streaming writer holds a few batches at a time whatever N is, so the
larger run should need no more memory than the smaller one. Ratio = median peak RSS of
the 80k run / median peak RSS of the 20k run.

    python bench/cache_rss.py [--small 20000] [--large 80000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cache_common import SCRATCH, make_checkpoint, print_environment, set_threads

GATE = 1.1


def child(checkpoint: str, n: int, out: str) -> None:
    """Run the cache command once and print the peak RSS in MiB (Linux: ru_maxrss is KiB)."""
    set_threads(1)
    from infoprobe.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "cache",
                    checkpoint,
                    "--n",
                    str(n),
                    "--out",
                    out,
                    "--quiet",
                    "--sites",
                    "residual,attention",
                    "--cache-batch",
                    "512",
                ]
            )
            == 0
        )
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def peak_rss(checkpoint: Path, n: int, out: Path) -> float:
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(checkpoint), str(n), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    out.unlink()
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=80_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("CHECKPOINT", "N", "OUT"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    set_threads(1)
    print_environment()
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        folder = Path(tmp)
        checkpoint = make_checkpoint(folder)
        rss: dict[int, list[float]] = {args.small: [], args.large: []}
        for _ in range(args.repeats):
            for n in rss:
                rss[n].append(peak_rss(checkpoint, n, folder / "acts.h5"))
    for n, values in rss.items():
        print(
            f"  N={n}: peak RSS median {statistics.median(values):.0f} MiB over "
            f"{', '.join(f'{v:.0f}' for v in values)}"
        )
    ratio = statistics.median(rss[args.large]) / statistics.median(rss[args.small])
    print(f"ratio: {ratio:.3f}x peak RSS of N={args.large} over N={args.small} (gate <= {GATE})")


if __name__ == "__main__":
    main()
