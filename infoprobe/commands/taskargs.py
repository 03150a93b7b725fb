"""Command-line options for choosing a task and its parameters (shared by every command).

Each parameter any registered task declares becomes one option (``--T 16 --D 2``);
the task's own ``seed`` is ``--task-seed`` so it never clashes with a training seed.
Only the options a user gives are passed on, so each task keeps its own defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from infoprobe.base.errors import UsageError
from infoprobe.commands.argtypes import finite_float, seed
from infoprobe.tasks import TASKS, Task, make_task

TASK_SEED = "task_seed"


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _parse_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _converter(default: Any):
    if isinstance(default, bool):
        return _parse_bool, "BOOL"
    if isinstance(default, tuple):
        return _parse_ints, "I,J,.."
    if isinstance(default, float):
        return finite_float, "FLOAT"
    return int, "INT"


def task_parameters() -> dict[str, tuple[Any, list[str]]]:
    """Every task parameter name → (an example default, names of tasks using it)."""
    params: dict[str, tuple[Any, list[str]]] = {}
    for name, cls in TASKS.items():
        for f in dataclasses.fields(cls):
            if f.name == "seed":
                continue
            default = f.default if f.default is not dataclasses.MISSING else 0
            params.setdefault(f.name, (default, []))[1].append(name)
    return params


def add_task_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add ``--task`` and one option per task parameter to ``parser``."""
    group = parser.add_argument_group(
        "task",
        "the task and its parameters (unset parameters keep the task's defaults; "
        "see docs/tasks.md)",
    )
    group.add_argument("--task", required=required, choices=sorted(TASKS), help="task name")
    for pname, (default, users) in task_parameters().items():
        convert, metavar = _converter(default)
        group.add_argument(
            f"--{pname}",
            type=convert,
            metavar=metavar,
            default=None,
            help=f"used by {', '.join(users)}",
        )
    group.add_argument(
        "--task-seed",
        dest=TASK_SEED,
        type=seed,
        default=None,
        metavar="INT",
        help="seed of the task's own random parameters (e.g. the A_i)",
    )


def task_from_args(args: argparse.Namespace) -> Task:
    """Build the task named by ``args.task`` from the parameters the user set."""
    cls = TASKS[args.task]
    params = {}
    for f in dataclasses.fields(cls):
        key = TASK_SEED if f.name == "seed" else f.name
        value = getattr(args, key, None)
        if value is not None:
            params[f.name] = value
    given = {p for p in task_parameters() if getattr(args, p, None) is not None}
    unused = sorted(given - set(params))
    if unused:
        valid = [f.name for f in dataclasses.fields(cls) if f.name != "seed"]
        raise UsageError(f"task {args.task} has no parameter(s) {unused}; its parameters: {valid}")
    return make_task(args.task, **params)
