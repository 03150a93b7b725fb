"""``infoprobe spread``: one comparison over several training seeds, side by side."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary

DESCRIPTION = """\
Set the comparisons of several runs of one task and one architecture side by side: per
instrument and layer, each run's AUROC against InfoFlow's sets with its within-model
interval, and the spread over the runs (n, mean, sample standard deviation, min, max).

The interval in a run's comparison is a bootstrap over the compared samples of that one
trained model: it says how precisely that model's AUROC is measured, not how much it moves
when the same architecture is trained again with another seed. A claim about one trained
model rests on its within-model interval; a claim about the architecture rests on the
spread over seeds.

Each RUN is a run folder holding comparison.json (`infoprobe run`, `infoprobe
probe-checkpoint`) or a comparison file (`infoprobe compare --out`), schema 4. All must
come from one task, one architecture and one layer count, compare the same instruments,
and analyse different trained models. `infoprobe run --seeds S1,S2,..` trains every seed,
keeps each checkpoint in RUN/seeds/seed-S and analyses only the best one (its number:
`best_seed` in RUN/seeds/summary.json); probe each other seed into its own folder with
`infoprobe probe-checkpoint RUN/seeds/seed-S --out FOLDER`, then give RUN and those
folders to `infoprobe spread`. Numbers are read from the files, nothing is recomputed;
own positions are left out, as in the headline (docs/report.md, "Spread over seeds")."""

EPILOG = """\
examples (RUN analyses its best seed, say 0; probe the other two):
  infoprobe run --task intrinsic-dim --D 2 --T 16 --heads 2,2 --seeds 0,1,2 --out RUN
  infoprobe probe-checkpoint RUN/seeds/seed-1 --out RUN-1
  infoprobe probe-checkpoint RUN/seeds/seed-2 --out RUN-2
  infoprobe spread RUN RUN-1 RUN-2
  infoprobe spread RUN RUN-1 RUN-2 --shares --out SPREAD.json
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
        "runs", nargs="+", metavar="RUN", help="run folder (or comparison.json); 2 or more"
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.compare.spread import METRICS, PRINTED, seed_spread, write_spread

    spread = seed_spread(args.runs)
    if args.out is not None:
        write_spread(args.out, spread, overwrite=args.overwrite)
    metrics = list(METRICS) if args.shares else list(PRINTED)
    for line in spread.lines(metrics):
        print(line)
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0
