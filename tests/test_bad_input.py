"""Bad input from a hostile user: one clear line (exit 2), never a traceback, nothing written.

Bugs (TypeError, AttributeError, KeyError, IndexError, AssertionError, a plain ValueError
of infoprobe's own code) still show their traceback.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

from infoprobe import cli
from infoprobe.cli import main
from infoprobe.probes.errors import ProbeError
from infoprobe.probes.observed import Thresholds
from infoprobe.train.config import TrainConfig, TrainingError

pytestmark = pytest.mark.usefixtures("blank_report_figures")  # not the figures under test


def fake_command(name: str, action=None) -> types.ModuleType:
    """A command module ``name`` whose run calls ``action(args)``; one option --k INT."""
    module = types.ModuleType(f"infoprobe.commands.{name}")

    def register(subparsers):
        p = subparsers.add_parser(name, help=f"the {name} command")
        p.add_argument("--k", type=int, default=1)
        p.set_defaults(func=lambda args: action(args) if action else 0)

    module.register = register
    return module


def run_raising(monkeypatch, error_factory, argv=("boom",)):
    """Run ``infoprobe boom`` where the command raises ``error_factory()``."""

    def action(args):
        raise error_factory()

    monkeypatch.setattr(cli, "command_modules", lambda: [fake_command("boom", action)])
    return main(list(argv))


def _numpy_refuses():
    try:
        np.random.default_rng(-1)
    except ValueError as err:
        return err
    raise AssertionError("numpy accepted a negative seed")


def _plain_value_error():
    return ValueError("invalid literal for int() with base 10: 'x'")


@pytest.mark.parametrize(
    "factory, words",
    [
        (lambda: PermissionError(13, "Permission denied", "/x/o.h5"), ["Permission", "/x/o.h5"]),
        (lambda: OSError("Unable to open file (file signature not found)"), ["signature"]),
        (lambda: IsADirectoryError(21, "Is a directory", "/x"), ["Is a directory", "/x"]),
        (MemoryError, ["out of memory"]),
        (_numpy_refuses, ["negative"]),
    ],
    ids=["permission", "h5py-not-hdf5", "is-a-directory", "memory", "numpy-value"],
)  # fmt: skip
def test_input_errors_of_libraries_and_the_os_are_one_line(monkeypatch, capsys, factory, words):
    assert run_raising(monkeypatch, factory) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("infoprobe boom: error: ") and err.count("\n") == 1
    for word in words:
        assert word in err


@pytest.mark.parametrize(
    "factory",
    [
        lambda: TypeError("bug"),
        lambda: AttributeError("bug"),
        lambda: KeyError("bug"),
        lambda: IndexError("bug"),
        lambda: AssertionError("bug"),
        _plain_value_error,
    ],
    ids=["type", "attribute", "key", "index", "assertion", "plain-value-error"],
)
def test_bugs_keep_their_traceback(monkeypatch, factory):
    expected = type(factory())
    with pytest.raises(expected):
        run_raising(monkeypatch, factory)


def test_ctrl_c_prints_one_line_and_exits_130(monkeypatch, capsys):
    assert run_raising(monkeypatch, KeyboardInterrupt) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "infoprobe boom: interrupted\n"


def test_usage_errors_are_one_line_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(cli, "command_modules", lambda: [fake_command("boom")])
    with pytest.raises(SystemExit) as exit_info:
        main(["boom", "--k", "many"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("infoprobe boom: error: argument --k: invalid int value: 'many'")


def test_output_piped_into_head_ends_quietly():
    """The reader closes the pipe before infoprobe writes: no BrokenPipeError traceback."""
    script = textwrap.dedent(
        """
        import sys
        from infoprobe import cli

        def register(subparsers):
            subparsers.add_parser("talk").set_defaults(func=lambda a: print("x\\n" * 100000))

        cli.command_modules = lambda: [type("M", (), {"register": staticmethod(register)})]
        sys.exit(cli.main(["talk"]))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # like `| head -0`: nobody reads
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "BrokenPipeError" not in err and "Traceback" not in err and err == ""
    assert proc.returncode == 1


