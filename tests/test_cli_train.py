"""`infoprobe train` from the command line: the checkpoint it writes, its bad inputs, and
its model and training options, generated from the config dataclasses."""

import argparse
import contextlib
import dataclasses
import io
import re
import subprocess
import sys
import typing

import pytest
import torch

from infoprobe.checkpoint import load_checkpoint
from infoprobe.cli import main
from infoprobe.commands import modelargs
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig

FAST = [
    "--steps",
    "30",
    "--batch-size",
    "32",
    "--n-val",
    "64",
    "--n-test",
    "64",
    "--eval-every",
    "10",
    "--E",
    "8",
    "--d-mlp",
    "8",
    "--d-readout",
    "8",
    "--quiet",
]


def test_train_writes_a_checkpoint_that_matches_the_options(tmp_path, capsys):
    out = tmp_path / "ck"
    rc = main(
        [
            "train",
            "--task",
            "intrinsic-dim",
            "--D",
            "2",
            "--T",
            "5",
            "--heads",
            "2,4",
            "--task-seed",
            "4",
            "--out",
            str(out),
            *FAST,
        ]
    )
    assert rc == 0
    ck = load_checkpoint(out)
    assert ck.task.to_dict() == {
        "name": "intrinsic-dim",
        "params": {"T": 5, "D": 2, "d": 4, "distinct": False, "seed": 4},
    }
    assert ck.model_config.heads == (2, 4) and ck.model_config.d_model == 8
    assert ck.meta["train_config"]["steps"] == 30
    assert [h["step"] for h in ck.history] == [10, 20, 30]
    printed = capsys.readouterr().out
    assert f"{ck.meta['metrics']['val_nmse']:.4g}" in printed and str(out) in printed


