"""Command-line options for the model architecture and training, generated from the config
dataclasses (shared by commands) by the one generator,
:func:`infoprobe.commands.settingsargs.add_settings_arguments`.

Every field of :class:`~infoprobe.model.ModelConfig` (but ``d_in``, ``n_ctx`` and
``d_out``, which come from the task) and of :class:`~infoprobe.train.config.TrainConfig` becomes
one option, in field order (flag, default, help and value check as that module says).

:data:`CLI_FIELDS` holds only what a dataclass cannot say: a second flag name, a
parser for a list, a default that depends on the task (``device`` and ``seed`` take the
shared parsers of :data:`~infoprobe.commands.settingsargs.FIELD_TYPES`). The options that
are not config fields (``--layers``, ``--threads``) are declared by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from infoprobe.base.errors import UsageError
from infoprobe.commands.argtypes import positive_int
from infoprobe.commands.runtimeargs import THREADS_HELP, thread_count
from infoprobe.commands.settingsargs import CliField, add_settings_arguments
from infoprobe.model_config import ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.config import DTYPES, TrainConfig

DEFAULT_MODEL = ModelConfig(d_in=1, n_ctx=1)
DEFAULT_TRAIN = TrainConfig()
TASK_FIELDS = ("d_in", "n_ctx", "d_out")
"""ModelConfig fields the task fixes (d, T and its output size): never options."""
MODEL_OPTIONS = (
    *(f.name for f in dataclasses.fields(ModelConfig) if f.name not in TASK_FIELDS),
    "layers",
)
"""Destinations of the architecture options :func:`add_model_arguments` adds."""


def parse_heads(text: str) -> tuple[int, ...]:
    """``"2,3"`` → (2, 3): heads per layer; the list's length is the depth L."""
    try:
        heads = tuple(int(h) for h in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--heads expects comma-separated head counts per layer like 2,2; got {text!r}"
        ) from None
    if not heads or min(heads) < 1:
        raise argparse.ArgumentTypeError(f"--heads needs >= 1 head per layer, got {text!r}")
    return heads


CLI_FIELDS: dict[str, CliField] = {
    "d_model": CliField(flags=("--E", "--d-model")),
    "heads": CliField(convert=parse_heads, metavar="H1,H2,.."),
    "pos_encoding": CliField(
        default=None, default_text="learned if the task needs positions, else none"
    ),
    "dtype": CliField(choices=DTYPES),
}
"""Per field name (ModelConfig's and TrainConfig's names do not overlap)."""


def add_config_arguments(
    group: argparse._ArgumentGroup,
    base: Any,
    *,
    skip: tuple[str, ...] = (),
    after: dict[str, Callable[[argparse._ArgumentGroup], None]] | None = None,
) -> None:
    """:func:`add_settings_arguments` for ModelConfig and TrainConfig (with
    :data:`CLI_FIELDS`)."""
    add_settings_arguments(group, base, skip=skip, after=after, extra=CLI_FIELDS)


def _add_layers(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--layers",
        type=positive_int,
        default=None,
        metavar="L",
        help="depth; only as a check against the length of --heads",
    )


def _add_threads(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--threads", type=thread_count, default=None, metavar="N|auto", help=THREADS_HELP
    )


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Architecture options, one per :class:`ModelConfig` field; T, d and d_out come from
    the task."""
    g = parser.add_argument_group("model", "architecture (T, d and d_out come from the task)")
    add_config_arguments(g, DEFAULT_MODEL, skip=TASK_FIELDS, after={"heads": _add_layers})


def model_config_from_args(args: argparse.Namespace, task: Task) -> ModelConfig:
    """The :class:`ModelConfig` for ``task`` from parsed options."""
    if args.layers is not None and args.layers != len(args.heads):
        raise UsageError(
            f"--layers {args.layers} but --heads {','.join(map(str, args.heads))} "
            f"lists {len(args.heads)} layer(s); give one head count per layer"
        )
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(ModelConfig)
        if f.name not in TASK_FIELDS
    }
    if given["pos_encoding"] is None:
        given["pos_encoding"] = "learned" if task.needs_positions else "none"
    return ModelConfig(d_in=task.d, n_ctx=task.T, d_out=task.d_out, **given)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Optimisation options, one per :class:`TrainConfig` field (defaults are the
    paper's, except where noted)."""
    g = parser.add_argument_group("training", "AdamW with warm-up + cosine decay")
    add_config_arguments(g, DEFAULT_TRAIN, after={"device": _add_threads})


def train_config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` from parsed options."""
    return TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})
