"""``infoprobe report``: a folder with summary.json, PNG figures and one report.html."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary
from infoprobe.commands.argtypes import non_negative_int
from infoprobe.commands.compare import add_source_arguments, print_comparison, sources_from_args
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args

DESCRIPTION = """\
Write a report folder: summary.json (every number and the provenance of every input
file), one PNG per figure, and report.html, a single self-contained page (figures
embedded) that opens in a browser without a server. It shows every instrument (flow from
--influence files, decodability from PROBES.h5) against InfoFlow: the headline AUROC per
layer with controls beside, the flow x decodability table per sample, the observed
program per head (needs --cache), a grid per instrument with InfoFlow's predicted
membership and the violations marked, the CLS row across layers, a per-sample view
(predicted vs observed sets beside each head's attention; needs --cache), agreement as
the threshold τ moves, and the training curve (needs --checkpoint). With --rollout,
attention rollout is shown beside InfoFlow.

The folder is built under OUT.tmp-<pid> and renamed when complete. Check it in a real
browser with: python -m infoprobe.report.browser_check OUT"""

EPILOG = """\
examples, in a folder written by `infoprobe run` (or one of the demo's, such as
runs/demo/heads-2-2), which holds these files and the checkpoint in checkpoint/:
  infoprobe report pred.h5 probes.h5 --influence flow.h5 --out my-report
  infoprobe report pred.h5 probes.h5 --influence flow.h5 --influence flow-random-init.h5 \\
      --cache acts.h5 --checkpoint checkpoint --rollout --out my-report-full
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help=summary("report"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(parser)
    add_runtime_arguments(parser, with_device=False)
    parser.add_argument("--out", metavar="DIR", required=True, help="report folder to write")
    parser.add_argument(
        "--checkpoint", metavar="CKPT", default=None, help="checkpoint folder: training curve"
    )
    parser.add_argument(
        "--samples",
        type=non_negative_int,
        default=3,
        metavar="K",
        help="per-sample views of the first K test samples (default 3; attention: --cache)",
    )
    parser.add_argument("--title", default=None, help="page title")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.compare.sources import checkpoint_history, compare_sources
    from infoprobe.report.build import from_sources, write_report

    runtime_from_args(args).apply()
    rollout, sources = sources_from_args(args, want_patterns=args.cache is not None)
    history, extra = [], {}
    if args.checkpoint is not None:
        history, ckpt_prov = checkpoint_history(args.checkpoint, sources)
        extra[f"checkpoint ({args.checkpoint})"] = ckpt_prov
        code = ckpt_prov.get("model_code")
        if code is not None:  # said, never run: the report reads the checkpoint's JSON only
            print(
                f"checkpoint {args.checkpoint} names model code {code['factory']!r} "
                f"({', '.join(code['files']) or 'no file found'}; model code SHA-256 "
                f"{code['model_code_sha256'][:16]}…): read for its training curve, not run"
            )
    compared = compare_sources(sources, rollout, null_q=args.null_q)
    inputs = from_sources(
        sources,
        compared,
        history=history,
        n_sample_views=args.samples,
        title=args.title,
        extra_provenance=extra,
    )
    path = write_report(args.out, inputs, overwrite=args.overwrite)
    print_comparison(compared)
    print(f"report: {path}")
    return 0
