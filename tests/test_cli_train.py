"""`infoprobe train` from the command line: the checkpoint it writes and its bad inputs."""

import subprocess
import sys

import pytest
import torch

from infoprobe.checkpoint import load_checkpoint
from infoprobe.cli import main

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
