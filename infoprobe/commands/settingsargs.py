"""The one generator of command-line options: settings dataclass fields → argparse options.

Every setting is declared once, as a field of its dataclass (:class:`ModelConfig`,
:class:`TrainConfig`, :class:`~infoprobe.pipeline.settings.RunSettings`,
:class:`~infoprobe.pipeline.probing.ProbeSettings`,
:class:`~infoprobe.pipeline.cache_settings.CacheSettings`, :class:`InfluenceSettings`, ...), and
:func:`add_settings_arguments` turns the fields into options:

- flag ``--field-name``; a ``bool`` field is ``--name`` if it defaults to off, ``--no-name``
  if it defaults to on (its help is the field's, then "on by default, this flag turns it
  off");
- default: the field's default (or the given instance's value);
- help: the field's entry in the class docstring's ``Args:`` (or ``Attributes:``)
  section, then the default, so no help string retypes a default;
- value: ``Literal`` fields take their choices; ``int`` and ``float`` fields are checked
  as they are parsed against the bound the dataclass itself enforces (0 allowed: ``>= 0``,
  else ``> 0``), so a bad value ends the command before it reads or writes anything.

What a dataclass cannot say (a flag spelled otherwise, a hidden old spelling, a parser
for a list, a metavar) is a :class:`CliField`, merged from three places, later ones
winning: :data:`FIELD_TYPES` (the one parser of a setting shared by name: ``device``,
``seed``, ``sites``), the field's ``metadata["cli"]`` (a dict of :class:`CliField`
attributes, written beside the field), and the ``extra`` a command passes for a dataclass
it does not own. :func:`settings_from_args` builds the dataclass back from the parsed
options, reading the same destinations.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from infoprobe.commands.argtypes import (
    device,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    seed,
    seed_list,
    site_spec,
)

FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda _: "FIELD_DEFAULT"})()
"""Marks a :class:`CliField` whose option defaults to the field's own default."""


@dataclasses.dataclass(frozen=True)
class CliField:
    """What the command line needs of a settings field beyond its type, default and docs.

    Attributes:
        flags: the option's names, replacing ``--field-name`` (e.g. ``("--E", "--d-model")``).
        aliases: old spellings still accepted, hidden from ``--help``.
        dest: the parsed namespace's attribute (default: the field name); needed where two
            dataclasses of one command have a field of the same name.
        convert: the ``type=`` parser, for a field whose annotation does not give one.
        choices: the accepted values, for a ``str`` field the dataclass checks against a set.
        metavar: the value's name in the usage line.
        default: the option's default when it differs from the field's (``None``: the
            command decides, described by ``default_text``).
        default_text: how the help shows the default.
        help: the option's help, replacing the docstring's entry.
    """

    flags: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    dest: str | None = None
    convert: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    default: Any = FIELD_DEFAULT
    default_text: str | None = None
    help: str | None = None


FIELD_TYPES: dict[str, CliField] = {
    "device": CliField(convert=device, metavar="DEV"),
    "seed": CliField(convert=seed),
    "seeds": CliField(convert=seed_list, metavar="S1,S2,.."),
    "data_seed": CliField(convert=seed),
    "random_init_seed": CliField(convert=seed),
    "split_seed": CliField(convert=seed),
    "sites": CliField(convert=site_spec),
}
"""The parser of a setting shared by name across dataclasses and commands (one type for
``--device`` everywhere)."""


@dataclasses.dataclass(frozen=True)
class DeviceSetting:
    """The device of a command whose settings dataclass has no ``device`` field.

    Args:
        device: torch device (cpu, cuda, cuda:N or mps)
    """

    device: str = "cpu"


def cli_field(f: dataclasses.Field, extra: Mapping[str, CliField] | None = None) -> CliField:
    """The merged :class:`CliField` of field ``f``: :data:`FIELD_TYPES`, then the field's
    ``metadata["cli"]``, then ``extra`` (each set attribute replaces the one before)."""
    merged: dict[str, Any] = {}
    unset = CliField()
    own = f.metadata.get("cli")
    own = CliField(**own) if isinstance(own, Mapping) else own
    for source in (FIELD_TYPES.get(f.name), own, (extra or {}).get(f.name)):
        if source is None:
            continue
        for attr in dataclasses.fields(CliField):
            value = getattr(source, attr.name)
            if value != getattr(unset, attr.name):  # set here (None is a default's value)
                merged[attr.name] = value
    return CliField(**merged)


