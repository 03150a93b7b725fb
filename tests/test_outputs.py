"""Every output: refused when it exists (without --overwrite), replaced only when it is
infoprobe's own output of the same kind (with --overwrite), written by one process at a
time, under temporary names within the name limit that a later run cleans up exactly."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from quick_reports import blank_figures
from test_bad_input import TRAIN, assert_refused, run_command

from infoprobe.base.atomic import (
    OutputBusyError,
    OutputExistsError,
    atomic_output,
    refuse_existing,
    remove_stale_temps,
    temp_name,
)
from infoprobe.base.markers import figure_bytes, mark_html, mark_png, output_format

pytestmark = pytest.mark.usefixtures("one_thread")

PREDICT = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--heads", "2,2"]
GRID = [*PREDICT, "--grid", "--grid-T", "4,8"]


def dead_pid() -> int:
    """The pid of a process that has exited."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return int(out.stdout)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Checkpoint, cache, probe results and predicted sets (test_report's tiny model)."""
    from test_report import write_pipeline_files

    return write_pipeline_files(tmp_path_factory.mktemp("files"))


# ------------------------------------------------------ refuse, or replace only our own kind


def user_file(path: Path, folder: bool) -> Path:
    """A user's own file (or folder holding one) at ``path``."""
    if folder:
        path.mkdir(parents=True)
        (path / "notes.txt").write_text("a user's own file")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a user's own file")
    return path


def every_output(files: Path, out: Path) -> dict[str, tuple[str, list[str], Path, bool]]:
    """Each command's output path: name -> (command, argv, the path it writes, a folder)."""
    model, acts = str(files / "model"), str(files / "acts.h5")
    pred, probes = str(files / "pred.h5"), str(files / "probes.h5")
    sweep = out / "sweep"
    small_cache = ["--n", "20", "--cache-batch", "10"]
    return {
        "train checkpoint": ("train", [*TRAIN, "--out", str(out)], out, True),
        "cache": ("cache", [model, "--out", str(out), *small_cache], out, False),
        "probe results": ("probe", [acts, "--out", str(out)], out, False),
        "influence file": ("influence", [model, "--cache", acts, "--out", str(out)], out, False),
        "predicted sets": ("predict", [*PREDICT, "--samples", "8", "--out", str(out)], out, False),
        "predicted sets of a cache": ("predict", ["--cache", acts, "--out", str(out)], out, False),
        "grid figure": ("predict", [*GRID, "--plot", f"{out}.png"], Path(f"{out}.png"), False),
        "comparison": ("compare", [pred, probes, "--out", str(out)], out, False),
        "report folder": ("report", [pred, probes, "--cache", acts, "--out", str(out)], out, True),
        "run folder": ("run", [*TRAIN, "--n-cache", "200", "--out", str(out)], out, True),
        "probe-checkpoint folder": ("probe-checkpoint", [model, "--out", str(out)], out, True),
        "sweep results": ("reproduce", ["triangle", "--seeds", "1", "--out", str(sweep)],
                          sweep / "results.json", False),
        "sweep report": ("reproduce", ["triangle", "--seeds", "1", "--out", str(sweep)],
                         sweep / "report.html", False),
        "sweep figure": ("reproduce", ["triangle", "--seeds", "1", "--out", str(sweep)],
                         sweep / "nmse_vs_T.png", False),
        "demo index": ("demo", ["--out", str(out), "--steps", "5", "--sequential"],
                       out / "index.html", False),
    }  # fmt: skip


OUTPUTS = list(every_output(Path("f"), Path("o")))


@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_every_output_refuses_a_file_that_is_not_its_own(
    files, monkeypatch, capsys, tmp_path, name, overwrite
):
    command, argv, path, folder = every_output(files, tmp_path / "out")[name]
    user_file(path, folder)
    flag = ["--overwrite"] if overwrite and command != "reproduce" else []  # it has none
    assert_refused(monkeypatch, capsys, tmp_path, command, [*argv, *flag], [str(path)])


def test_the_sweep_checks_its_figure_names(files, tmp_path):
    from infoprobe.reproduce.claims import get_claim

    names = {spec.name for spec in get_claim("triangle").figures}
    assert "nmse_vs_T" in names  # the figure the table above puts a user file at


