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

from infoprobe.caching import cache_checkpoint
from infoprobe.checkpoint import save_checkpoint
from infoprobe.influence import InfluenceSettings, influence_for_cache, read_influence
from infoprobe.influence import store as influence_store
from infoprobe.model import InfoFlowTransformer, ModelConfig
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
