"""The ``infoprobe`` command: one subcommand per module in ``infoprobe/commands/``.

Each command module exposes ``register(subparsers)``; its parser sets
``func=run`` where ``run(args) -> int`` is the exit code. Modules without
``register`` (shared option helpers such as ``argtypes``) are not commands.
``infoprobe CMD ...`` imports only CMD's module (:data:`~infoprobe.commands.COMMANDS`
names it); ``--version`` and ``--help`` import none, so they answer at once.

Exit status (:data:`EXIT_STATUS`, printed at the end of every command's ``--help``): 0
success; 1 a command ran but its result failed (what that means is the command module's
``EXIT_FAILURE``: a diverged training run, a failed acceptance check), or a bug (a
traceback); 2 bad input (a :class:`~infoprobe.base.errors.UserError`, a value a library
refused, a file or memory problem), reported as one line ``infoprobe CMD: error: ...`` on
stderr (see :func:`is_user_error`); 130 interrupted (Ctrl-C). Output piped into a reader
that stops early (``| head``) ends quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import textwrap
import threading
from types import ModuleType
from typing import Any

import infoprobe.commands as commands_package
from infoprobe import __version__
from infoprobe.base.allocator import keep_freed_memory
from infoprobe.base.errors import UserError
from infoprobe.commands import COMMANDS
from infoprobe.train.budget import BUDGET_EXIT, BudgetStop

# The order users meet the commands in (the pipeline's order); others follow.
# A name here whose module does not exist is simply never matched.
ORDER = list(COMMANDS)
HELPER_MODULES = {"taskargs", "modelargs", "argtypes"}
LIBRARY_PACKAGES = ("torch", "numpy", "h5py", "safetensors")
"""Libraries whose ValueErrors report a value they were given, not a fault of their own."""
INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""
TERMINATED = 143
"""Exit status after SIGTERM (128 + SIGTERM)."""
EXIT_STATUS = {
    0: "success",
    1: "{failure}",
    2: "bad input: one line `{prog}: error: ...` on stderr, and no file written or changed",
    INTERRUPTED: "interrupted (Ctrl-C)",
    TERMINATED: "terminated (SIGTERM); like Ctrl-C, temporary files are removed",
}
"""Exit status -> its meaning, for every command (``{failure}``: the module's
``EXIT_FAILURE``, or :data:`NO_FAILURE`)."""
BUDGET_STATUS = (
    "stopped by --budget-minutes at a state: the line `{prog}: stopped at step k of N after M "
    "minutes; run the same command to continue` is printed, and the same command continues "
    "from the state"
)
"""Status :data:`~infoprobe.train.state.BUDGET_EXIT` of a command with a time budget."""
NO_FAILURE = "an internal error, printed with its traceback (please report it)"
"""Status 1 of a command whose result cannot fail (no ``EXIT_FAILURE``)."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: ``PROG: error: MESSAGE``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def command_modules() -> list[ModuleType]:
    """Import every command module of ``infoprobe.commands`` (modules with ``register``)."""
    names = [m.name for m in pkgutil.iter_modules(commands_package.__path__)]
    modules = [
        importlib.import_module(f"infoprobe.commands.{n}")
        for n in sorted(names)
        if n not in HELPER_MODULES
    ]
    return [m for m in modules if callable(getattr(m, "register", None))]


def exit_status_text(prog: str, failure: str | None, budget: bool = False) -> str:
    """The ``exit status:`` paragraph of ``prog``'s help, from :data:`EXIT_STATUS` (and
    :data:`BUDGET_STATUS` for a command that takes ``--budget-minutes``)."""
    failure = NO_FAILURE if failure is None else f"{failure}; or {NO_FAILURE}"
    table = {**EXIT_STATUS, **({BUDGET_EXIT: BUDGET_STATUS} if budget else {})}
    lines = [
        textwrap.fill(f"{code:<4}{text.format(prog=prog, failure=failure)}", 86,
                      initial_indent="  ", subsequent_indent="      ")
        for code, text in sorted(table.items())
    ]  # fmt: skip
    return "exit status:\n" + "\n".join(lines)


def _add_exit_status(
    parser: argparse.ArgumentParser,
    failure: str | None,
    prog: str | None = None,
    budget: bool = False,
) -> None:
    """Append the exit-status paragraph to ``parser``'s epilog and its subcommands' (whose
    errors are reported under the command's ``prog``)."""
    prog = prog or parser.prog
    budget = budget or any("--budget-minutes" in a.option_strings for a in parser._actions)
    epilog = (parser.epilog or "").rstrip("\n")
    parser.epilog = (epilog + "\n\n" if epilog else "") + exit_status_text(prog, failure, budget)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action._name_parser_map.values()):
                _add_exit_status(child, failure, prog)


