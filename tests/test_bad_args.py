"""Bad arguments and a full disk: one clear line (exit 2), no crash, nothing half-written.

A full disk is met for real on a small tmpfs where this machine lets the test mount one
(root); the same refusals are also forced by patching the free-space and allocation
calls, so they are checked everywhere.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_bad_input import assert_refused, run_command

from infoprobe.checkpoint import save_checkpoint
from infoprobe.influence import InfluenceSettings, influence_for_cache, read_influence
from infoprobe.influence import store as influence_store
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.tasks import make_task

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A random-init checkpoint and its cache of 400 samples (T = 6, d = 2)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("small")
    task = make_task("intrinsic-dim", T=6, D=2, seed=0)
    cfg = ModelConfig(
        d_in=task.d, n_ctx=task.T, d_model=12, heads=(2, 2), d_mlp=16, d_readout=8,
        d_out=task.d_out,
    )  # fmt: skip
    save_checkpoint(root / "ckpt", InfoFlowTransformer(cfg, seed=7), task)
    cache_checkpoint(root / "ckpt", root / "acts.h5", n=400, sites="layers", batch_size=200,
                     progress=False)  # fmt: skip
    return root


# --- a full disk --------------------------------------------------------------------------


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.fixture
def full_disk(tmp_path):
    """A 16 KiB tmpfs (skipped where it cannot be mounted): smaller than any output here."""
    folder = tmp_path / "disk"
    if not _mount_tmpfs(folder, "16k"):
        pytest.skip("cannot mount a tmpfs here (needs root and mount)")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def _infoprobe(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = "import sys; from infoprobe.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize("command", ["influence", "probe"])
def test_a_full_disk_is_one_line_not_a_crash(small_run, full_disk, command):
    out = full_disk / "out.h5"
    if command == "influence":
        argv = [command, str(small_run / "ckpt"), "--cache", str(small_run / "acts.h5")]
    else:
        argv = [command, str(small_run / "acts.h5")]
    done = _infoprobe(*argv, "--out", str(out), "--quiet")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"infoprobe {command}: error: ") and str(out) in done.stderr
    assert list(full_disk.iterdir()) == []


def _flow(small_run, out, **kw):
    return influence_for_cache(
        small_run / "ckpt", small_run / "acts.h5", out, n=200,
        settings=InfluenceSettings(block_size=50), progress=False, **kw,
    )  # fmt: skip


def _influence_cli(monkeypatch, small_run, out) -> int:
    argv = [str(small_run / "ckpt"), "--cache", str(small_run / "acts.h5"), "--out", str(out),
            "--n", "200", "--block-size", "50", "--quiet"]  # fmt: skip
    return run_command(monkeypatch, "influence", argv)


def test_influence_refuses_a_file_the_disk_cannot_hold_before_any_work(
    monkeypatch, capsys, small_run, tmp_path
):
    free = 100_000  # bytes; the file needs 200 samples x 3 layers x 7 x 6 x 4 B = 201,600
    usage = shutil.disk_usage(tmp_path)._replace(free=free)
    monkeypatch.setattr(influence_store.shutil, "disk_usage", lambda _: usage)
    argv = [str(small_run / "ckpt"), "--cache", str(small_run / "acts.h5"),
            "--out", str(tmp_path / "flow.h5"), "--n", "200", "--quiet"]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "influence", argv, ["flow.h5", "0.1 MB free"])


def test_influence_on_a_full_disk_leaves_the_partial_file_to_resume(
    monkeypatch, capsys, small_run, tmp_path
):
    """The disk fills while a run is stopped: the rerun refuses in one line, the partial
    file is unchanged, and once there is space the rerun finishes it to the same scores."""
    out = tmp_path / "flow.h5"

    def stop(n_committed):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _flow(small_run, out, on_block=stop)
    before = out.read_bytes()

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(influence_store.os, "posix_fallocate", no_space, raising=False)
        assert _influence_cli(patch, small_run, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out) in err and "No space left" in err, err
    assert out.read_bytes() == before
    assert _influence_cli(monkeypatch, small_run, out) == 0
    resumed = read_influence(out)
    whole = _flow(small_run, tmp_path / "whole.h5")
    np.testing.assert_array_equal(resumed.scores, whole.scores)
    np.testing.assert_array_equal(resumed.aggregate, whole.aggregate)


def test_influence_reserves_its_whole_file_before_the_first_block(small_run, tmp_path):
    """Every byte of a new influence file is allocated on disk before any block is
    written, so a disk that fills during the run cannot fail a write inside HDF5."""
    out = tmp_path / "flow.h5"
    sizes = []

    def stop(n_committed):
        st = out.stat()
        sizes.append((st.st_blocks * 512, st.st_size))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _flow(small_run, out, on_block=stop)
    ((allocated, size),) = sizes
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate on this platform")
    assert size >= 200 * 3 * 7 * 6 * 4  # the scores alone
    assert allocated >= size


# --- numbers: one argument type per kind, everywhere ---------------------------------------

BIG = str(2**64)  # torch's generators overflow at 2**64; the bound is 2**63 - 1
TRAIN = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--steps", "2", "--quiet"]


@pytest.mark.parametrize(
    "command, argv, option",
    [
        ("train", [*TRAIN, "--seed", BIG], "--seed"),
        ("train", [*TRAIN, "--seed", str(2**63)], "--seed"),
        ("train", [*TRAIN, "--seeds", f"0,{BIG}"], "--seeds"),
        ("train", [*TRAIN, "--task-seed", BIG], "--task-seed"),
        ("run", [*TRAIN, "--seed", BIG], "--seed"),
        ("cache", ["CKPT", "--out", "a.h5", "--random-init", BIG], "--random-init"),
        ("cache", ["CKPT", "--out", "a.h5", "--data-seed", BIG], "--data-seed"),
        ("influence", ["CKPT", "--cache", "a.h5", "--out", "f.h5", "--random-init", BIG],
         "--random-init"),
        ("influence", ["CKPT", "--cache", "a.h5", "--out", "f.h5", "--seed", BIG], "--seed"),
        ("probe", ["a.h5", "--out", "p.h5", "--seed", BIG], "--seed"),
        ("predict", ["--task", "intrinsic-dim", "--samples", "4", "--out", "s.h5",
                     "--data-seed", BIG], "--data-seed"),
    ],
)  # fmt: skip
def test_seeds_beyond_int64_are_refused_as_the_line_is_parsed(
    monkeypatch, capsys, tmp_path, command, argv, option
):
    monkeypatch.chdir(tmp_path)  # the relative paths above name files that do not exist
    words = [f"argument {option}", "expected", "0..2**63-1"]
    assert_refused(monkeypatch, capsys, tmp_path, command, argv, words)


def test_the_largest_seed_trains(monkeypatch, tmp_path):
    """2**63 - 1 is a seed like any other (the whole range is usable)."""
    argv = [*TRAIN, "--seed", str(2**63 - 1), "--n-val", "64", "--n-test", "64",
            "--out", str(tmp_path / "ckpt")]  # fmt: skip
    assert run_command(monkeypatch, "train", argv) == 0


GRID = ["--task", "intrinsic-dim", "--D", "2", "--T", "8", "--heads", "2,2", "--grid"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--grid-T", "0,8"], ["--grid-T", ">= 1", "'0,8'"]),
        (["--grid-T", "-8"], ["--grid-T", ">= 1"]),
        (["--grid-heads", "1,1;0,2"], ["--heads", ">= 1"]),
    ],
)
def test_grid_values_below_one_are_refused(monkeypatch, capsys, tmp_path, extra, words):
    assert_refused(monkeypatch, capsys, tmp_path, "predict", [*GRID, *extra], words)


def test_library_seeds_are_checked_against_the_same_range():
    from infoprobe.influence import InfluenceSettingsError
    from infoprobe.model import ConfigError
    from infoprobe.train.config import TrainConfig, TrainingError

    cfg = ModelConfig(d_in=2, n_ctx=3)
    for bad in (2**63, 2**64, -1):
        with pytest.raises(TrainingError, match=r"TrainConfig\.seed .*0\.\.2\*\*63-1"):
            TrainConfig(seed=bad)
        with pytest.raises(InfluenceSettingsError, match="seed"):
            InfluenceSettings(seed=bad)
        with pytest.raises(ConfigError, match=r"seed: expected an integer in 0\.\.2\*\*63-1"):
            InfoFlowTransformer(cfg, seed=bad)
    assert TrainConfig(seed=2**63 - 1).seed == 2**63 - 1


# --- options silently ignored or misread -----------------------------------------------------


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--grid-heads", ";;"], ["--grid-heads", "';;'"]),
        (["--grid-heads", "1,1;;2,2"], ["--grid-heads", "none empty"]),
        (["--orientation", ""], ["--orientation", "got ''"]),
        (["--plot", "grid.txt"], ["--plot", ".png", "'grid.txt'"]),
    ],
)
def test_predict_refuses_empty_or_unknown_values(monkeypatch, capsys, tmp_path, extra, words):
    assert_refused(monkeypatch, capsys, tmp_path, "predict", [*GRID, *extra], words)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--plot", "grid.png"], ["--plot", "--grid"]),
        (["--grid-T", "8,16"], ["--grid-T", "--grid"]),
        (["--data-seed", "3"], ["--data-seed", "--samples"]),
    ],
)
def test_predict_refuses_options_that_would_be_ignored(monkeypatch, capsys, tmp_path, extra, words):
    argv = ["--task", "intrinsic-dim", "--D", "2", "--T", "8", *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "predict", argv, words)


def test_predict_grid_json_prints_the_grid_as_json(monkeypatch, capsys):
    import json

    argv = [*GRID, "--grid-T", "8,16", "--grid-heads", "1,1;2,2", "--json"]
    assert run_command(monkeypatch, "predict", argv) == 0
    printed = json.loads(capsys.readouterr().out)
    cells = {(tuple(c["heads"]), c["T"]): c for c in printed["grid"]}
    assert set(cells) == {(h, T) for h in ((1, 1), (2, 2)) for T in (8, 16)}
    # T = 8 with heads (2, 2) is the prediction itself: the grid cell must agree with it
    cell, prediction = cells[((2, 2), 8)], printed["prediction"]
    assert cell["efficient"] == (prediction["verdict"] == "efficient")
    assert cell["alpha"] == pytest.approx(prediction["exponent_at_T"])


@pytest.mark.parametrize(
    "extra",
    [["--task", "intrinsic-dim"], ["--samples", "5"], ["--kth-law", "rank"], ["--heads", "3,3"],
     ["--T", "8"], ["--grid"]],
    ids=["task", "samples", "kth-law", "heads", "task-parameter", "grid"],
)  # fmt: skip
def test_predict_cache_refuses_the_options_it_does_not_use(
    monkeypatch, capsys, small_run, tmp_path, extra
):
    argv = ["--cache", str(small_run / "acts.h5"), "--out", str(tmp_path / "pred.h5"), *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "predict", argv, ["--cache", extra[0]])


def test_rollout_threshold_beyond_t_plus_one_is_refused():
    """Rows of rollout weights sum to 1, so r/(T+1) > 1 would empty every set."""
    from infoprobe.attention.rollout import RolloutError, rollout_sets

    T = 5
    identity = np.broadcast_to(np.eye(T + 1), (2, 3, T + 1, T + 1))  # [L+1, n, T+1, T+1]
    assert rollout_sets(identity, T + 1).sum() == identity.sum()  # weight 1 reaches r = T+1
    with pytest.raises(RolloutError, match=r"threshold_ratio: expected at most T\+1 = 6"):
        rollout_sets(identity, 1000)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--rollout-threshold", "0"], ["--rollout-threshold", "> 0"]),
        (["--rollout-weight", "1.5"], ["--rollout-weight", "[0, 1]"]),
    ],
)
def test_compare_refuses_rollout_values_as_the_line_is_parsed(
    monkeypatch, capsys, tmp_path, extra, words
):
    argv = ["pred.h5", "probes.h5", "--out", "c.json", "--rollout", *extra]
    assert_refused(monkeypatch, capsys, tmp_path, "compare", argv, words)


@pytest.mark.parametrize("ranks", ["", "0", "1.5", "1,-2"])
def test_probe_refuses_attention_ranks_that_are_not_ranks(monkeypatch, capsys, tmp_path, ranks):
    """A rank is a positive integer (1 = most attended key): '1.5' used to read as 1 and
    '' as no ranks at all."""
    cache = tmp_path / "acts.h5"
    cache.write_bytes(b"stand-in")
    argv = [str(cache), "--out", str(tmp_path / "probes.h5"), "--targets", "roles",
            "--ranks", ranks]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "probe", argv, ["--ranks", repr(ranks)])


def test_compare_refuses_a_rollout_threshold_that_empties_every_set(monkeypatch, capsys, tmp_path):
    from test_report import write_pipeline_files

    files = write_pipeline_files(tmp_path / "files")
    argv = [str(files / "pred.h5"), str(files / "probes.h5"), "--cache", str(files / "acts.h5"),
            "--rollout", "--rollout-threshold", "1000", "--out", str(tmp_path / "c")]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "compare", argv, ["at most T+1", "1000"])


@pytest.mark.parametrize("missing", ["history", "best_val_nmse", "analyses"])
def test_a_record_missing_a_field_it_is_read_for_is_refused(tmp_path, missing):
    import json

    from infoprobe.reproduce.grid import ReproduceError
    from infoprobe.reproduce.runs import RECORD, RECORD_FORMAT, RunStore

    store = RunStore(tmp_path)
    store.run_dir("r1").mkdir(parents=True)
    record = {"format": RECORD_FORMAT, "schema_version": 2, "run_id": "r1", "seed": 0,
              "best_val_nmse": 0.1, "test_nmse": 0.2, "best_step": 2, "seconds": 1.0,
              "train_seconds": 1.0, "history": [], "analyses": {}}  # fmt: skip
    (store.run_dir("r1") / RECORD).write_text(json.dumps(record))
    assert store.load("r1")["history"] == []  # complete: read back
    del record[missing]
    (store.run_dir("r1") / RECORD).write_text(json.dumps(record))
    with pytest.raises(ReproduceError, match=rf"field '{missing}' missing"):
        store.load("r1")


@pytest.mark.parametrize("split", ["0.5,0.5,0.5", "0.7,0.3", "1.2,-0.1,-0.1", "a,b,c"])
def test_probe_refuses_a_split_that_is_not_one_as_the_line_is_parsed(
    monkeypatch, capsys, tmp_path, split
):
    cache = tmp_path / "acts.h5"
    cache.write_bytes(b"stand-in")
    argv = [str(cache), "--out", str(tmp_path / "probes.h5"), "--split", split]
    assert_refused(monkeypatch, capsys, tmp_path, "probe", argv, ["argument --split", repr(split)])


@pytest.mark.parametrize(
    "command, argv",
    [("cache", ["CKPT", "--out", "a.h5"]), ("run", [*TRAIN, "--out", "r"]),
     ("probe-checkpoint", ["CKPT", "--out", "r"])],
)  # fmt: skip
@pytest.mark.parametrize("sites", ["bogus", "re:(", "residual,bogus"])
def test_sites_no_model_has_are_refused_as_the_line_is_parsed(
    monkeypatch, capsys, tmp_path, command, argv, sites
):
    monkeypatch.chdir(tmp_path)
    words = ["argument --sites", "hook site"]
    assert_refused(monkeypatch, capsys, tmp_path, command, [*argv, "--sites", sites], words)
