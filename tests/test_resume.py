"""Training that outlives its process: states, budgets, refusals, convergence.

Every resumed run is compared with the same command run once, uninterrupted, on one
thread: the weights file byte for byte and the whole evaluation history.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
from test_bad_input import one_line_refusal, snapshot

import infoprobe.train.state as state_module
from infoprobe.cli import main
from infoprobe.train.budget import BUDGET_EXIT
from infoprobe.train.convergence import STILL_FALLING_RATIO, convergence
from infoprobe.train.state import FORMAT

TRAIN = ["train", "--task", "intrinsic-dim", "--D", "2", "--T", "4", "--E", "8",
         "--steps", "300", "--eval-every", "20", "--n-val", "64", "--n-test", "64",
         "--batch-size", "16", "--warmup", "10", "--threads", "1", "--quiet",
         "--state-every", "40"]  # fmt: skip


def finished(out: Path) -> tuple[bytes, list]:
    """What a finished checkpoint holds that must not depend on interruptions."""
    meta = json.loads((out / "checkpoint.json").read_text())
    return (out / "model.safetensors").read_bytes(), meta["history"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted runs: one seed, and seeds 0, 1, 2 as one ensemble."""
    root = tmp_path_factory.mktemp("reference")
    assert main([*TRAIN, "--out", str(root / "one")]) == 0
    assert main([*TRAIN, "--seeds", "0,1,2", "--out", str(root / "seeds")]) == 0
    return root


def seeds_result(out: Path) -> dict:
    return {s: finished(out / f"seed-{s}") for s in (0, 1, 2)}


