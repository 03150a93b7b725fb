"""Argparse ``type=`` helpers shared by the commands: checked when the line is parsed.

A bad value ends the command before it reads or writes anything, with one line
``infoprobe CMD: error: argument --NAME: expected ..., got ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import math

from infoprobe.base.devices import DEVICE_TYPES
from infoprobe.model_config import MAX_SEED


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (sample counts, batch sizes, steps, threads, workers)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


MAX_SEEDS = 1000
"""The most seeds per grid point a sweep takes (more is a typo, not a study: 1000 seeds of
the smallest point already train for days)."""


def seed_count(text: str) -> int:
    """A number of seeds per grid point: 1 ..:data:`MAX_SEEDS`."""
    value = positive_int(text)
    if value > MAX_SEEDS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_SEEDS} seeds per grid point, got {text!r}"
        )
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (warm-up steps, widths that 0 switches off)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """A finite number (not nan, inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (learning rates, gains)."""
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (weight decay, gradient clipping where 0 = off)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def device(text: str) -> str:
    """A torch device this machine has: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    if text == "cpu":  # every machine has it; no need to load torch to say so
        return text
    import torch

    try:
        parsed = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected a torch device {DEVICE_TYPES} (cuda:N for one GPU), got {text!r}"
        ) from None
    if parsed.type not in DEVICE_TYPES:
        raise argparse.ArgumentTypeError(f"expected a device of type {DEVICE_TYPES}, got {text!r}")
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text!r} asked for, but torch sees no CUDA device")
        if parsed.index is not None and parsed.index >= count:
            raise argparse.ArgumentTypeError(
                f"{text!r} asked for, but torch sees {count} CUDA device(s): "
                f"cuda:0..cuda:{count - 1}"
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{text!r} asked for, but torch sees no MPS device")
    return text


def seed(text: str) -> int:
    """A seed: an integer in 0..2**63-1 (:data:`infoprobe.model.MAX_SEED`)."""
    value = _int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed in 0..2**63-1, got {text!r}")
    return value


def seed_list(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` → (0, 1, 2): distinct seeds, each in 0..2**63-1."""
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated seeds like 0,1,2,3, got {text!r}"
        ) from None
    if not all(0 <= s <= MAX_SEED for s in seeds):
        raise argparse.ArgumentTypeError(f"expected seeds in 0..2**63-1, got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"expected distinct seeds, got {text!r}: it lists a seed twice"
        )
    return seeds


def positive_int_list(text: str) -> list[int]:
    """``"8,16,32"`` → [8, 16, 32]: comma-separated integers >= 1 (sizes, lengths)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1, got {text!r}"
        ) from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def positive_int_tuple(text: str) -> tuple[int, ...]:
    """``"1,2"`` → (1, 2): :func:`positive_int_list` as a tuple (a frozen setting's value)."""
    return tuple(positive_int_list(text))


def unit_float(text: str) -> float:
    """A number in [0, 1] (weights of a convex mix)."""
    value = finite_float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def figure_file(text: str) -> str:
    """A figure path whose extension is a format matplotlib writes (``.png``, ``.pdf``, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = text.rsplit(".", 1)[-1].lower() if "." in text.rsplit("/", 1)[-1] else ""
    if suffix not in formats:
        raise argparse.ArgumentTypeError(
            f"expected a file name ending in one of .{', .'.join(formats)}, got {text!r}"
        )
    return text


def split_fractions(text: str) -> tuple[float, float, float]:
    """``"0.7,0.15,0.15"`` → (0.7, 0.15, 0.15): train, val, test fractions (>= 0, sum 1)."""
    from infoprobe.probes.errors import SplitTooSmallError
    from infoprobe.probes.split import check_fractions

    try:
        values = tuple(float(part) for part in text.split(","))
        train, val, test = check_fractions(values)
    except (ValueError, SplitTooSmallError):
        raise argparse.ArgumentTypeError(
            f"expected three fractions train,val,test >= 0 summing to 1, got {text!r}"
        ) from None
    return float(train), float(val), float(test)


def site_spec(text: str) -> str:
    """Hook sites: presets, ``re:REGEX`` or hook names, comma-separated; a token no model
    could have is refused here, the names are checked against the model later."""
    from infoprobe.hooks.errors import UnknownSiteError
    from infoprobe.hooks.sites import check_site_spec

    try:
        check_site_spec(text)
    except UnknownSiteError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


TRUST_HELP = (
    "run the model code a checkpoint names (its model_config.factory: a module beside "
    "checkpoint.json or on sys.path, called with the kwargs the JSON gives). Without it "
    "such a checkpoint is refused before anything is imported; give it only for "
    "checkpoints whose code you trust (docs/own-model.md, 'Trust')"
)


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    """``--trust-code``: the opt-in to a foreign checkpoint's code, on every command that
    builds a checkpoint's model."""
    parser.add_argument("--trust-code", action="store_true", help=TRUST_HELP)


def add_resume_arguments(parser: argparse.ArgumentParser) -> None:
    """``--state-every``, ``--budget-minutes`` and ``--restart``: training that outlives its
    process (:mod:`infoprobe.train.state`)."""
    from infoprobe.train.budget import BUDGET_EXIT, STATE_EVERY

    group = parser.add_argument_group(
        "resumable training",
        "Training writes its state (weights, optimiser, schedule, random generators, history)"
        " beside its output every --state-every steps; the same command, run again, "
        "continues from it, and the result equals an uninterrupted run on the same threads "
        "and device. A state of other settings is refused.",
    )
    group.add_argument("--state-every", type=positive_int, default=STATE_EVERY, metavar="N",
                       help=f"steps between states (default {STATE_EVERY})")  # fmt: skip
    group.add_argument(
        "--budget-minutes",
        type=non_negative_float,
        default=None,
        metavar="M",
        help="stop at the first state after M minutes, write it and exit with status "
        f"{BUDGET_EXIT}; run the same command again to continue",
    )
    group.add_argument(
        "--restart", action="store_true", help="discard an existing state and start over"
    )


def resume_from_args(args: argparse.Namespace):
    """The :class:`~infoprobe.train.state.Resume` the resume options give (its budget
    counted from now)."""
    from infoprobe.train.budget import Resume

    return Resume.budget(args.budget_minutes, every=args.state_every, restart=args.restart)
