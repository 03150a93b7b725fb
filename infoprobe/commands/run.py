"""``infoprobe run``: train a model and run the whole analysis into one folder."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from types import SimpleNamespace

import torch

from infoprobe.commands.argtypes import positive_int, seed_list, site_spec
from infoprobe.commands.modelargs import (
    add_model_arguments,
    add_train_arguments,
    model_config_from_args,
    train_config_from_args,
)
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
from infoprobe.pipeline.run import run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.pipeline.stages import analysis_stages


def stage_list(width: int = 86) -> str:
    """The stages of a run folder and their outputs, in order, as ``run`` runs them (read
    from :func:`~infoprobe.pipeline.stages.analysis_stages` itself, so the help cannot drift)."""
    folder = SimpleNamespace(path=Path("OUT"), progress=False)
    stages = analysis_stages(folder, Path("OUT/checkpoint"), {}, RunSettings())  # type: ignore[arg-type]
    entries = ["train\xa0(checkpoint/)"]
    for stage in stages:
        outputs = [*stage.also_writes, stage.output + ("" if "." in stage.output else "/")]
        entries.append(f"{stage.name}\xa0({', '.join(outputs)})")  # \xa0: kept on one line
    text = textwrap.fill(" -> ".join(entries), width, initial_indent="  ", subsequent_indent="  ")
    return text.replace("\xa0", " ")


EPILOG = f"""\
stages (each skipped when its output exists with the same settings, so re-running the
same command resumes; a folder made with other settings is refused unless --overwrite):
{stage_list()}
flow and flow-control run on the probes' test samples; report/report.html is the report.

examples:
  infoprobe run --task intrinsic-dim --D 2 --T 16 --heads 2,2 --lr 5e-3 --warmup 1000 \\
      --init-gain 0.5 --steps 10000 --out runs/id-2-2
  infoprobe run --task fixed-positions --heads 1 --steps 3000 --out runs/fp
Decodable is not the same as used: a probe shows what can be read from a state, not
what the network reads from it.
"""


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the stages after training (shared with probe-checkpoint)."""
    d = RunSettings()
    g = parser.add_argument_group("analysis", "cache, probes, comparison")
    g.add_argument(
        "--n-cache",
        type=positive_int,
        default=d.n_cache,
        help="samples cached and probed (default: %(default)s)",
    )
    g.add_argument(
        "--sites",
        type=site_spec,
        default=d.sites,
        help="hook sites to cache (default: %(default)s; see infoprobe cache --help)",
    )
    g.add_argument(
        "--probe",
        choices=("linear", "mlp", "query"),
        default=d.probe,
        help="probe family for the position probes: linear (ridge), mlp, or query (one "
        "MLP per state, conditioned on the position: per-sample errors) (default: %(default)s)",
    )
    g.add_argument(
        "--cache-batch",
        type=positive_int,
        default=d.batch_size,
        help="samples per forward pass when caching (default: %(default)s)",
    )
    g.add_argument(
        "--no-rollout",
        dest="rollout",
        action="store_false",
        help="do not compare attention rollout beside InfoFlow",
    )
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="redo stages whose outputs were made with other settings",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bars")


def run_settings_from_args(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        n_cache=args.n_cache,
        sites=args.sites,
        probe=args.probe,
        batch_size=args.cache_batch,
        rollout=args.rollout,
        device=getattr(args, "device", "cpu"),
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="train, cache, probe, predict, compare and report in one folder",
        description="The main job: train a model on a task, cache its activations, probe "
        "which input positions each token's state decodes (with a random-init "
        "control), predict the InfoFlow sets on the same samples, compare, and "
        "write report/report.html.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_task_arguments(p)
    add_model_arguments(p)
    add_train_arguments(p)
    add_analysis_arguments(p)
    p.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        metavar="S1,S2,..",
        help="train these seeds together as one batched ensemble (OUT/seeds/) and analyse "
        "the one with the best validation NMSE (replaces --seed)",
    )
    p.add_argument("--out", required=True, help="run folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    task = task_from_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    summary = run_pipeline(
        args.out,
        task,
        model_config_from_args(args, task),
        train_config_from_args(args),
        run_settings_from_args(args),
        seeds=args.seeds,
        overwrite=args.overwrite,
        progress=not args.quiet,
        log=print,
    )
    print("\n".join(summary.lines()))
    return 0