def test_influence_follows_probe_and_missing_modules_are_harmless(monkeypatch):
    assert cli.ORDER.index("influence") == cli.ORDER.index("probe") + 1
    assert {"taskargs", "modelargs", "argtypes"} <= cli.HELPER_MODULES
    # ORDER names without a module (here: all but three) are skipped; others go last.
    modules = [fake_command(n) for n in ("zeta", "probe", "train")]
    monkeypatch.setattr(cli, "command_modules", lambda: modules)
    parser = cli.build_parser()
    listed = [a.dest for a in parser._subparsers._group_actions[0]._choices_actions]
    assert listed == ["train", "probe", "zeta"]


# --- B: settings are validated up front; nothing is written ---------------------------


def snapshot(folder) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (to show nothing was changed)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(folder.rglob("*"))
    }


def run_command(monkeypatch, command: str, argv: list[str]) -> int:
    """``infoprobe COMMAND ARGV`` with only that command registered; argparse's exit
    status is returned like a command's."""
    module = importlib.import_module(f"infoprobe.commands.{command.replace('-', '_')}")
    monkeypatch.setattr(cli, "command_modules", lambda: [module])
    try:
        return main([command, *argv])
    except SystemExit as exit_info:
        return exit_info.code


def one_line_refusal(monkeypatch, capsys, command, argv, words=()) -> str:
    """``infoprobe COMMAND ARGV`` exits 2 with one line on stderr holding ``words``;
    returns that line."""
    assert run_command(monkeypatch, command, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"infoprobe {command}: error: "), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def assert_refused(monkeypatch, capsys, tmp_path, command, argv, words):
    (tmp_path / "keep.txt").write_text("untouched")
    before = snapshot(tmp_path)
    one_line_refusal(monkeypatch, capsys, command, argv, words)
    assert snapshot(tmp_path) == before


TRAIN = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--steps", "5", "--quiet"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--threads", "-1"], ["--threads", ">= 1", "'-1'"]),
        (["--device", "bogus"], ["--device", "'bogus'"]),
        (["--seed", "-1"], ["--seed", "0..2**63-1", "'-1'"]),
        (["--task-seed", "-1"], ["--task-seed", "0..2**63-1"]),
        (["--weight-decay", "nan"], ["--weight-decay", "finite", "'nan'"]),
        (["--grad-clip", "nan"], ["--grad-clip", "finite", "'nan'"]),
        (["--lr", "inf"], ["--lr", "finite"]),
        (["--batch-size", "0"], ["--batch-size", ">= 1"]),
        (["--warmup", "-5"], ["--warmup", ">= 0"]),
        (["--E", "0"], ["--E", ">= 1"]),
        (["--d-mlp", "-1"], ["--d-mlp", ">= 0"]),
        (["--init-gain", "nan"], ["--init-gain", "finite"]),
    ],
)
def test_train_refuses_bad_settings_before_anything(monkeypatch, capsys, tmp_path, extra, words):
    argv = [*TRAIN, *extra, "--out", str(tmp_path / "ck")]
    assert_refused(monkeypatch, capsys, tmp_path, "train", argv, words)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_train_refuses_cuda_without_a_gpu(monkeypatch, capsys, tmp_path):
    argv = [*TRAIN, "--device", "cuda", "--out", str(tmp_path / "ck")]
    assert_refused(monkeypatch, capsys, tmp_path, "train", argv, ["no CUDA device"])


def test_train_refuses_a_batch_that_cannot_fit_in_memory(monkeypatch, capsys, tmp_path):
    argv = [*TRAIN[:4], "--T", "100000", "--quiet", "--out", str(tmp_path / "ck")]
    assert_refused(
        monkeypatch, capsys, tmp_path, "train", argv, ["T=100000", "batch_size", "memory"]
    )


def test_training_config_refuses_non_finite_and_negative_values():
    for kw, field in [
        ({"weight_decay": math.nan}, "weight_decay"),
        ({"grad_clip": math.nan}, "grad_clip"),
        ({"grad_clip": -1.0}, "grad_clip"),
        ({"lr": math.inf}, "lr"),
        ({"seed": -1}, "seed"),
        ({"warmup": -1}, "warmup"),
        ({"patience": 0}, "patience"),
        ({"device": "bogus"}, "device"),
    ]:
        with pytest.raises(TrainingError, match=f"TrainConfig.{field}"):
            TrainConfig(**kw)


