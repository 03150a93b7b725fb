"""Command-line options for choosing a task and its parameters (shared by every command).

Each parameter any registered task declares (built-in, registered from Python, or from
an entry point of group ``infoprobe.tasks``; listing the tasks imports those once) becomes
one option (``--T 16 --D 2``) whose type follows its default
(:func:`infoprobe.tasks.checks.cli_kind`); the task's own ``seed`` is ``--task-seed`` so
it never clashes with a training seed. Only the options a user gives are passed on, so
each task keeps its own defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from infoprobe.base.errors import UsageError
from infoprobe.commands.argtypes import finite_float, seed
from infoprobe.tasks import TASKS, Task, TaskError, discover_plugins, make_task, task_class
from infoprobe.tasks.checks import cli_kind, field_default

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


CONVERTERS = {
    "bool": (_parse_bool, "BOOL"),
    "ints": (_parse_ints, "I,J,.."),
    "float": (finite_float, "FLOAT"),
    "str": (str, "TEXT"),
    "int": (int, "INT"),
}
"""Option kind (:func:`infoprobe.tasks.checks.cli_kind`) -> (argparse type, metavar)."""


def _converter(default: Any):
    return CONVERTERS[cli_kind(default) or "int"]


def _task_name(text: str) -> str:
    """``--task``'s type: a task whose entry point failed says why, before other errors."""
    if text not in TASKS and text in discover_plugins():
        try:
            task_class(text)
        except TaskError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return text


def task_parameters() -> dict[str, tuple[Any, list[str]]]:
    """Every task parameter name → (an example default, names of tasks using it)."""
    params: dict[str, tuple[Any, list[str]]] = {}
    for name, cls in TASKS.items():
        for f in dataclasses.fields(cls):
            if f.name == "seed":
                continue
            default = field_default(f)
            default = 0 if default is dataclasses.MISSING else default
            params.setdefault(f.name, (default, []))[1].append(name)
    return params


def add_task_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Add ``--task`` and one option per task parameter to ``parser``."""
    group = parser.add_argument_group(
        "task",
        "the task and its parameters (unset parameters keep the task's defaults; "
        "see docs/tasks.md)",
    )
    failed = discover_plugins()
    unavailable = f"; unavailable (their entry points failed): {', '.join(sorted(failed))}"
    group.add_argument(
        "--task",
        required=required,
        type=_task_name,
        choices=sorted(TASKS),
        help="task name" + (unavailable if failed else ""),
    )
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
    cls = task_class(args.task)
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
