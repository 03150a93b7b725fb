"""``infoprobe run``: train a model and run the whole analysis into one folder."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from types import SimpleNamespace

from infoprobe.commands import summary
from infoprobe.commands.argtypes import add_resume_arguments, resume_from_args, seed_list
from infoprobe.commands.modelargs import (
    add_model_arguments,
    add_train_arguments,
    model_config_from_args,
    train_config_from_args,
)
from infoprobe.commands.runtimeargs import runtime_from_args
from infoprobe.commands.settingsargs import add_settings_arguments, settings_from_args
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
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
With --probe mlp, query or critic a stage probe-linear (probes-linear.h5) follows probe:
the linear probe, compared beside as "decodability (linear probe)" (--no-linear-beside
skips it).

examples:
  infoprobe run --task intrinsic-dim --D 2 --T 16 --heads 2,2 --lr 5e-3 --warmup 1000 \\
      --init-gain 0.5 --steps 10000 --out runs/id-2-2
  infoprobe run --task fixed-positions --heads 1 --steps 3000 --out runs/fp
Decodable is not the same as used: a probe shows what can be read from a state, not
what the network reads from it.
"""


ANALYSIS_OPTIONS = (
    "n_cache",
    "sites",
    "probe",
    "linear_beside",
    "batch_size",
    "rollout",
    "null_q",
)
"""The RunSettings fields that are options of ``run`` and ``probe-checkpoint`` (the device
is ``run``'s training device, or ``probe-checkpoint``'s own option)."""


def add_analysis_arguments(parser: argparse.ArgumentParser, *, device: bool = False) -> None:
    """Options of the stages after training, generated from :class:`RunSettings` (shared
    with probe-checkpoint; ``device``: also RunSettings' ``--device``)."""
    g = parser.add_argument_group("analysis", "cache, probes, comparison")
    add_settings_arguments(g, RunSettings, only=(*ANALYSIS_OPTIONS, *(("device",) * device)))
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="redo stages whose outputs were made with other settings",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bars")


def run_settings_from_args(args: argparse.Namespace) -> RunSettings:
    """The RunSettings of the parsed options (the device: ``--device``, training's on ``run``)."""
    return settings_from_args(RunSettings, args)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help=summary("run"),
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
    add_resume_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.pipeline.run import run_pipeline

    task = task_from_args(args)
    runtime_from_args(args).apply()
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
        resume=resume_from_args(args),
    )
    print("\n".join(summary.lines()))
    return 0
