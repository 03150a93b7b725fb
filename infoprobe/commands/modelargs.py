"""Command-line options for the model architecture and training, generated from the config
dataclasses (shared by commands).

Every field of :class:`~infoprobe.model.ModelConfig` (but ``d_in``, ``n_ctx`` and
``d_out``, which come from the task) and of :class:`~infoprobe.train.config.TrainConfig` becomes
one option, in field order:

- flag ``--field-name``; a ``bool`` field is ``--name`` if it defaults to off, ``--no-name``
  if it defaults to on (its help is the field's, then "on by default, this flag turns it
  off");
- default: the field's default;
- help: the field's entry in the class docstring's ``Args:`` section, then the default;
- value: ``Literal`` fields take their choices; ``int`` and ``float`` fields are checked
  as they are parsed against the bound the dataclass itself enforces (0 allowed: ``>= 0``,
  else ``> 0``), so a bad value ends the command before it reads or writes anything.

:data:`CLI_FIELDS` holds only what a dataclass cannot say: a second flag name, a
parser for a list, a default that depends on the task. The options that are not config
fields (``--layers``, ``--threads``) are declared by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from infoprobe.base.errors import UsageError
from infoprobe.commands.argtypes import (
    device,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    seed,
)
from infoprobe.model import ModelConfig
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


FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda _: "FIELD_DEFAULT"})()
"""Marks a :class:`CliField` whose option defaults to the field's own default."""


@dataclasses.dataclass(frozen=True)
class CliField:
    """What the command line needs of a config field beyond its type, default and docs.

    Attributes:
        flags: the option's names, replacing ``--field-name`` (e.g. ``("--E", "--d-model")``).
        convert: the ``type=`` parser, for a field whose annotation does not give one.
        choices: the accepted values, for a ``str`` field the dataclass checks against a set.
        metavar: the value's name in the usage line.
        default: the option's default when it differs from the field's (``None``: the
            command decides, described by ``default_text``).
        default_text: how the help shows the default.
    """

    flags: tuple[str, ...] = ()
    convert: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    default: Any = FIELD_DEFAULT
    default_text: str | None = None


CLI_FIELDS: dict[str, CliField] = {
    "d_model": CliField(flags=("--E", "--d-model")),
    "heads": CliField(convert=parse_heads, metavar="H1,H2,.."),
    "pos_encoding": CliField(
        default=None, default_text="learned if the task needs positions, else none"
    ),
    "device": CliField(convert=device),
    "seed": CliField(convert=seed),
    "dtype": CliField(choices=tuple(DTYPES)),
}
"""Per field name (ModelConfig's and TrainConfig's names do not overlap)."""


def field_docs(cls: type) -> dict[str, str]:
    """Field name → its description in ``cls``'s docstring ``Args:`` section, as plain text
    (an entry ``a, b: text`` describes both; RST markup is dropped, ``None`` reads
    "unset")."""
    lines = (cls.__doc__ or "").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    if start is None:
        return {}
    docs: dict[str, list[str]] = {}
    current: list[str] = []
    indent = None
    for line in lines[start + 1 :]:
        if not line.strip():
            if docs:
                break
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        entry = re.match(r"\s*([A-Za-z_][\w, ]*):\s(.*)", line)
        if depth == indent and entry:
            current = [entry.group(2).strip()]
            for name in entry.group(1).split(","):
                docs[name.strip()] = current
        elif depth > indent and current:
            current.append(line.strip())
        else:
            break
    return {name: plain_text(" ".join(parts)) for name, parts in docs.items()}


def plain_text(doc: str) -> str:
    """Docstring markup as plain text: ``x`` → x, :class:`X` → X, None → unset."""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc)
    doc = doc.replace("``None``", "unset").replace("``", "")
    return doc.strip().rstrip(".")


def _accepts(base: Any, name: str, value: Any) -> bool:
    """Does the dataclass of ``base`` accept ``value`` for field ``name`` alone?"""
    try:
        dataclasses.replace(base, **{name: value})
    except ValueError:
        return False
    return True


def _value_type(annotation: Any) -> Any:
    """``int | None`` → int; other annotations unchanged."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _number_parser(base: Any, name: str, kind: type) -> Callable[[str], Any]:
    """The argtypes parser for an int or float field: ``>= 0`` if the dataclass accepts 0
    for it, else ``> 0``."""
    zero_ok = _accepts(base, name, kind(0))
    if kind is int:
        return non_negative_int if zero_ok else positive_int
    return non_negative_float if zero_ok else positive_float


def _format_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def add_config_arguments(
    group: argparse._ArgumentGroup,
    base: Any,
    *,
    skip: tuple[str, ...] = (),
    after: dict[str, Callable[[argparse._ArgumentGroup], None]] | None = None,
) -> None:
    """Add one option per field of ``base``'s dataclass (but ``skip``) to ``group``, with
    ``base``'s values as defaults; ``after[name](group)`` adds hand-declared options right
    after field ``name``'s."""
    cls = type(base)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name not in docs:
            raise TypeError(f"{cls.__name__}.{f.name} has no entry in the docstring's Args:")
        cli = CLI_FIELDS.get(f.name, CliField())
        default = getattr(base, f.name) if cli.default is FIELD_DEFAULT else cli.default
        doc = docs[f.name].replace("%", "%%")
        shown = cli.default_text or _format_default(default)
        if default is None and cli.default_text is None and "unset" in doc:
            shown = ""  # the field's description already says what unset means
        kind = _value_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            on = bool(default)
            group.add_argument(
                *(cli.flags or (f"--no-{flag[2:]}" if on else flag,)),
                dest=f.name,
                action="store_false" if on else "store_true",
                help=f"{doc}: on by default, this flag turns it off"
                if on
                else f"{doc} (default: off)",
            )
        else:
            options: dict[str, Any] = {"metavar": cli.metavar}
            if cli.choices is not None or typing.get_origin(kind) is typing.Literal:
                options["choices"] = cli.choices or typing.get_args(kind)
            elif cli.convert is not None:
                options["type"] = cli.convert
            elif kind in (int, float):
                options["type"] = _number_parser(base, f.name, kind)
            elif kind is not str:
                raise TypeError(
                    f"{cls.__name__}.{f.name}: no parser for {kind}; add one to CLI_FIELDS"
                )
            group.add_argument(
                *(cli.flags or (flag,)),
                dest=f.name,
                default=default,
                help=f"{doc} (default: {shown})" if shown else doc,
                **options,
            )
        if after and f.name in after:
            after[f.name](group)


def _add_layers(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--layers",
        type=positive_int,
        default=None,
        metavar="L",
        help="depth; only as a check against the length of --heads",
    )


def _add_threads(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")


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
