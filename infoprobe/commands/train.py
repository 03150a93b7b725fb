"""``infoprobe train``: train a model on one of the paper's tasks and write a checkpoint."""

from __future__ import annotations

import argparse
import sys

from infoprobe.base.atomic import OutputExistsError
from infoprobe.base.errors import UsageError
from infoprobe.commands import summary
from infoprobe.commands.argtypes import add_resume_arguments, resume_from_args, seed_list
from infoprobe.commands.modelargs import (
    add_model_arguments,
    add_train_arguments,
    model_config_from_args,
    train_config_from_args,
)
from infoprobe.commands.runtimeargs import runtime_from_args
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
from infoprobe.model_config import ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.config import NonFiniteLossError, TrainConfig
from infoprobe.train.convergence import describe

EXAMPLES = """examples:
  infoprobe train --task intrinsic-dim --D 2 --T 16 --heads 2,2 --lr 5e-3 --warmup 1000 \\
      --init-gain 0.5 --steps 10000 --out runs/id-2-2
  infoprobe train --task fixed-positions --heads 1 --pos-encoding learned --out runs/fp
  infoprobe train --task triangle --T 8 --heads 2,2 --E 24 --steps 3000 --out runs/tri
  infoprobe train --task intrinsic-dim --D 2 --T 16 --heads 2,2 --lr 5e-3 --warmup 1000 \\
      --init-gain 0.5 --steps 10000 --seeds 0,1,2,3 --out runs/id-seeds

The first and last examples use the recipe the demo trains with (lr 5e-3, warm-up 1000,
weights at half the LeCun scale; docs/model.md); the defaults are the paper's.

With --seeds the seeds train together as one batched ensemble (each with its own data,
optimiser and best model, as if trained alone) and --out becomes a folder with one
checkpoint per seed (seed-0/, seed-1/, ...) and summary.json (every seed's NMSE and the
best seed). Rerunning the same command keeps finished seeds and trains the rest.

An unfinished run keeps its state beside --out (OUT.state.safetensors; with --seeds,
OUT/train.state.safetensors): kill it, or stop it with --budget-minutes, and the same
command continues where it was, bit for bit on the same threads.

Without --threads, training uses the cores this process may run on (its affinity set),
fixed for the run, so a rerun gives the same model; --threads N fixes N; --threads auto
follows the cores other work leaves free (the affinity set less the load average),
re-checked at every evaluation, which can change the float sums from run to run.

The checkpoint folder holds model.safetensors and checkpoint.json (model config, task
spec, training config, NMSE history, versions, weights hash). Load it in Python with
infoprobe.load_checkpoint(path).
"""
EXIT_FAILURE = (
    "a training (one seed of --seeds) stopped on a non-finite loss; its last good model is saved"
)
"""What exit status 1 means (infoprobe.cli.EXIT_STATUS)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help=summary("train"),
        description="Train an InfoFlow Transformer (continuous inputs, CLS readout) on one of "
        "the paper's tasks. Reports validation NMSE = MSE/Var(y) as it goes.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_task_arguments(p)
    add_model_arguments(p)
    add_train_arguments(p)
    p.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        metavar="S1,S2,..",
        help="train these seeds together (replaces --seed); --out becomes a folder of "
        "checkpoints, one per seed, with summary.json",
    )
    p.add_argument("--out", required=True, help="checkpoint folder to create")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_resume_arguments(p)
    p.set_defaults(func=run)


def run_seeds(
    args: argparse.Namespace, task: Task, model_cfg: ModelConfig, cfg: TrainConfig
) -> int:
    from infoprobe.train.seeds import train_seeds

    try:
        summary = train_seeds(
            task,
            model_cfg,
            cfg,
            args.seeds,
            args.out,
            overwrite=args.overwrite,
            progress=not args.quiet,
            threads=args.threads,
            resume=resume_from_args(args),
        )
    except OutputExistsError as err:
        raise UsageError(f"{err}") from None
    print(f"task {task.name} {task.params()}  heads {list(model_cfg.heads)}  E {model_cfg.d_model}")
    diverged = []
    for seed, m in summary["members"].items():
        print(
            f"seed {seed}: validation NMSE {m['val_nmse']:.4g} (best at step "
            f"{m['best_step']}), test NMSE {m['test_nmse']:.4g}, {m['stopped']}"
        )
        if m["stopped"].startswith("non-finite"):
            diverged.append(seed)
    print(f"best seed {summary['best_seed']}: validation NMSE {summary['best_val_nmse']:.4g}")
    print(f"checkpoints and summary.json: {args.out}")
    if diverged:
        print(
            f"infoprobe train: error: seed(s) {', '.join(diverged)} stopped on a non-finite "
            "loss; their last good models were saved",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    from infoprobe.train.save import finished_run, train_and_save

    task = task_from_args(args)
    model_cfg = model_config_from_args(args, task)
    cfg = train_config_from_args(args)
    args.threads = runtime_from_args(args).thread_count  # a count, fixed; auto if asked
    if args.seeds is not None:
        return run_seeds(args, task, model_cfg, cfg)
    done = None if args.overwrite else finished_run(args.out, task, model_cfg, cfg)
    if done is not None:  # the same command after the run finished: nothing left to do
        print(
            f"{args.out} is already trained with these settings: validation NMSE "
            f"{done.get('val_nmse', float('nan')):.4g}, {describe(done.get('convergence'))}"
        )
        return 0
    try:
        result = train_and_save(
            task,
            model_cfg,
            cfg,
            args.out,
            overwrite=args.overwrite,
            progress=not args.quiet,
            threads=args.threads,
            resume=resume_from_args(args),
        )
    except OutputExistsError as err:
        raise UsageError(f"{err}") from None
    except NonFiniteLossError as err:
        print(
            f"infoprobe train: error: {err}; the last good model was saved to {args.out}",
            file=sys.stderr,
        )
        return 1
    print(f"task {task.name} {task.params()}  heads {list(model_cfg.heads)}  E {model_cfg.d_model}")
    print(
        f"validation NMSE {result.val_nmse:.4g} (best at step {result.best_step}), "
        f"test NMSE {result.test_nmse:.4g}, {result.seconds:.0f} s; "
        f"{describe(result.metrics()['convergence'])}"
    )
    print(f"checkpoint: {args.out}")
    return 0
