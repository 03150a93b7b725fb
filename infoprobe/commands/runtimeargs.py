"""The runtime options every computing command shares (:class:`~infoprobe.base.runtime.Runtime`):
``--threads`` everywhere, ``--device`` where the command computes with torch (a command
whose settings dataclass has its own ``device`` field keeps that option; it is the same
option, read by the same parser)."""

from __future__ import annotations

import argparse

from infoprobe.base.runtime import AUTO, Runtime
from infoprobe.commands.argtypes import positive_int
from infoprobe.commands.settingsargs import DeviceSetting, add_settings_arguments

THREADS_HELP = (
    "CPU threads (torch and BLAS): N, or auto to follow the cores other work leaves free "
    "(default: the cores this process may run on, fixed for the run, so a rerun computes "
    "the same floats)"
)


def thread_count(text: str) -> int | str:
    """``--threads``: an integer >= 1 or ``auto``."""
    return AUTO if text == AUTO else positive_int(text)


def add_runtime_arguments(parser: argparse.ArgumentParser, *, with_device: bool = True) -> None:
    """Add ``--threads`` (and ``--device`` unless ``with_device`` is false or the parser
    has one) to ``parser``."""
    known = parser._option_string_actions
    if "--threads" not in known:
        parser.add_argument(
            "--threads", type=thread_count, default=None, metavar="N|auto", help=THREADS_HELP
        )
    if with_device and "--device" not in known:
        add_settings_arguments(parser, DeviceSetting)  # the one --device option


def runtime_from_args(args: argparse.Namespace) -> Runtime:
    """The :class:`Runtime` of the parsed options (``--quiet`` turns the progress off)."""
    return Runtime(
        device=getattr(args, "device", None) or "cpu",
        threads=getattr(args, "threads", None),
        progress=not getattr(args, "quiet", False),
    )
