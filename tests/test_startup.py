"""Start-up: the parser imports what it needs to parse, nothing it computes with.

``infoprobe --version`` and ``infoprobe --help`` import no command module, and every
command parses its options (``--help`` included) without loading torch, transformer_lens,
scikit-learn, scipy, pandas, h5py or matplotlib, so it answers at once (bench/startup.py
measures the time). Read from ``python -X importtime``, which lists every module a process
imports.
"""

import argparse
import importlib
import subprocess
import sys

import pytest

from infoprobe.cli import build_parser
from infoprobe.commands import COMMANDS

HEAVY = ("torch", "transformer_lens", "sklearn", "scipy", "pandas", "h5py", "matplotlib")


def imported(argv: list[str], code: str | None = None) -> set[str]:
    """The top-level names of every module ``python -m infoprobe ARGV`` (or ``python -c
    CODE``) imports."""
    run = ["-m", "infoprobe", *argv] if code is None else ["-c", code]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *run],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "infoprobe" in names  # the reading works
    return names


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_command_and_no_library(argv):
    names = imported(argv)
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_parses_without_heavy_libraries(command):
    names = imported([command, "--help"])
    assert not names & set(HEAVY), f"{command} --help imports {sorted(names & set(HEAVY))}"


def test_the_import_reading_sees_a_heavy_import():
    """Not vacuous: a module that computes with torch is seen to import it."""
    assert {"torch", "transformer_lens"} <= imported([], code="import infoprobe.model")


def test_the_index_names_every_command_its_module_registers():
    """Each command of the index is registered by the module the index names, with the
    summary the top-level help shows."""
    full = build_parser()
    (sub,) = [a for a in full._actions if a.dest == "command"]
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert set(helps) == set(COMMANDS)
    for name, command in COMMANDS.items():
        assert helps[name] == command.summary
        module = importlib.import_module(f"infoprobe.commands.{command.module}")
        (own,) = [a for a in build_parser([module])._actions if a.dest == "command"]
        assert own.choices[name].get_default("func") is not None, f"{command.module}: {name}"


def test_every_usage_line_names_every_option():
    """Each command's usage line (the first lines of its --help) names each of its options,
    so no option is only found by reading the whole help."""
    full = build_parser()
    (sub,) = [a for a in full._actions if a.dest == "command"]
    for name, parser in sub.choices.items():
        usage = parser.format_usage()
        for action in parser._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                flag = action.option_strings[0]
                assert flag in usage, f"{name}: {flag} missing from its usage line"