def test_train_refuses_an_output_under_a_file(monkeypatch, capsys, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    argv = [*TRAIN, "--out", str(tmp_path / "file" / "ck")]
    assert_refused(monkeypatch, capsys, tmp_path, "train", argv, ["file", "not a folder"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_train_refuses_an_unwritable_output_folder(monkeypatch, capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        argv = [*TRAIN, "--out", str(locked / "ck")]
        assert_refused(monkeypatch, capsys, tmp_path, "train", argv, ["not writable"])
    finally:
        locked.chmod(0o700)


def test_train_refuses_a_read_only_folder_even_as_root(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("infoprobe.base.atomic.os.access", lambda path, mode: False)
    argv = [*TRAIN, "--out", str(tmp_path / "new" / "ck")]
    assert_refused(monkeypatch, capsys, tmp_path, "train", argv, [str(tmp_path), "not writable"])


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--n", "0"], ["--n", ">= 1"]),
        (["--n", "-5"], ["--n", ">= 1"]),
        (["--cache-batch", "0"], ["--cache-batch", ">= 1"]),
        (["--batch", "0"], ["--batch", ">= 1"]),  # the old spelling, still accepted
        (["--batch", "-512"], ["--batch", ">= 1"]),
        (["--data-seed", "-1"], ["--data-seed", "0..2**63-1"]),
        (["--random-init", "-1"], ["--random-init", "0..2**63-1"]),
        (["--threads", "0"], ["--threads", ">= 1"]),
        (["--device", "bogus"], ["--device", "'bogus'"]),
    ],
)
def test_cache_refuses_bad_sizes(monkeypatch, capsys, tmp_path, extra, words):
    argv = [str(tmp_path), "--out", str(tmp_path / "acts.h5"), *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "cache", argv, words)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--alphas", "1:0:-3"], ["--alphas", "'1:0:-3'"]),
        (["--alphas", "1e-3:1e5:0"], ["--alphas", "COUNT"]),
        (["--alphas", "0:1:3"], ["--alphas", "0 < LOW"]),
        (["--alphas", "1,-2"], ["--alphas", "> 0"]),
        (["--alphas", "nan"], ["--alphas", "finite"]),
        (["--tau", "nan"], ["--tau", "finite"]),
        (["--margin", "inf"], ["--margin", "finite"]),
        (["--tau-sample", "nan"], ["--tau-sample", "finite"]),
        (["--tau", "1.5"], ["Thresholds.tau", "1.5"]),
        (["--margin", "-0.1"], ["Thresholds.margin", "-0.1"]),
        (["--tau-sample", "0"], ["Thresholds.tau_sample", "0"]),
        (["--seed", "-1"], ["--seed", "0..2**63-1"]),
        (["--epochs", "0"], ["--epochs", ">= 1"]),
        (["--block-size", "0"], ["--block-size", ">= 1"]),
        (["--lr", "nan"], ["--lr", "finite"]),
    ],
)
def test_probe_refuses_bad_settings(monkeypatch, capsys, tmp_path, extra, words):
    cache = tmp_path / "acts.h5"
    cache.write_bytes(b"stand-in")
    argv = [str(cache), "--out", str(tmp_path / "probes.h5"), *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "probe", argv, words)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"tau": math.nan}, "tau"),
        ({"tau": 1.5}, "tau"),
        ({"tau": 0.0}, "tau"),
        ({"margin": math.inf}, "margin"),
        ({"margin": -0.2}, "margin"),
        ({"tau_sample": math.nan}, "tau_sample"),
        ({"tau_sample": 0.0}, "tau_sample"),
        ({"tau_sample": 2.0}, "tau_sample"),
        ({"gate": ("shuffled", "bogus")}, "gate"),
    ],
)
def test_thresholds_refuse_non_finite_and_out_of_range_values(kw, field):
    with pytest.raises(ProbeError, match=f"Thresholds.{field}"):
        Thresholds(**kw)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--workers", "0"], ["--workers", ">= 1"]),
        (["--threads", "-2"], ["--threads", ">= 1"]),
        (["--seeds", "0"], ["--seeds", ">= 1"]),
        (["--seeds", "1000000", "--estimate"], ["--seeds", "at most 1000"]),
    ],
)
def test_reproduce_refuses_bad_settings_before_writing(monkeypatch, capsys, tmp_path, extra, words):
    argv = ["head-count", "--out", str(tmp_path / "sweep"), "--quiet", *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "reproduce", argv, words)


