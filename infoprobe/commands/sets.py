"""``infoprobe sets``: your own per-sample sets, in the predicted-sets format."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary

DESCRIPTION = """\
Write sets of your own (the sets another theory, or the known truth of a planted model,
gives) over the samples of an activation cache, in the format `infoprobe predict --out`
writes, so `infoprobe compare` and `infoprobe report` set the instruments against them
instead of InfoFlow's: for instance `infoprobe sets SETS.npy --cache acts.h5 --out
pred.h5`, then `infoprobe compare pred.h5 --influence flow.h5`.

SETS: bool [L+1, n, T+1, T] (layer, sample, token, data position; layer 0 the embedding,
token T the CLS token) or [L+1, n, T+1, T+1] with the CLS position, over the cache's n
samples, as .npy (read without pickle) or the dataset 'sets' of an .h5 file. Given with
data positions only, CLS is added as its own set member. The file records the sets
file's SHA-256 and the cache's provenance, so the comparison refuses other samples or
another model. The cache may hold a task's samples or inputs from a file (`infoprobe
cache --inputs`)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sets",
        help=summary("sets"),
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sets", metavar="SETS", help="bool [L+1, n, T+1, T] sets (.npy or .h5)")
    p.add_argument("--cache", required=True, metavar="ACTS.h5", help="their samples' cache")
    p.add_argument("--out", required=True, metavar="PRED.h5", help="predicted-sets file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.pipeline.given_sets import sets_for_cache

    path = sets_for_cache(args.sets, args.cache, args.out, overwrite=args.overwrite)
    print(f"sets of {args.sets} over the samples of {args.cache}: {path}")
    return 0