def test_positional_tasks_get_positional_encoding_by_default(tmp_path):
    out = tmp_path / "fp"
    assert (
        main(["train", "--task", "fixed-positions", "--heads", "1", "--out", str(out), *FAST]) == 0
    )
    assert load_checkpoint(out).model_config.pos_encoding == "learned"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "triangle", "--D", "3"], "task triangle has no parameter(s) ['D']"),
        (["--task", "pairwise-min", "--T", "1"], "parameter 'T' must be an integer >= 2"),
        (["--task", "intrinsic-dim", "--heads", "2,2", "--layers", "3"], "--layers 3"),
        (["--task", "intrinsic-dim", "--heads", "3,3", "--E", "8"], "not divisible by the 3 heads"),
    ],
)
def test_bad_options_give_one_clear_line(tmp_path, capsys, argv, message):
    rc = main(["train", *argv, "--out", str(tmp_path / "x"), *FAST])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_unknown_task_lists_the_valid_ones(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--task", "sorting", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert "invalid choice: 'sorting'" in err and "intrinsic-dim" in err


def test_existing_output_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "ck"
    out.mkdir()
    rc = main(["train", "--task", "intrinsic-dim", "--out", str(out), "--steps", "100000"])
    assert rc == 2 and "already exists" in capsys.readouterr().err


def test_console_script_help_teaches():
    out = subprocess.run(
        [sys.executable, "-m", "infoprobe", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for word in ("--task", "--heads", "--lr", "examples:", "NMSE"):
        assert word in out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_train_on_cuda(tmp_path):
    assert (
        main(
            [
                "train",
                "--task",
                "intrinsic-dim",
                "--T",
                "4",
                "--device",
                "cuda",
                "--out",
                str(tmp_path / "ck"),
                *FAST,
            ]
        )
        == 0
    )


# ---- the model and training options are generated from the config dataclasses ----------
MODEL_BASE = ModelConfig(d_in=1, n_ctx=1, heads=(1,))
"""A model config where any single width is compatible with the heads (1 head)."""
TRAIN_BASE = TrainConfig(batch_size=1)
"""A training config where any n_train >= 1 fits the batch size."""
# The flags the hand-written options had (every one must stay).
FLAGS_BEFORE = {
    "--E", "--batch-size", "--compile", "--d-head", "--d-mlp", "--d-model", "--d-readout",
    "--device", "--dtype", "--eval-every", "--grad-clip", "--heads", "--init-gain",
    "--layer-norm", "--layers", "--lr", "--n-test", "--n-train", "--n-val", "--no-residual",
    "--patience", "--pos-encoding", "--seed", "--steps", "--threads", "--warmup",
    "--weight-decay",
}  # fmt: skip
CLI_ONLY = {"layers", "threads"}  # options that are not config fields
TASK_FIXED = {"d_in", "n_ctx", "d_out"}


def config_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    modelargs.add_model_arguments(parser)
    modelargs.add_train_arguments(parser)
    return parser


def actions_by_dest() -> dict[str, argparse.Action]:
    return {a.dest: a for a in config_parser()._actions if a.dest != "help"}


def parses(argv: list[str]) -> argparse.Namespace | None:
    """The namespace, or None when the parser refuses ``argv``."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return config_parser().parse_args(argv)
    except (SystemExit, argparse.ArgumentError):
        return None


def config_fields() -> list[tuple[object, dataclasses.Field]]:
    model = [(MODEL_BASE, f) for f in dataclasses.fields(ModelConfig) if f.name not in TASK_FIXED]
    return model + [(TRAIN_BASE, f) for f in dataclasses.fields(TrainConfig)]


def test_every_config_field_is_one_option_with_the_field_default():
    actions = actions_by_dest()
    fields = config_fields()
    assert set(actions) == {f.name for _, f in fields} | CLI_ONLY
    assert {s for a in actions.values() for s in a.option_strings} == FLAGS_BEFORE
    for _, f in fields:
        expected = None if f.name == "pos_encoding" else f.default  # the task decides
        assert actions[f.name].default == expected, f.name


def docstring_words(cls: type, name: str, n: int = 4) -> str:
    """The first n words of field ``name``'s entry in ``cls``'s docstring, without markup."""
    match = re.search(rf"^\s+(?:\w+, )*{name}(?:, \w+)*: (.+)$", cls.__doc__, re.MULTILINE)
    assert match, name
    words = match.group(1).replace("``None``", "unset").replace("``", "").split()[:n]
    return " ".join(words).rstrip(".")


def test_help_of_every_generated_option_is_the_field_documentation():
    actions = actions_by_dest()
    for base, f in config_fields():
        help_text = " ".join(actions[f.name].help.split())
        assert docstring_words(type(base), f.name) in help_text, (f.name, help_text)
        if actions[f.name].default is not None and not isinstance(f.default, bool):
            shown = actions[f.name].default
            shown = ",".join(map(str, shown)) if isinstance(shown, tuple) else shown
            assert f"(default: {shown})" in help_text, f.name


def accepts(base: object, name: str, value: object) -> bool:
    try:
        dataclasses.replace(base, **{name: value})
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("text", ["-2", "-1", "0", "1", "3", "0.5", "1e-3", "nan", "inf", "x"])
def test_numbers_are_parsed_exactly_when_the_dataclass_takes_them(text):
    """Parse ``--flag TEXT`` for every int and float field: accepted iff the dataclass
    accepts the number for that field, and the parsed value is that number."""
    actions = actions_by_dest()
    for base, f in config_fields():
        kind = typing.get_type_hints(type(base))[f.name]
        kind = int if kind in (int, int | None) else float if kind is float else None
        if kind is None:
            continue
        try:
            value = kind(text)
        except ValueError:
            value = None
        ok = value is not None and accepts(base, f.name, value)
        args = parses([actions[f.name].option_strings[0], text])
        assert (args is not None) == ok, (f.name, text)
        if ok:
            assert getattr(args, f.name) == value and type(getattr(args, f.name)) is kind


def test_flags_and_choices_set_the_field_and_parsed_args_build_the_configs():
    task = make_task("fixed-positions")
    args = parses([])
    assert modelargs.train_config_from_args(args) == TrainConfig()
    assert modelargs.model_config_from_args(args, task) == ModelConfig(
        d_in=task.d, n_ctx=task.T, d_out=task.d_out, pos_encoding="learned"
    )
    flags = "--no-residual --layer-norm --compile --dtype float64 --heads 1,3"
    values = "--pos-encoding sinusoidal --E 12 --n-train 512 --patience 3"
    args = parses(f"{flags} {values}".split())
    model = modelargs.model_config_from_args(args, task)
    train = modelargs.train_config_from_args(args)
    assert (model.residual, model.layer_norm, model.heads, model.d_model) == (
        False,
        True,
        (1, 3),
        12,
    )
    assert model.pos_encoding == "sinusoidal"
    assert (train.compile, train.dtype, train.n_train, train.patience) == (True, "float64", 512, 3)
    assert parses(["--dtype", "float16"]) is None and parses(["--pos-encoding", "rope"]) is None