def build_parser(modules: list[ModuleType] | None = None) -> argparse.ArgumentParser:
    """The ``infoprobe`` parser with the subcommands of ``modules`` (default: every command
    module). Given ``modules``, every other command of :data:`COMMANDS` is listed by its
    summary alone (its options unknown), so the top-level help needs no module."""
    parser = OneLineParser(
        prog="infoprobe",
        description=(
            "Probe which input positions each Transformer token can access, and compare the "
            "observed information sets with the InfoFlow prediction.\n\n"
            "Pipeline: train -> cache (and its random-init control) -> probe (decodability) "
            "-> flow and flow control (`infoprobe influence`) -> predict -> compare -> report "
            "(`infoprobe run` chains them; `infoprobe demo` is a curated small run).\n\n"
            "Trust: a checkpoint of your own model names its factory (model_config.factory), "
            "code that building the model runs. cache, influence and probe-checkpoint run it "
            "only with --trust-code and refuse such a checkpoint otherwise, before importing "
            "anything; report --checkpoint reads checkpoint.json and never runs it. "
            "infoprobe's own checkpoints hold no code (safetensors weights and JSON)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `infoprobe COMMAND --help` for each command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"infoprobe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in command_modules() if modules is None else modules:
        before = set(sub.choices)
        module.register(sub)
        for name in sorted(set(sub.choices) - before):
            _add_exit_status(sub.choices[name], getattr(module, "EXIT_FAILURE", None))
    if modules is not None:
        for name, command in COMMANDS.items():
            if name not in sub.choices:
                sub.add_parser(name, help=command.summary, add_help=False)
    rank = {name: i for i, name in enumerate(ORDER)}
    sub._choices_actions.sort(key=lambda a: rank.get(a.dest, len(ORDER)))
    return parser


def _raised_in_library(err: BaseException) -> bool:
    """Whether the innermost Python frame that raised ``err`` belongs to a library of
    :data:`LIBRARY_PACKAGES` (a C function called straight from infoprobe code counts as
    infoprobe's)."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return module.split(".")[0] in LIBRARY_PACKAGES


def _out_of_memory(err: BaseException) -> bool:
    if isinstance(err, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    # torch's CPU allocator raises RuntimeError("... can't allocate memory ...").
    return isinstance(err, RuntimeError) and "allocate memory" in str(err)


def is_user_error(err: BaseException) -> bool:
    """Whether ``err`` is about the user's input or machine (one line) or a bug (traceback).

    The rule:

    * :class:`~infoprobe.base.errors.UserError` and its subclasses (``UsageError``,
      ``CheckpointError``, ``CacheError``, ``ProbeError``, ``TaskError``, ...): infoprobe's
      own input checks. Every ``ValueError`` subclass infoprobe defines is one.
    * ``ValueError`` raised inside torch, numpy, h5py or safetensors code: the library
      rejected a value it was handed.
    * ``OSError`` and its subclasses (no such file, permission denied, disk full, a file
      h5py cannot open because it is not HDF5, ...): the files and folders named.
    * ``MemoryError``, torch's CUDA out-of-memory error and its CPU allocator's "can't
      allocate memory": the sizes asked for do not fit this machine.

    Everything else is a bug and keeps its traceback: ``TypeError``, ``AttributeError``,
    ``KeyError``, ``IndexError``, ``AssertionError``, other ``RuntimeError`` s, and a
    plain ``ValueError`` raised in infoprobe's own code.
    """
    if isinstance(err, OSError) or _out_of_memory(err):
        return True
    if isinstance(err, UserError):
        return True
    return isinstance(err, ValueError) and _raised_in_library(err)


def describe(err: BaseException) -> str:
    """The one-line text of a user error."""
    if _out_of_memory(err):
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (
            f"out of memory ({detail}); the sizes asked for (T, batch size, N, model width) "
            "do not fit this machine: lower them"
        )
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and not type(err).__module__.startswith("infoprobe"):
        return f"{text} ({type(err).__name__})"
    return text


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command line ``argv``: only the named command's module is imported
    (none for ``--version``, ``--help`` or no command); a name outside :data:`COMMANDS`
    gets the full parser."""
    name = next((a for a in argv if not a.startswith("-")), None)
    if name is None:
        return build_parser([])
    if name in COMMANDS:
        return build_parser(
            [importlib.import_module(f"infoprobe.commands.{COMMANDS[name].module}")]
        )
    return build_parser()


def _run(argv: list[str] | None) -> int:
    parser = parser_for(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    keep_freed_memory()  # a command allocates the same batches over and over
    previous = _on_sigterm(_terminate)
    try:
        return int(args.func(args) or 0)
    except BudgetStop as stop:
        print(f"infoprobe {args.command}: {stop}", file=sys.stderr)
        return BUDGET_EXIT
    except Terminated:
        print(f"infoprobe {args.command}: terminated", file=sys.stderr)
        return TERMINATED
    except KeyboardInterrupt:
        print(f"infoprobe {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        raise
    except Exception as err:
        if not is_user_error(err):
            raise
        print(f"infoprobe {args.command}: error: {describe(err)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the command unwinds as on Ctrl-C, so every writer removes its
    temporary output (and keeps what it had committed) before the exit."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated


def _on_sigterm(handler: Any) -> Any:
    """Install ``handler`` for SIGTERM (main thread only); return the previous one."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (e.g. captured output)
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader of our stdout went away (`infoprobe ... | head`): stop quietly.
        _quiet_stdout()
        return 1
    except KeyboardInterrupt:  # during start-up, before a command runs
        print("infoprobe: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
