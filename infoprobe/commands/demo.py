"""``infoprobe demo``: a (D, D) model next to a (D-1, D) one, end to end, in minutes."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.settingsargs import add_settings_arguments, settings_from_args
from infoprobe.pipeline.demo_config import DemoConfig

DESCRIPTION = """\
The toolkit's point in one run (about 7 minutes on a 2-core CPU; under 5 with --probe
linear): two models on the
intrinsic-dimension task (D=2, T=16), one with (2,2) heads, which InfoFlow calls
efficient, and one with (1,2), which it calls inefficient; it prints how much worse the
one-head-short model is. Each is trained, cached,
probed and measured by flow (each with a random-init control), predicted, compared and
reported; index.html shows them side by side. Each layer's line leads with the flow AUROC
against InfoFlow's sets (random-init control in brackets), then the decodability AUROC
of the critic probe (does the state hold the sample's own x(s), wherever it came from?)
with its random-init control, and the linear probe's beside it. Decodable is not used:
a probe shows what can be read from a state, not what the network reads.
Re-running resumes; finished stages are skipped."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help=summary("demo"),
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  infoprobe demo --out runs/demo",
    )
    p.add_argument("--out", default="runs/demo", help="demo folder (default: %(default)s)")
    add_settings_arguments(p, DemoConfig, only=("steps", "n_cache", "seeds", "probe"))
    p.add_argument(
        "--sequential",
        action="store_true",
        help="train the two models one after the other (default: side by side, each with "
        "half the threads, when there are two or more on the CPU)",
    )
    p.add_argument("--overwrite", action="store_true", help="redo stages made with other settings")
    add_runtime_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.pipeline.demo import rate_line, run_demo, separation

    cfg = settings_from_args(DemoConfig, args)
    summaries, index = run_demo(
        args.out,
        cfg,
        overwrite=args.overwrite,
        parallel=not args.sequential,
        runtime=runtime_from_args(args),
    )
    print()
    for model_summary in summaries:
        print("\n".join(model_summary.lines()))
    gap = separation(summaries)
    if gap is not None:
        print(
            f"\nOne head fewer is {gap:.1f}x worse: validation NMSE of the "
            f"({cfg.D - 1},{cfg.D}) model / the ({cfg.D},{cfg.D}) model's"
        )
    print(rate_line(cfg))
    print(f"\nside by side: {index}")
    return 0
