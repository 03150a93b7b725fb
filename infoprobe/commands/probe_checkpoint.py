"""``infoprobe probe-checkpoint``: the analysis stages of ``run`` on an existing checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from infoprobe.base.errors import UsageError
from infoprobe.commands import summary
from infoprobe.commands.argtypes import add_trust_argument
from infoprobe.commands.cache import add_inputs_arguments
from infoprobe.commands.run import add_analysis_arguments, run_settings_from_args
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
from infoprobe.pipeline.stages import DataFiles

EPILOG = """\
examples:
  infoprobe probe-checkpoint runs/id-2-2/checkpoint --out runs/id-2-2-probed
  infoprobe probe-checkpoint my-ckpt --task intrinsic-dim --D 2 --T 16 --out runs/mine
The checkpoint is read in place. --task is only needed for a checkpoint whose
checkpoint.json records no task; it is then copied into OUT/checkpoint with the task.
A model of your own data (a checkpoint saved with no task) takes its samples from a
file, --inputs x.npy, and the sets to compare with from another, --sets SETS.npy
(bool [L+1, n, T+1, T] over the inputs' first n rows, as for the sets command).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe-checkpoint",
        help=summary("probe-checkpoint"),
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
    add_runtime_arguments(p)
    add_trust_argument(p)
    add_inputs_arguments(p, "--n-cache")
    p.add_argument(
        "--sets",
        metavar="SETS",
        default=None,
        help="compare with these sets instead of InfoFlow's: bool [L+1, n, T+1, T] over the "
        "cached samples (.npy, or 'sets' in .h5); needed for a checkpoint with no task",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.pipeline.run import probe_checkpoint

    runtime_from_args(args).apply()
    if args.targets is not None and args.inputs is None:
        raise UsageError("--targets needs --inputs (the targets of those inputs)")
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
        data=DataFiles(
            *(None if v is None else Path(v) for v in (args.inputs, args.targets, args.sets))
        ),
    )
    print("\n".join(summary.lines()))
    return 0
