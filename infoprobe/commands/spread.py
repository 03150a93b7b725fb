"""``infoprobe spread``: one comparison over several training seeds, side by side."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args

DESCRIPTION = """\
Set the comparisons of several runs of one task and one architecture side by side: per
instrument and layer, each run's AUROC against InfoFlow's sets with its within-model
interval, and the spread over the runs (n, mean, sample standard deviation, min, max).

The interval in a run's comparison is a bootstrap over the compared samples of that one
trained model: it says how precisely that model's AUROC is measured, not how much it moves
when the same architecture is trained again with another seed. A claim about one trained
model rests on its within-model interval; a claim about the architecture rests on the
spread over seeds.

One RUN made by `infoprobe run --seeds S1,S2,..` (which trains every seed, keeps each
checkpoint in RUN/seeds/seed-S and analyses the best one in RUN): every other seed is
analysed first with the same stages and settings (recorded in RUN/seeds/analysis.json),
each into RUN/seeds/analysis/seed-S, resumable stage by stage, then the spread over all
seeds is printed, whichever seed trained best. Several RUNs: each is a run folder holding
comparison.json (`infoprobe run`, `infoprobe probe-checkpoint`) or a comparison file
(`infoprobe compare --out`), schema 4; all must come from one task, one architecture and
one layer count, compare the same instruments, and analyse different trained models.
Numbers are read from the comparison files; own positions are left out, as in the
headline (docs/report.md, "Spread over seeds")."""

EPILOG = """\
examples:
  infoprobe run --task intrinsic-dim --D 2 --T 16 --heads 2,2 --seeds 0,1,2 --out RUN
  infoprobe spread RUN
  infoprobe spread RUN --shares --out SPREAD.json
  infoprobe spread RUN-A RUN-B RUN-C        # run folders made one by one
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "spread",
        help=summary("spread"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="one folder of `run --seeds` (its other seeds are analysed first), or 2 or "
        "more run folders (or comparison.json files)",
    )
    parser.add_argument(
        "--shares",
        action="store_true",
        help="also print the per-sample shares of predicted and of other positions carried "
        "(always in --out)",
    )
    parser.add_argument(
        "--out", metavar="SPREAD.json", default=None, help="write every number as JSON"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_runtime_arguments(parser, with_device=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.compare.spread import METRICS, PRINTED, seed_spread, write_spread
    from infoprobe.pipeline.run import analyse_seeds
    from infoprobe.pipeline.seed_analyses import is_seeds_run

    runs = args.runs
    if len(runs) == 1 and is_seeds_run(runs[0]):
        runtime_from_args(args).apply()
        runs = analyse_seeds(runs[0], progress=not args.quiet, log=print)
    spread = seed_spread(runs)
    if args.out is not None:
        write_spread(args.out, spread, overwrite=args.overwrite)
    metrics = list(METRICS) if args.shares else list(PRINTED)
    for line in spread.lines(metrics):
        print(line)
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0