def kill_when_state_appears(argv: list[str], state: Path) -> None:
    """Start ``infoprobe ARGV`` in a new process and kill -9 it once ``state`` exists."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.Popen([sys.executable, "-m", "infoprobe", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state.exists() and proc.poll() is None, "the run ended before its first state"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


def test_train_killed_then_rerun_equals_an_uninterrupted_run(reference, tmp_path):
    out = tmp_path / "one"
    argv = [*TRAIN[:-2], "--state-every", "5", "--out", str(out)]  # states often: killed early
    kill_when_state_appears(argv, tmp_path / "one.state.safetensors")
    assert not out.exists()
    assert main(argv) == 0
    assert finished(out) == finished(reference / "one")
    assert not (tmp_path / "one.state.safetensors").exists()  # a finished run removes it


def test_train_seeds_killed_then_rerun_equals_an_uninterrupted_run(reference, tmp_path):
    out = tmp_path / "seeds"
    argv = [*TRAIN[:-2], "--state-every", "5", "--seeds", "0,1,2", "--out", str(out)]
    kill_when_state_appears(argv, out / "train.state.safetensors")
    assert main(argv) == 0
    assert seeds_result(out) == seeds_result(reference / "seeds")
    assert not (out / "train.state.safetensors").exists()


@pytest.mark.parametrize("seeds", [False, True], ids=["one", "seeds"])
def test_a_budget_stops_at_a_state_and_the_same_command_continues(
    reference, tmp_path, capsys, seeds
):
    out = tmp_path / "run"
    argv = [*TRAIN, *(["--seeds", "0,1,2"] if seeds else []), "--out", str(out)]
    stops = []
    while (code := main([*argv, "--budget-minutes", "0"])) == BUDGET_EXIT:
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and "run the same command to continue" in line
        stops.append(int(line.split("stopped at step ")[1].split()[0]))
        assert len(stops) < 20
    assert code == 0
    assert stops == list(range(40, 300, 40))
    if seeds:
        assert seeds_result(out) == seeds_result(reference / "seeds")
    else:
        assert finished(out) == finished(reference / "one")


@pytest.mark.parametrize(
    "change, field",
    [
        (["--T", "5"], "task.params.T"),
        (["--D", "3"], "task.params.D"),
        (["--heads", "1,2"], "model_config.heads"),
        (["--seed", "7"], "train_config.seed"),
        (["--lr", "0.01"], "train_config.lr"),
    ],
)
def test_a_state_of_other_settings_is_refused_and_kept(
    monkeypatch, capsys, tmp_path, change, field
):
    out = tmp_path / "run"
    assert main([*TRAIN, "--out", str(out), "--budget-minutes", "0"]) == BUDGET_EXIT
    capsys.readouterr()
    before = snapshot(tmp_path)
    argv = [*TRAIN[1:], *change, "--out", str(out)]
    line = one_line_refusal(monkeypatch, capsys, "train", argv, [f"'{field}'", "--restart"])
    assert "a state of other settings" in line
    assert snapshot(tmp_path) == before
    # --restart starts over on purpose: the run trains from step 0 with the new settings
    assert main([*TRAIN, *change, "--out", str(out), "--restart"]) == 0
    assert not (tmp_path / "run.state.safetensors").exists()


def test_a_state_of_another_schema_or_not_a_state_is_refused(monkeypatch, capsys, tmp_path):
    out, state = tmp_path / "run", tmp_path / "run.state.safetensors"
    state.write_bytes(b"not a state at all")
    words = ["not a readable training state", "--restart"]
    one_line_refusal(monkeypatch, capsys, "train", [*TRAIN[1:], "--out", str(out)], words)
    # --restart removes only a file that is provably a state: the user's file is kept
    words = ["not a training state", "refusing to delete it"]
    argv = [*TRAIN[1:], "--out", str(out), "--restart"]
    one_line_refusal(monkeypatch, capsys, "train", argv, words)
    assert state.read_bytes() == b"not a state at all"
    state.unlink()
    monkeypatch.setattr(state_module, "SCHEMA_VERSION", 99)
    assert main([*TRAIN, "--out", str(out), "--budget-minutes", "0"]) == BUDGET_EXIT
    monkeypatch.undo()
    capsys.readouterr()
    words = ["'schema_version' is '99'", "expected '1'"]
    one_line_refusal(monkeypatch, capsys, "train", [*TRAIN[1:], "--out", str(out)], words)


def test_a_fifo_at_the_state_path_is_refused_and_kept(monkeypatch, capsys, tmp_path):
    """A FIFO (or any file that is not a regular file) where the state would go is neither
    read nor replaced nor removed, with or without --restart."""
    out, state = tmp_path / "run", tmp_path / "run.state.safetensors"
    os.mkfifo(state)
    for extra in ([], ["--restart"]):
        argv = [*TRAIN[1:], "--out", str(out), *extra]
        one_line_refusal(monkeypatch, capsys, "train", argv, ["not a"])
        assert state.is_fifo() and not out.exists()


def test_a_half_written_state_never_replaces_the_last_good_one(
    monkeypatch, capsys, reference, tmp_path
):
    out, state = tmp_path / "run", tmp_path / "run.state.safetensors"
    assert main([*TRAIN, "--out", str(out), "--budget-minutes", "0"]) == BUDGET_EXIT
    good = state.read_bytes()
    real_save = safetensors.torch.save_file

    def dies_half_way(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as f:  # the write got this far when the process died
            f.truncate(os.path.getsize(filename) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", dies_half_way)
    assert main([*TRAIN, "--out", str(out)]) == 130
    assert state.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.state.safetensors"]
    monkeypatch.undo()
    capsys.readouterr()
    assert main([*TRAIN, "--out", str(out)]) == 0
    assert finished(out) == finished(reference / "one")


def test_the_state_is_marked_as_an_infoprobe_output(tmp_path):
    from infoprobe.base.markers import output_format

    assert main([*TRAIN, "--out", str(tmp_path / "run"), "--budget-minutes", "0"]) == BUDGET_EXIT
    assert output_format(tmp_path / "run.state.safetensors") == FORMAT


# --- convergence -------------------------------------------------------------------------


def planted(values: list[float], every: int = 100) -> list[dict]:
    return [{"step": every * (i + 1), "val_nmse": v} for i, v in enumerate(values)]


def test_convergence_of_planted_histories():
    flat = convergence(planted([0.5, 0.2, 0.11, 0.1, 0.1, 0.1, 0.099, 0.098]))
    assert flat["steps"] == 800 and flat["half_step"] == 400
    assert flat["best_at_half"] == 0.1 and flat["best_at_end"] == 0.098
    assert flat["ratio"] == pytest.approx(0.1 / 0.098) and flat["still_falling"] is False
    # a power law in the steps, NMSE ~ step^-1: halving the steps doubles the best NMSE
    falling = convergence(planted([1 / (i + 1) for i in range(8)]))
    assert falling["ratio"] == pytest.approx(2.0) and falling["still_falling"] is True
    # the rule's edge: 20 % from one more doubling is a ratio of 1.25
    assert STILL_FALLING_RATIO == pytest.approx(1.25)
    below = convergence(planted([1.0, 0.9, 0.9, 0.9 / 1.24]))
    assert below["ratio"] == pytest.approx(1.24) and below["still_falling"] is False
    above = convergence(planted([1.0, 0.9, 0.9, 0.9 / 1.26]))
    assert above["ratio"] == pytest.approx(1.26) and above["still_falling"] is True
    assert convergence(planted([1.0, 1.0, 0.5, 0.7]))["still_falling"] is True  # best, not last
    # no evaluation at half the steps, or none at all: unknown, not a guess
    assert convergence(planted([0.3]))["ratio"] is None
    assert convergence([])["still_falling"] is None
    skip = convergence([*planted([0.4, 0.2]), {"step": 300, "val_nmse": float("nan")}])
    assert skip["steps"] == 200 and skip["ratio"] == pytest.approx(2.0)


def test_every_checkpoint_records_its_convergence(reference):
    meta = json.loads((reference / "one" / "checkpoint.json").read_text())
    assert meta["metrics"]["convergence"] == convergence(meta["history"])


# --- reproduce: a grid point's run, alone or in a batched group ---------------------------

SWEEP = {"steps": 200, "batch_size": 16, "n_val": 64, "n_test": 64, "eval_every": 20,
         "warmup": 5}  # fmt: skip
SCRIPT = """\
import sys
from infoprobe.reproduce import CLAIMS, LocalBackend, reproduce
from infoprobe.train.budget import Resume