def test_failures_of_a_command_that_ran_go_to_stderr(monkeypatch, capsys, tmp_path):
    """Exit 1 (the command ran, its result failed): the message is on stderr, not stdout."""
    import infoprobe.reproduce
    import infoprobe.train.save as train_save
    from infoprobe.reproduce import SweepError
    from infoprobe.train.config import NonFiniteLossError, TrainResult

    def diverges(*args, **kwargs):
        raise NonFiniteLossError(3, TrainResult(model=None))

    monkeypatch.setattr(train_save, "train_and_save", diverges)
    assert run_command(monkeypatch, "train", [*TRAIN, "--out", str(tmp_path / "ck")]) == 1
    out, err = capsys.readouterr()
    assert "non-finite" not in out and err.startswith("infoprobe train: error: non-finite")

    def sweep_fails(*args, **kwargs):
        raise SweepError("1 run failed: simulated")

    monkeypatch.setattr(infoprobe.reproduce, "reproduce", sweep_fails)
    argv = ["head-count", "--out", str(tmp_path / "sweep"), "--quiet"]
    assert run_command(monkeypatch, "reproduce", argv) == 1
    out, err = capsys.readouterr()
    assert "simulated" not in out and err == "infoprobe reproduce: error: 1 run failed: simulated\n"


# ----------------------------------------------------------------------------- --overwrite


def foreign_folder(tmp_path):
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "notes.txt").write_text("a user's own file")
    return folder


PREDICT = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--heads", "2,2", "--samples", "8"]


def test_predict_overwrite_never_replaces_a_foreign_folder(monkeypatch, capsys, tmp_path):
    folder = foreign_folder(tmp_path)
    argv = [*PREDICT, "--out", str(folder), "--overwrite"]
    assert_refused(monkeypatch, capsys, tmp_path, "predict", argv, [str(folder), "--overwrite"])


def test_overwrite_replaces_only_infoprobe_outputs_of_the_same_kind(tmp_path):
    from infoprobe.base.atomic import OutputExistsError, atomic_output
    from infoprobe.compare.files import write_comparisons

    folder = foreign_folder(tmp_path)
    with pytest.raises(OutputExistsError, match="not an infoprobe comparison file"):
        write_comparisons(folder, {}, overwrite=True)
    other = tmp_path / "other.json"
    other.write_text('{"format": "somebody.else"}')
    with pytest.raises(OutputExistsError, match=r"'somebody\.else'"):
        write_comparisons(other, {}, overwrite=True)
    ours = write_comparisons(tmp_path / "c.json", {})
    write_comparisons(ours, {}, overwrite=True)  # our own comparison file: replaced
    with pytest.raises(OutputExistsError, match=r"expected 'infoprobe\.report'"):
        with atomic_output(ours, overwrite=True, what="report folder", kind="infoprobe.report"):
            pass
    assert (folder / "notes.txt").read_text() == "a user's own file"
    assert other.read_text() == '{"format": "somebody.else"}'


def test_report_overwrite_never_wipes_a_foreign_folder(tmp_path):
    from infoprobe.base.atomic import OutputExistsError
    from infoprobe.report.build import write_report

    folder = foreign_folder(tmp_path)
    with pytest.raises(OutputExistsError, match="not an infoprobe report folder"):
        write_report(folder, inputs=None, overwrite=True)
    assert (folder / "notes.txt").is_file()