def test_a_grid_figure_replaces_only_its_own_kind(monkeypatch, capsys, tmp_path):
    for suffix in ("png", "pdf", "svg"):
        plot = tmp_path / f"grid.{suffix}"
        argv = [*GRID, "--plot", str(plot)]
        assert run_command(monkeypatch, "predict", argv) == 0
        first = plot.read_bytes()
        assert output_format(plot) == "infoprobe.predict-grid-figure"
        assert run_command(monkeypatch, "predict", argv) == 2  # exists: not without --overwrite
        assert plot.read_bytes() == first
        assert run_command(monkeypatch, "predict", [*argv, "--overwrite"]) == 0  # its own kind
        assert output_format(plot) == "infoprobe.predict-grid-figure"
        capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.pdf", "grid.png", "grid.svg"]


def test_markers_name_the_kind_and_nothing_else(tmp_path):
    from matplotlib.figure import Figure

    from infoprobe.report.build import render_png

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    png = render_png(fig)
    cases = {
        "a.png": mark_png(png, "infoprobe.x"),
        "b.html": mark_html("<!doctype html><html><head><title>t</title></head></html>", "x.y"),
        "c.html": mark_html("<p>no head</p>", "x.z"),
        "d.pdf": figure_bytes(fig, "pdf", "infoprobe.d"),
        "e.svg": figure_bytes(fig, "svg", "infoprobe.e"),
        "f.png": figure_bytes(fig, "png", "infoprobe.f"),
    }
    expected = dict(zip(cases, ["infoprobe.x", "x.y", "x.z", "infoprobe.d", "infoprobe.e",
                                "infoprobe.f"], strict=True))  # fmt: skip
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        assert output_format(path) == expected[name], name
        refuse_existing(path, True, kind=expected[name])  # its own kind: may be replaced
        with pytest.raises(OutputExistsError, match="not an infoprobe"):
            refuse_existing(path, True, kind="infoprobe.other")
    # the marked PNG is still a valid PNG: matplotlib reads it back pixel for pixel
    from matplotlib.image import imread

    (tmp_path / "plain.png").write_bytes(png)
    assert (imread(tmp_path / "a.png") == imread(tmp_path / "plain.png")).all()
    for plain in (png, b"<html><head></head></html>", b'{"a": 1}', b"just text"):
        (tmp_path / "plain").write_bytes(plain)
        assert output_format(tmp_path / "plain") is None