if __name__ == "__main__":
    prof = CLAIMS["intrinsic-dim"].profile("quick").override(train={train!r}, points=[0],
                                                            analyses={{"n": 64}})
    reproduce("intrinsic-dim", profile=prof, seeds=2, out=sys.argv[1], figures=False,
              backend=LocalBackend(workers=1, threads=1, ensemble={ensemble}), log=None,
              resume=Resume(every=5))
"""


def sweep(out: Path, ensemble: int = 1, resume=None):
    from infoprobe.reproduce import CLAIMS, LocalBackend, reproduce

    prof = (
        CLAIMS["intrinsic-dim"]
        .profile("quick")
        .override(train=SWEEP, points=[0], analyses={"n": 64})
    )
    backend = LocalBackend(workers=1, threads=1, ensemble=ensemble)
    return reproduce("intrinsic-dim", profile=prof, seeds=2, out=out, figures=False,
                     backend=backend, log=None, resume=resume)  # fmt: skip


def sweep_result(out: Path) -> dict:
    """Per run: its weights, history and NMSEs (nothing that depends on wall time)."""
    found = {}
    for record in sorted((out / "runs").glob("*/record.json")):
        rec = json.loads(record.read_text())
        weights = (record.parent / "checkpoint" / "model.safetensors").read_bytes()
        found[rec["run_id"]] = (weights, rec["history"], rec["best_val_nmse"],
                                rec["test_nmse"], rec["convergence"])  # fmt: skip
    return found


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    sweep(root / "alone")
    sweep(root / "group", ensemble=2)
    return root


@pytest.mark.parametrize("ensemble", [1, 2], ids=["alone", "group"])
def test_a_reproduce_run_killed_then_rerun_equals_an_uninterrupted_one(
    sweep_reference, tmp_path, ensemble
):
    script, out = tmp_path / "sweep.py", tmp_path / "out"
    script.write_text(SCRIPT.format(train=SWEEP, ensemble=ensemble))
    proc = subprocess.Popen([sys.executable, str(script), str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("runs/*/state.safetensors")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the sweep ended before its first state"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    from infoprobe.train.budget import Resume

    sweep(out, ensemble, resume=Resume(every=5))
    reference = sweep_result(sweep_reference / ("alone" if ensemble == 1 else "group"))
    assert sweep_result(out) == reference and len(reference) == 2
    assert not list(out.glob("runs/*/state.safetensors"))


def test_a_reproduce_budget_pauses_every_run_and_the_same_call_continues(sweep_reference, tmp_path):
    from infoprobe.train.budget import BudgetStop, Resume

    out, pieces = tmp_path / "out", 0
    while True:
        try:
            sweep(out, 2, resume=Resume.budget(0, every=50))
            break
        except BudgetStop as stop:
            pieces += 1  # the first group runs to its first state, the second waits
            assert stop.runs == 2 and stop.steps == 400
            assert json.loads((out / "results.json").read_text())["configs"]  # written
            assert pieces < 20
    assert pieces == 3  # states at steps 50, 100, 150 of the group of two seeds
    assert sweep_result(out) == sweep_result(sweep_reference / "group")


def test_the_same_command_after_the_run_finished_has_nothing_to_do(reference, capsys, tmp_path):
    out = tmp_path / "one"
    (tmp_path / "one").mkdir()
    for item in (reference / "one").iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    before = snapshot(tmp_path)
    assert main([*TRAIN, "--out", str(out)]) == 0
    assert "already trained with these settings" in capsys.readouterr().out
    assert snapshot(tmp_path) == before
    assert main([*TRAIN, "--seed", "3", "--out", str(out)]) == 2  # another run: refused
    assert "already exists" in capsys.readouterr().err


def test_a_study_in_pieces_travels_through_git(reference, monkeypatch, tmp_path):
    """docs/reproduction.md's example: a first piece on machine A, committed; a fresh
    clone on machine B continues it to the end; the checkpoint equals an uninterrupted
    run's."""

    def git(*args: str, cwd: Path) -> None:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    git("init", "-q", cwd=a)
    piece = [*TRAIN, "--budget-minutes", "0", "--out", "study/id-2-2"]
    monkeypatch.chdir(a)
    assert main(piece) == BUDGET_EXIT
    git("add", "study", cwd=a)
    git("commit", "-q", "-m", "study: first piece", cwd=a)
    git("clone", "-q", str(a), str(b), cwd=tmp_path)
    state = b / "study" / "id-2-2.state.safetensors"
    assert state.read_bytes() == (a / "study" / "id-2-2.state.safetensors").read_bytes()
    assert state.stat().st_size < 200_000
    monkeypatch.chdir(b)
    pieces = 1
    while (code := main(piece)) == BUDGET_EXIT:
        pieces += 1
    assert code == 0 and pieces == 7
    assert finished(b / "study" / "id-2-2") == finished(reference / "one")
