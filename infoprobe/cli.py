"""The ``infoprobe`` command: one subcommand per module in ``infoprobe/commands/``.

Each command module exposes ``register(subparsers)``; its parser sets
``func=run`` where ``run(args) -> int`` is the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import infoprobe.commands as commands_package
from infoprobe import __version__

# The order users meet the commands in (the pipeline's order); others follow.
ORDER = [
    "demo",
    "run",
    "probe-checkpoint",
    "train",
    "predict",
    "cache",
    "probe",
    "compare",
    "report",
    "reproduce",
]
HELPER_MODULES = {"taskargs", "modelargs"}


def command_modules() -> list:
    """Import every command module of ``infoprobe.commands``."""
    names = [m.name for m in pkgutil.iter_modules(commands_package.__path__)]
    return [
        importlib.import_module(f"infoprobe.commands.{n}")
        for n in sorted(names)
        if n not in HELPER_MODULES
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infoprobe",
        description=(
            "Probe which input positions each Transformer token can access, and compare the "
            "observed information sets with the InfoFlow prediction.\n\n"
            "Pipeline: train -> cache -> probe -> predict -> compare -> report "
            "(`infoprobe run` chains them; `infoprobe demo` is a curated small run)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `infoprobe COMMAND --help` for each command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"infoprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in command_modules():
        module.register(sub)
    rank = {name: i for i, name in enumerate(ORDER)}
    sub._choices_actions.sort(key=lambda a: rank.get(a.dest, len(ORDER)))
    return parser


def is_user_error(err: BaseException) -> bool:
    """Errors infoprobe raises about bad input: shown as one line, no traceback."""
    return isinstance(err, ValueError | FileExistsError | FileNotFoundError) and type(
        err
    ).__module__.startswith("infoprobe")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as err:
        if not is_user_error(err):
            raise
        print(f"infoprobe {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
