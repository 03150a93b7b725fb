"""``infoprobe rates``: fit cost-law exponents from sweep results and print them beside alpha."""

from __future__ import annotations

import argparse
import json

from infoprobe.base.atomic import atomic_output
from infoprobe.base.header import make_header
from infoprobe.commands import summary
from infoprobe.commands.argtypes import positive_float
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.rates.fit import INTERVALS, NMSE_POWER, RateError

RATES_FORMAT = "infoprobe.rates"
RATES_SCHEMA_VERSION = 1
SUMMARY = "summary.json"

DESCRIPTION = """\
Fit InfoFlow's rates from a capacity sweep. For every (task, T, architecture) in the
records, fit the slope of log(best validation NMSE) against log(decoding parameters: the
last block's FFN + the readout) over every run, with an interval, and print it beside the
slope the cost law predicts, -q/alpha (NMSE ~ eps^q, q = 2 by default). Within each
(task, T) every architecture's slope is divided by that of the one with the smallest
alpha: that ratio does not depend on q, and InfoFlow predicts it to be alpha_ref/alpha.

Runs that diverged or whose NMSE is >= 0.9 (did not train) are excluded by a rule fixed
before any run, and counted. A fit needs runs at three or more widths.

RECORDS are `infoprobe reproduce` results.json files (e.g. of the cost-law claim) or
records files of a sweep trained with another tool (format in docs/rates.md)."""

EPILOG = """\
examples:
  infoprobe reproduce cost-law --profile quick
  infoprobe rates reproduce/cost-law/quick/results.json
  infoprobe rates reproduce/cost-law/quick/results.json --interval bootstrap --json
  infoprobe rates my-sweep.json --out rates-figures   # summary.json + one PNG per (task, T)

exit status: 0 fitted; 2 bad input (one line naming the file, record and field)
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rates",
        help=summary("rates"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("records", nargs="+", metavar="RECORDS", help="results or records JSON")
    parser.add_argument(
        "--level", type=positive_float, default=0.95, help="interval level (default 0.95)"
    )
    parser.add_argument(
        "--interval",
        choices=INTERVALS,
        default="t",
        help="t: the OLS t-interval (default); bootstrap: seeds resampled (>= 5 seeds)",
    )
    parser.add_argument(
        "--q",
        type=positive_float,
        default=NMSE_POWER,
        help=f"NMSE ~ eps^q, sets the predicted slope -q/alpha (default {NMSE_POWER:g})",
    )
    parser.add_argument("--json", action="store_true", help="print the fits as JSON")
    parser.add_argument(
        "--out", metavar="DIR", default=None, help="write summary.json and the figures here"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    add_runtime_arguments(parser, with_device=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.rates import fit_rates, format_rates, load_records, rate_figures

    runtime_from_args(args).apply(torch=False)
    if not 0 < args.level < 1:
        raise RateError(f"--level: expected a number in (0, 1), got {args.level}")
    records = load_records(args.records)
    table = fit_rates(records, level=args.level, interval=args.interval, q=args.q)
    summary = {
        **make_header(RATES_FORMAT, RATES_SCHEMA_VERSION),
        "inputs": list(args.records),
        **table.to_dict(),
    }
    if args.out is not None:
        from infoprobe.report.build import render_png

        figures = {name: render_png(fig) for name, fig in rate_figures(table, records).items()}
        with atomic_output(
            args.out, directory=True, overwrite=args.overwrite, kind=RATES_FORMAT, what="--out"
        ) as tmp:
            (tmp / SUMMARY).write_text(json.dumps(summary, indent=1), encoding="utf-8")
            for name, png in figures.items():
                (tmp / f"{name}.png").write_bytes(png)
    print(json.dumps(summary, indent=1) if args.json else format_rates(table))
    if args.out is not None and not args.json:
        print(f"figures and summary.json: {args.out}")
    return 0
