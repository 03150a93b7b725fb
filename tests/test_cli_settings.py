"""Each setting is declared once (a dataclass field), generated into options by one
generator, spelled one way on every command, and validated before any file is touched."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from test_bad_input import assert_refused

from infoprobe.cli import build_parser
from infoprobe.commands.argtypes import device
from infoprobe.commands.settingsargs import DeviceSetting, destinations
from infoprobe.influence import InfluenceSettings
from infoprobe.pipeline.cache_settings import CacheSettings
from infoprobe.pipeline.caching import checkpoint_cache_job
from infoprobe.pipeline.probing import PROBES, ProbeSettings
from infoprobe.pipeline.settings import RunSettings
from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.observed import Thresholds
from infoprobe.train.config import TrainConfig


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, by name, as ``infoprobe`` builds them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


PARSERS = command_parsers()


def options(command: str) -> dict[str, argparse.Action]:
    """Option string → action of one command (hidden aliases included)."""
    return PARSERS[command]._option_string_actions


def visible_flags(command: str) -> dict[str, argparse.Action]:
    return {
        flag: action
        for flag, action in options(command).items()
        if action.help is not argparse.SUPPRESS
    }


SETTINGS = {
    "run": [RunSettings, TrainConfig],
    "probe-checkpoint": [RunSettings],
    "cache": [CacheSettings],
    "probe": [ProbeSettings, Thresholds, TrainingBudget],
    "influence": [InfluenceSettings, DeviceSetting],
    "reproduce": [DeviceSetting],
    "train": [TrainConfig],
}
"""The settings dataclasses each command's options are generated from."""


def field_defaults(cls: type) -> dict[str, object]:
    instance = cls()
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("command", sorted(SETTINGS))
def test_every_generated_option_defaults_to_its_field(command):
    """Parsing no options gives each dataclass field's own default, under its destination."""
    actions = {a.dest: a for a in PARSERS[command]._actions if a.help is not argparse.SUPPRESS}
    checked = 0
    for cls in SETTINGS[command]:
        extra = _extra(command, cls)
        defaults = field_defaults(cls)
        for name, dest in destinations(cls, extra).items():
            action = actions.get(dest)
            if action is None or (command == "run" and cls is RunSettings and name == "device"):
                continue  # not an option of this command (run: the training device)
            if command == "probe" and name == "shuffle_seed":
                continue  # --seed is the split's (and the shuffled control's) seed
            assert action.default == defaults[name], (command, name, action.default)
            checked += 1
    assert checked


def _extra(command: str, cls: type):
    if command == "probe":
        from infoprobe.commands import probe

        return {
            ProbeSettings: probe.PROBE_FIELDS,
            Thresholds: probe.THRESHOLD_FIELDS,
            TrainingBudget: probe.BUDGET_FIELDS,
        }[cls]
    if cls is TrainConfig:
        from infoprobe.commands.modelargs import CLI_FIELDS

        return CLI_FIELDS
    return None


SHARED = {
    "--cache-batch": ["run", "probe-checkpoint", "cache"],
    "--sites": ["run", "probe-checkpoint", "cache"],
    "--probe": ["run", "probe-checkpoint", "probe"],
    "--device": [
        "run", "probe-checkpoint", "cache", "probe", "influence", "reproduce", "train"
    ],
}  # fmt: skip
"""Options of one setting on several commands."""


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_setting_is_one_option_on_every_command(flag):
    """Same spelling, same default, same parser (or the same choices) everywhere."""
    actions = {command: visible_flags(command).get(flag) for command in SHARED[flag]}
    missing = [command for command, action in actions.items() if action is None]
    assert not missing, f"{flag} is not an option of {missing}"
    kinds = {(a.default, a.type, tuple(a.choices or ())) for a in actions.values()}
    assert len(kinds) == 1, (flag, kinds)


def test_the_device_option_has_one_parser():
    for command, parser in PARSERS.items():
        action = parser._option_string_actions.get("--device")
        if action is not None:
            assert action.type is device and action.default == "cpu", command


def test_the_probe_families_are_one_list():
    assert visible_flags("run")["--probe"].choices == PROBES
    assert visible_flags("probe")["--probe"].choices == PROBES


def test_the_cache_defaults_are_written_once():
    settings = RunSettings()
    assert settings.sites == CacheSettings.sites and settings.batch_size == CacheSettings.batch_size
    import inspect

    signature = inspect.signature(checkpoint_cache_job).parameters
    for name in ("n", "sites", "batch_size", "dtype", "device"):
        assert signature[name].default == getattr(CacheSettings, name), name


def test_renamed_options_keep_their_old_spelling_hidden():
    """``cache --batch`` is ``--cache-batch``; ``probe --batch-size`` is ``--probe-batch``
    (not the training batch of ``train --batch-size``)."""
    for command, old, new in (("cache", "--batch", "--cache-batch"),
                              ("probe", "--batch-size", "--probe-batch")):  # fmt: skip
        assert options(command)[old].help is argparse.SUPPRESS
        assert options(command)[old].dest == options(command)[new].dest
        assert old not in PARSERS[command].format_help()
    parsed = build_parser().parse_args(["cache", "ckpt", "--out", "a.h5", "--batch", "64"])
    assert parsed.cache_batch == 64
    parsed = build_parser().parse_args(["probe", "acts.h5", "--out", "p.h5", "--batch-size", "8"])
    assert parsed.probe_batch == 8
    assert "--probe-batch" in visible_flags("probe") and "--batch-size" not in visible_flags(
        "probe"
    )
    assert visible_flags("train")["--batch-size"].dest == "batch_size"


def test_help_strings_show_the_field_defaults():
    """The generated help reads the default from the dataclass (never retyped)."""
    text = " ".join(PARSERS["run"].format_help().split())
    assert f"(default: {RunSettings().n_cache})" in text
    text = " ".join(PARSERS["probe"].format_help().split())
    assert f"(default: {TrainingBudget().batch_size})" in text


TRAIN = ["--task", "fixed-positions", "--heads", "1", "--steps", "5", "--quiet"]


@pytest.mark.parametrize(
    "sites, words",
    [("bogus", ["--sites", "'bogus'"]), ("attention", ["--sites", "'attention'", "residual"])],
)
def test_bad_sites_fail_before_training_and_leave_no_folder(
    monkeypatch, capsys, tmp_path, sites, words
):
    folder = tmp_path / "x1"
    argv = [*TRAIN, "--sites", sites, "--out", str(folder)]
    assert_refused(monkeypatch, capsys, tmp_path, "run", argv, words)
    assert not folder.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", *TRAIN, "--out", "{out}"],
        ["probe-checkpoint", "{tmp}", "--out", "{out}"],
        ["cache", "{tmp}", "--out", "{out}"],
        ["probe", "{tmp}/acts.h5", "--out", "{out}"],
        ["influence", "{tmp}", "--cache", "{tmp}/acts.h5", "--out", "{out}"],
        ["train", *TRAIN, "--out", "{out}"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_bad_device_fails_with_one_line_before_any_file(monkeypatch, capsys, tmp_path, argv):
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in argv] + ["--device", "bogus"]
    assert_refused(monkeypatch, capsys, tmp_path, argv[0], argv[1:], ["--device", "'bogus'"])
    assert not out.exists()