def field_docs(cls: type) -> dict[str, str]:
    """Field name → its description in ``cls``'s docstring ``Args:`` (or ``Attributes:``)
    section, as plain text (an entry ``a, b: text`` describes both; RST markup is dropped,
    ``None`` reads "unset")."""
    lines = (cls.__doc__ or "").splitlines()
    heads = ("Args:", "Attributes:")
    start = next((i for i, line in enumerate(lines) if line.strip() in heads), None)
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
    except Exception:  # any refusal of the dataclass means "not accepted"
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


def _instance(base: Any) -> Any:
    return base() if isinstance(base, type) else base


def add_settings_arguments(
    group: argparse.ArgumentParser | argparse._ArgumentGroup,
    base: Any,
    *,
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    after: Mapping[str, Callable[[Any], None]] | None = None,
    extra: Mapping[str, CliField] | None = None,
) -> None:
    """Add one option per field of ``base``'s dataclass (``base``: the class, or an
    instance whose values are the defaults) to ``group``, in field order: the fields in
    ``only`` (all if None) but ``skip``; ``after[name](group)`` adds hand-declared options
    right after field ``name``'s; ``extra``: :class:`CliField` per field name."""
    base = _instance(base)
    cls = type(base)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    wanted = None if only is None else set(only)
    skip = set(skip)
    for f in dataclasses.fields(cls):
        if (wanted is not None and f.name not in wanted) or f.name in skip:
            continue
        cli = cli_field(f, extra)
        if cli.help is None and f.name not in docs:
            raise TypeError(f"{cls.__name__}.{f.name} has no entry in the docstring's Args:")
        default = getattr(base, f.name) if cli.default is FIELD_DEFAULT else cli.default
        doc = (cli.help or docs[f.name]).replace("%", "%%")
        shown = cli.default_text or _format_default(default)
        if default is None and cli.default_text is None and "unset" in doc:
            shown = ""  # the field's description already says what unset means
        kind = _value_type(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        dest = cli.dest or f.name
        if kind is bool:
            on = bool(default)
            action = "store_false" if on else "store_true"
            group.add_argument(
                *(cli.flags or (f"--no-{flag[2:]}" if on else flag,)),
                dest=dest,
                action=action,
                help=f"{doc}: on by default, this flag turns it off"
                if on
                else f"{doc} (default: off)",
            )
            options: dict[str, Any] = {"action": action}
        else:
            options = {"metavar": cli.metavar}
            if cli.choices is not None or typing.get_origin(kind) is typing.Literal:
                options["choices"] = cli.choices or typing.get_args(kind)
            elif cli.convert is not None:
                options["type"] = cli.convert
            elif kind in (int, float):
                options["type"] = _number_parser(base, f.name, kind)
            elif kind is not str:
                raise TypeError(
                    f"{cls.__name__}.{f.name}: no parser for {kind}; give it a CliField convert"
                )
            group.add_argument(
                *(cli.flags or (flag,)),
                dest=dest,
                default=default,
                help=f"{doc} (default: {shown})" if shown else doc,
                **options,
            )
        if cli.aliases:  # old spellings: accepted, not shown, the default left to the flag
            group.add_argument(
                *cli.aliases, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                **options,
            )  # fmt: skip
        if after and f.name in after:
            after[f.name](group)


def destinations(cls: type, extra: Mapping[str, CliField] | None = None) -> dict[str, str]:
    """Field name → the parsed namespace attribute its option writes."""
    return {f.name: cli_field(f, extra).dest or f.name for f in dataclasses.fields(cls)}


def settings_from_args(
    cls: type,
    args: argparse.Namespace,
    *,
    extra: Mapping[str, CliField] | None = None,
    **given: Any,
) -> Any:
    """The ``cls`` instance of the parsed options: every field whose option the command
    declared, then ``given``; the other fields keep their defaults."""
    values = {
        name: getattr(args, dest)
        for name, dest in destinations(cls, extra).items()
        if hasattr(args, dest)
    }
    return cls(**{**values, **given})