def test_outputs_under_a_file_are_one_clear_error(tmp_path):
    from infoprobe.base.atomic import OutputPathError
    from infoprobe.compare.files import write_comparisons

    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="is a file, not a folder"):
        write_comparisons(tmp_path / "file" / "c.json", {})


def test_run_overwrite_refuses_a_folder_that_is_not_a_run_folder(monkeypatch, capsys, tmp_path):
    folder = foreign_folder(tmp_path)
    argv = [*TRAIN, "--out", str(folder), "--overwrite"]
    assert_refused(monkeypatch, capsys, tmp_path, "run", argv, ["not an infoprobe run folder"])


# ----------------------------------------------------------------------------- pipeline inputs


@pytest.fixture(scope="module")
def probed_files(tmp_path_factory):
    from test_report import write_pipeline_files

    return write_pipeline_files(tmp_path_factory.mktemp("files"))


def test_a_trained_cache_is_refused_as_the_random_init_control(probed_files, tmp_path):
    from infoprobe.pipeline.probing import run_probe
    from infoprobe.probes.errors import ControlMismatchError

    acts = probed_files / "acts.h5"
    with pytest.raises(ControlMismatchError, match="random_init_seed"):
        run_probe(acts, tmp_path / "p.h5", control_path=acts, progress=False)
    assert not (tmp_path / "p.h5").exists()


def test_the_random_init_control_of_another_checkpoint_is_refused(probed_files, tmp_path):
    from test_report import write_pipeline_files

    from infoprobe.pipeline.caching import cache_checkpoint
    from infoprobe.pipeline.probing import run_probe
    from infoprobe.probes.errors import ControlMismatchError

    other = write_pipeline_files(tmp_path / "other", model_seed=1)
    control = tmp_path / "control.h5"
    cache_checkpoint(other / "model", control, n=400, batch_size=200, data_seed=5,
                     random_init_seed=3, sites="residual,attention", progress=False)  # fmt: skip
    with pytest.raises(ControlMismatchError, match="checkpoint_sha256"):
        run_probe(probed_files / "acts.h5", tmp_path / "p.h5", control_path=control,
                  progress=False)  # fmt: skip


def test_a_nan_state_names_the_dataset_and_its_own_index(probed_files, tmp_path):
    import shutil

    import h5py

    from infoprobe.pipeline.probing import probe_cache
    from infoprobe.probes.errors import NonFiniteActivationError

    acts = tmp_path / "acts.h5"
    shutil.copy(probed_files / "acts.h5", acts)
    with h5py.File(acts, "r+") as f:
        f["acts/blocks.1.hook_resid_post"][7, 2, 3] = np.nan
    with pytest.raises(NonFiniteActivationError, match=r"blocks\.1\.hook_resid_post.*\(7, 2, 3\)"):
        probe_cache(acts, progress=False)


def test_run_settings_are_validated_before_any_file_is_touched():
    from infoprobe.pipeline.folder import RunFolderError
    from infoprobe.pipeline.settings import RunSettings
    from infoprobe.probes.errors import ProbeInputError, SplitTooSmallError

    with pytest.raises(RunFolderError, match="n_cache"):
        RunSettings(n_cache=0)
    with pytest.raises(SplitTooSmallError, match="use more samples"):
        RunSettings(n_cache=10)
    with pytest.raises(ProbeInputError, match="probe"):
        RunSettings(probe="bogus")


