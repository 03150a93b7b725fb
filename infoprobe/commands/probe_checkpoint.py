"""``infoprobe probe-checkpoint``: the analysis stages of ``run`` on an existing checkpoint."""

from __future__ import annotations

import argparse

from infoprobe.commands.argtypes import add_trust_argument
from infoprobe.commands.run import add_analysis_arguments, run_settings_from_args
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
from infoprobe.pipeline.run import probe_checkpoint

EPILOG = """\
examples:
  infoprobe probe-checkpoint runs/id-2-2/checkpoint --out runs/id-2-2-probed
  infoprobe probe-checkpoint my-ckpt --task intrinsic-dim --D 2 --T 16 --out runs/mine
The checkpoint is read in place. --task is only needed for a checkpoint whose
checkpoint.json records no task; it is then copied into OUT/checkpoint with the task.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe-checkpoint",
        help="cache, probe, predict, compare and report an existing checkpoint",
        description="Probe a trained checkpoint: cache its activations, probe which input "
        "positions each token decodes (with a random-init control), predict the "
        "InfoFlow sets on the same samples, compare, write report/report.html.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", help="checkpoint folder (model.safetensors + checkpoint.json)")
    p.add_argument("--out", required=True, help="run folder")
    add_task_arguments(p, required=False)
    add_analysis_arguments(p, device=True)
    add_trust_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    task = task_from_args(args) if args.task else None
    summary = probe_checkpoint(
        args.checkpoint,
        args.out,
        run_settings_from_args(args),
        task=task,
        overwrite=args.overwrite,
        progress=not args.quiet,
        log=print,
        trust_code=args.trust_code,
    )
    print("\n".join(summary.lines()))
    return 0
