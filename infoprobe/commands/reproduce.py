"""``infoprobe reproduce``: re-run one of the paper's claims and set InfoFlow beside it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from infoprobe.commands import summary
from infoprobe.commands.argtypes import (
    add_resume_arguments,
    positive_int,
    resume_from_args,
    seed_count,
)
from infoprobe.commands.settingsargs import DeviceSetting, add_settings_arguments
from infoprobe.reproduce.claims import CLAIMS

DESCRIPTION = """\
Re-run the evidence for one of the InfoFlow paper's claims: a sweep of independent
training runs (grid points x seeds), each trained from scratch. For every grid point the
table shows InfoFlow's prediction for that architecture (verdict, exponent alpha(T) of
the parameter cost eps^-alpha, minimum heads) next to the measured validation NMSE:
the best over seeds (the paper's statistic) and every seed.

Claims:
  intrinsic-dim     sum of D pairwise maxima; (h1,h2) = (D,D) vs one head fewer
  triangle          order-3 comparison; NMSE rises towards 1 with T
  depth-separation  pairwise minimum, 1 layer vs 2 layers at matched parameter counts
  fixed-positions   x(1)+x(2)+x(3): CLS attention settles near 1/3 on each position
  argmax-probe      a linear probe recovers x at the most attended key, not the second
  head-count        single-layer D-retrieval: h >= D heads needed
  cost-law          the cost law as a rate: log NMSE against log parameters over FFN
                    widths, fitted slopes beside -2/alpha (see `infoprobe rates`)

Profiles: 'quick' is sized for a 2-core CPU (<= about 30 min per claim) and prints where
it departs from the paper (e.g. lr 2e-3 instead of 1e-3, T=16 instead of 64); 'paper'
uses the paper's sizes, for a GPU (--device cuda) or a patient CPU.

Resumable: each finished run writes OUT/runs/<run_id>/record.json (and its checkpoint);
an unfinished run keeps its state in OUT/runs/<run_id>/state.safetensors every
--state-every steps. Re-running the same command skips finished runs and continues the
unfinished ones from their states; --budget-minutes M stops every run at its first state
after M minutes, so a study runs as a series of pieces (docs/reproduction.md).
Outputs: OUT/results.json (every run: config, seed, NMSE history, times), OUT/*.png,
OUT/report.html, and the table printed here.
"""

EPILOG = """\
examples:
  infoprobe reproduce intrinsic-dim                      # quick profile, local processes
  infoprobe reproduce triangle --seeds 3 --out runs/tri
  infoprobe reproduce argmax-probe --profile paper --device cuda
  infoprobe reproduce intrinsic-dim --profile paper --estimate   # how long? (trains nothing)
  infoprobe reproduce cost-law --estimate                 # the rate study: how long?
  infoprobe reproduce head-count --backend ray           # a local Ray instance
  infoprobe reproduce head-count --backend ray --ray-address ray://head:10001 --threads 2

Scaling out: --backend local runs --workers processes with --threads torch threads each
(default: one process per core, one thread each); --backend ray submits each run as a Ray
task (pip install 'infoprobe[ray]'); records come back to this machine."""
EXIT_FAILURE = (
    "a run failed, or an acceptance check of the profile failed or could not be measured "
    "([n/a]: nothing to compare; thresholds fixed in infoprobe/reproduce/claims/ before any run)"
)
"""What exit status 1 means (infoprobe.cli.EXIT_STATUS)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help=summary("reproduce"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("claim", choices=list(CLAIMS), metavar="CLAIM", help="which claim to re-run")
    p.add_argument(
        "--profile",
        choices=sorted({name for claim in CLAIMS.values() for name in claim.profiles}),
        default="quick",
        help="quick: 2-core CPU sizes; paper: the paper's sizes; headline (intrinsic-dim "
        "only): the paper profile's D=2 cell at T=64; separation-pilot (cost-law only): "
        "the first points of the T=32 capacity sweep (default: quick)",
    )
    p.add_argument(
        "--seeds",
        type=seed_count,
        default=None,
        help="seeds per grid point (default: the profile's)",
    )
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="default: local")
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="address of an existing Ray cluster (default: start a local Ray)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="local processes (default: fit the cores)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch threads (Ray: CPUs) per run (default: cores / workers; Ray: 1)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder (default: reproduce/CLAIM/PROFILE)",
    )
    add_settings_arguments(p, DeviceSetting)
    p.add_argument(
        "--ensemble",
        type=positive_int,
        default=1,
        metavar="M",
        help="train up to M runs of the same shape (seeds of one config, or configs that "
        "differ only in learning rate and such) as one batched ensemble per worker; "
        "each run keeps its own record and checkpoint (default: 1, every run alone)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the training steps (a one-off cost per worker and shape; "
        "faster steps after it)",
    )
    p.add_argument("--no-figures", action="store_true", help="skip the PNGs and report.html")
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="time a few steps of each config on this machine and print the projected "
        "wall time of the sweep (local plan: --workers x --threads); trains nothing",
    )
    add_resume_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.reproduce import SweepError, estimate, reproduce

    if args.estimate:
        print(estimate(args.claim, **_sweep_options(args)).table())
        return 0
    try:
        result = reproduce(
            args.claim,
            **_sweep_options(args),
            backend=args.backend,
            ray_address=args.ray_address,
            out=args.out,
            figures=not args.no_figures,
            resume=resume_from_args(args),
        )
    except SweepError as err:
        print(f"infoprobe reproduce: error: {err}", file=sys.stderr)
        return 1
    print()
    print(result.summary())
    print()
    print(f"results: {result.results_path}")
    if result.report_path is not None:
        print(f"report:  {result.report_path}")
    # An acceptance check that failed, or that could not be measured, is not accepted.
    failed = [c for c in result.results["checks"] if c["gate"] and c["passed"] is not True]
    return 1 if failed else 0


def _sweep_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options a sweep and its estimate share."""
    return {
        "profile": args.profile,
        "seeds": args.seeds,
        "workers": args.workers,
        "threads": args.threads,
        "device": args.device,
        "ensemble": args.ensemble,
        "compile": args.compile,
        "log": None if args.quiet else lambda line: print(line, flush=True),
    }