# ------------------------------------------------------ --overwrite checks every setting first


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    from infoprobe.cli import main

    with blank_figures():  # the outputs' kinds are tested, not the report's figures
        assert main(["run", *TRAIN, "--n-cache", "200", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "command, extra, words",
    [
        ("run", ["--sites", "bogus"], ["unknown hook site 'bogus'"]),
        ("run", ["--sites", "attention"], ["--sites", "probe", "blocks.0.hook_resid_pre"]),
        ("run", ["--sites", "layers"], ["--sites", "compare", "hook_pattern"]),
        ("probe-checkpoint", ["--sites", "re:("], ["regex", "invalid"]),
    ],
    ids=["run-bogus", "run-attention", "run-layers", "probe-checkpoint-bad-regex"],
)
def test_overwrite_with_a_bad_site_changes_nothing(
    finished_run, monkeypatch, capsys, tmp_path, command, extra, words
):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    if command == "run":
        argv = [*TRAIN, "--n-cache", "200", "--out", str(folder), *extra, "--overwrite"]
    else:
        argv = [str(folder / "checkpoint"), "--out", str(folder), *extra, "--overwrite"]
    assert_refused(monkeypatch, capsys, tmp_path, command, argv, words)


def test_overwrite_never_deletes_a_user_folder_where_a_stage_writes(
    finished_run, monkeypatch, capsys, tmp_path
):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    manifest = json.loads((folder / "run.json").read_text())
    del manifest["stages"]["compare"]  # report/ is no longer recorded ...
    (folder / "run.json").write_text(json.dumps(manifest))
    shutil.rmtree(folder / "report")
    user_file(folder / "report", folder=True)  # ... and holds a user's file
    argv = [*TRAIN, "--n-cache", "200", "--out", str(folder), "--overwrite"]
    words = [str(folder / "report"), "stage 'compare'", "infoprobe.report"]
    assert_refused(monkeypatch, capsys, tmp_path, "run", argv, words)


# ------------------------------------------------------------ stale temporary files


def test_stale_temps_match_the_literal_name_and_only_files(tmp_path):
    dead = dead_pid()
    out = tmp_path / "*"  # a legal file name that is also a glob pattern
    unrelated = tmp_path / f"notes.tmp-{dead}"
    unrelated.write_text("a user's own file")
    folder = tmp_path / f"keep.json.tmp-{dead}"
    folder.mkdir()
    (folder / "inside.txt").write_text("keep")
    named_folder = tmp_path / f"*.tmp-{dead + 1}"  # our name, but a folder: never removed
    named_folder.mkdir()
    not_a_pid = tmp_path / "*.tmp-12x"
    not_a_pid.write_text("keep")
    link = tmp_path / f"*.tmp-{dead + 2}"
    link.symlink_to(unrelated)
    ours = tmp_path / f"*.tmp-{dead}"
    ours.write_text("half")
    with atomic_output(out) as tmp:
        tmp.write_text("{}")
    assert out.read_text() == "{}"
    assert not ours.exists()
    assert unrelated.read_text() == "a user's own file" and (folder / "inside.txt").is_file()
    assert named_folder.is_dir() and not_a_pid.is_file() and link.is_symlink()


def test_a_live_process_temp_is_kept(tmp_path):
    out = tmp_path / "c.json"
    live = tmp_path / f"c.json.tmp-{os.getppid()}"
    live.write_text("in progress")
    assert remove_stale_temps(out) == []
    assert live.is_file()


def test_a_long_legal_name_has_legal_temp_names(monkeypatch, capsys, tmp_path):
    name = "p" * 247 + ".h5"  # 250 bytes: legal, but NAME.tmp-<pid> would not be
    out = tmp_path / name
    assert run_command(monkeypatch, "predict", [*PREDICT, "--samples", "8", "--out", str(out)]) == 0
    assert out.is_file() and output_format(out) == "infoprobe.predicted-sets"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    tmp = temp_name(tmp_path / ("é" * 127))  # 254 bytes of UTF-8
    assert len(tmp.name.encode()) <= 255 and tmp.name.endswith(f".tmp-{os.getpid()}")
    assert temp_name(tmp_path / ("é" * 127)) != temp_name(tmp_path / ("é" * 126 + "e"))


# ------------------------------------------------------------ one writer at a time

HOLD = textwrap.dedent(
    """
    import sys, time
    from infoprobe.base.atomic import output_lock
    with output_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(120)
    """
)


@pytest.fixture
def held(tmp_path):
    """Another process holding the lock of an output; yields (path, its pid)."""
    started = []

    def hold(path: Path) -> int:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        started.append(proc)
        assert proc.stdout.readline().strip() == "locked"
        return proc.pid

    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_second_writer_is_told_another_process_is_writing(held, monkeypatch, capsys, tmp_path):
    out = tmp_path / "pred.h5"
    pid = held(out)
    argv = [*PREDICT, "--samples", "8", "--out", str(out)]
    assert run_command(monkeypatch, "predict", argv) == 2
    err = capsys.readouterr().err
    assert err == f"infoprobe predict: error: another process (pid {pid}) is writing {out}; " \
        "wait for it to finish or choose another output\n"  # fmt: skip
    assert not out.exists()


def test_a_second_report_writer_is_refused(files, held, monkeypatch, capsys, tmp_path):
    out = tmp_path / "report"
    pid = held(out)
    argv = [str(files / "pred.h5"), str(files / "probes.h5"), "--out", str(out)]
    assert run_command(monkeypatch, "report", argv) == 2
    assert f"another process (pid {pid}) is writing {out}" in capsys.readouterr().err
    assert not out.exists()


def test_a_second_influence_writer_is_told_another_process_is_writing(files, held, tmp_path):
    from infoprobe.influence import influence_for_cache

    out = tmp_path / "flow.h5"
    pid = held(out)
    with pytest.raises(OutputBusyError, match=rf"another process \(pid {pid}\) is writing"):
        influence_for_cache(files / "model", files / "acts.h5", out, n=4, progress=False)
    assert not out.exists()


def test_a_second_cache_writer_is_refused(files, held, tmp_path):
    from infoprobe.pipeline.caching import cache_checkpoint

    out = tmp_path / "acts.h5"
    pid = held(out)
    with pytest.raises(OutputBusyError, match=rf"pid {pid}"):
        cache_checkpoint(files / "model", out, n=20, batch_size=10, progress=False)
    assert not out.exists()


def test_a_second_reproduce_sweep_into_one_folder_is_refused(held, monkeypatch, capsys, tmp_path):
    out = tmp_path / "sweep"
    pid = held(out)
    argv = ["head-count", "--out", str(out), "--quiet", "--seeds", "1"]
    assert run_command(monkeypatch, "reproduce", argv) == 2
    assert f"another process (pid {pid}) is writing {out}" in capsys.readouterr().err
    assert not out.exists()


def test_the_lock_is_let_go_and_its_file_removed(tmp_path):
    out = tmp_path / "new" / "c.json"
    with atomic_output(out) as tmp:
        with atomic_output(out.with_name("d.json")) as other:  # another output: its own lock
            other.write_text("{}")
        tmp.write_text("{}")
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.json", "d.json"]


def test_a_killed_writer_leaves_no_lock(tmp_path):
    out = tmp_path / "c.json"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "locked"
    proc.kill()
    proc.wait()
    with atomic_output(out) as tmp:  # the kernel dropped the dead process's lock
        tmp.write_text("{}")
    assert out.read_text() == "{}"


# ------------------------------------------------------------ messages


def test_sigterm_removes_the_temporary_output(tmp_path):
    out = tmp_path / "out.json"
    code = textwrap.dedent(
        f"""
        import time, types
        from infoprobe import cli
        from infoprobe.base.atomic import atomic_output

        def action(args):
            with atomic_output({str(out)!r}) as tmp:
                tmp.write_text("half")
                print("writing", flush=True)
                time.sleep(120)

        def register(subparsers):
            subparsers.add_parser("slow").set_defaults(func=action)

        cli.command_modules = lambda: [types.SimpleNamespace(register=register)]
        raise SystemExit(cli.main(["slow"]))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "writing"
    assert [p.name for p in tmp_path.iterdir()]  # the temp file (and the lock) exist
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err == "infoprobe slow: terminated\n"
    assert list(tmp_path.iterdir()) == []


def test_the_disk_message_states_the_margin(files, monkeypatch, tmp_path):
    import infoprobe.hooks.writer as writer
    from infoprobe.hooks import InsufficientDiskError
    from infoprobe.pipeline.caching import cache_checkpoint

    real = shutil.disk_usage
    free = 40_000 + writer.DISK_MARGIN_BYTES // 2  # more than the data, less than the margin

    def usage(path):
        return real(path)._replace(free=free)

    monkeypatch.setattr(writer.shutil, "disk_usage", usage)
    out = tmp_path / "acts.h5"
    with pytest.raises(InsufficientDiskError, match=r"plus a margin of 16 MiB") as info:
        cache_checkpoint(files / "model", out, n=20, batch_size=10, progress=False)
    assert f"{free / 1e6:.1f} MB free" in str(info.value)
    assert not out.exists()


def test_the_cache_refusal_names_the_differing_hooks(files, tmp_path):
    from infoprobe.hooks import ProvenanceMismatchError
    from infoprobe.pipeline.caching import cache_checkpoint

    out = tmp_path / "acts.h5"
    cache_checkpoint(files / "model", out, n=20, batch_size=10, sites="layers", progress=False)
    with pytest.raises(ProvenanceMismatchError) as info:
        cache_checkpoint(files / "model", out, n=20, batch_size=10, sites="all", progress=False)
    text = str(info.value)
    assert "this run adds hook_embed" in text and "more" in text
    assert (
        len(text) < 500 and "blocks.1.hook_mlp_out" not in text
    )  # named: a few, counted: the rest


def test_a_wrong_shape_layer_dataset_names_the_file_and_dataset(files, tmp_path):
    import h5py

    from infoprobe.pipeline.probing import probe_cache
    from infoprobe.probes.errors import ProbeInputError

    acts = tmp_path / "acts.h5"
    shutil.copy(files / "acts.h5", acts)
    name = "acts/blocks.1.hook_resid_post"
    with h5py.File(acts, "r+") as f:
        data, attrs = f[name][()], dict(f[name].attrs)
        del f[name]
        f.create_dataset(name, data=data[:, :3])
        f[name].attrs["axes"] = attrs["axes"]
    with pytest.raises(ProbeInputError, match=rf"{acts}: dataset /{name} has shape \[400, 3, 16\]"):
        probe_cache(acts, progress=False)


def test_reproduce_with_ray_missing_writes_nothing(monkeypatch, tmp_path):
    from infoprobe.reproduce import reproduce
    from infoprobe.reproduce.backends import BackendError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    out = tmp_path / "sweep"
    with pytest.raises(BackendError, match="needs the ray package"):
        reproduce("fixed-positions", profile="quick", backend="ray", out=out, log=None)
    assert not out.exists()