def test_run_overwrite_with_a_bad_setting_keeps_the_existing_outputs(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "run"
    argv = [*TRAIN, "--n-cache", "200", "--out", str(folder)]
    assert run_command(monkeypatch, "run", argv) == 0
    capsys.readouterr()
    argv = [*TRAIN, "--n-cache", "10", "--out", str(folder), "--overwrite"]
    assert_refused(monkeypatch, capsys, tmp_path, "run", argv, ["split", "use more samples"])


def test_a_diverging_run_is_one_line_and_the_folder_stays_resumable(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "run"
    wild = [*TRAIN, "--n-cache", "200", "--lr", "1e6", "--grad-clip", "1e9", "--out", str(folder)]
    assert run_command(monkeypatch, "run", wild) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stage 'train' diverged" in err and "step" in err
    assert sorted(p.name for p in folder.iterdir()) == ["run.json"]
    tame = [*TRAIN, "--n-cache", "200", "--out", str(folder)]
    assert run_command(monkeypatch, "run", tame) == 0  # same folder, no --overwrite needed
    assert (folder / "comparison.json").is_file()


def test_probe_checkpoint_refuses_a_task_that_does_not_fit_before_writing(
    probed_files, monkeypatch, capsys, tmp_path
):
    import json
    import shutil

    bare = tmp_path / "bare"  # a checkpoint made outside infoprobe: no task recorded
    shutil.copytree(probed_files / "model", bare)
    meta = json.loads((bare / "checkpoint.json").read_text())
    del meta["task"]
    (bare / "checkpoint.json").write_text(json.dumps(meta))
    argv = [str(bare), "--task", "intrinsic-dim", "--D", "2", "--T", "9",
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "probe-checkpoint", argv, ["T=9", "n_ctx"])


def test_temp_files_of_killed_runs_are_removed(tmp_path):
    from infoprobe.base.atomic import atomic_output

    out = tmp_path / "c.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f"c.json.tmp-{dead}"
    stale.write_text("half")
    live = tmp_path / f"c.json.tmp-{os.getppid()}"  # a running process: left alone
    live.write_text("in progress")
    with atomic_output(out) as tmp:
        tmp.write_text("{}")
    assert not stale.exists() and live.exists() and out.read_text() == "{}"


def test_cache_overwrite_never_replaces_a_foreign_file(probed_files, tmp_path):
    from infoprobe.hooks import NotACacheError
    from infoprobe.pipeline.caching import cache_checkpoint

    notes = tmp_path / "notes.txt"
    notes.write_text("a user's own file")
    with pytest.raises(NotACacheError, match="not an infoprobe activation cache"):
        cache_checkpoint(probed_files / "model", notes, n=20, batch_size=10, overwrite=True,
                         progress=False)  # fmt: skip
    assert notes.read_text() == "a user's own file"


@pytest.mark.parametrize("option", [{"workers": 0}, {"threads": -2}])
def test_reproduce_refuses_bad_workers_before_writing_anything(option, tmp_path):
    from infoprobe.reproduce import reproduce
    from infoprobe.reproduce.backends import BackendError

    out = tmp_path / "sweep"
    with pytest.raises(BackendError, match=">= 1"):
        reproduce("triangle", profile="quick", out=out, **option)
    assert not out.exists()


def test_a_full_disk_while_writing_is_one_line_naming_the_file(monkeypatch, capsys, tmp_path):
    """safetensors reports a failed write (here: no space left) as its own error type,
    without the file: train says which file could not be written, and leaves no
    checkpoint (nor a half one) behind."""
    import safetensors.torch
    from safetensors import SafetensorError

    def disk_full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", disk_full)
    out = tmp_path / "ck"
    err = one_line_refusal(monkeypatch, capsys, "train", [*TRAIN, "--out", str(out)])
    assert str(out / "model.safetensors") in err and "No space left on device" in err, err
    assert not out.exists() and not any(p.name.startswith("ck") for p in tmp_path.iterdir())


def test_a_huge_py_beside_a_checkpoint_is_refused_before_it_is_hashed(tmp_path):
    """Every .py file in a foreign checkpoint's folder is hashed as the model's code; one
    far larger than source code (here a sparse 17 MiB file) is refused, naming it."""
    from infoprobe.foreign.errors import ForeignModelError
    from infoprobe.foreign.trust import MAX_CODE_BYTES, code_files

    (tmp_path / "model.py").write_text("def build():\n    pass\n")
    huge = tmp_path / "data.py"
    with open(huge, "wb") as f:
        f.truncate(MAX_CODE_BYTES + 1)
    with pytest.raises(ForeignModelError, match=f"{huge}: {MAX_CODE_BYTES + 1} bytes"):
        code_files("model:build", tmp_path)
    huge.unlink()
    assert code_files("model:build", tmp_path) == [tmp_path / "model.py"]
