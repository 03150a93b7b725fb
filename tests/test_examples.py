"""The examples run as users run them (so they cannot rot), on tiny sizes: as scripts in a
subprocess, or as ``__main__`` in this process with the report's figures blank (the
script's code runs unchanged; drawing is most of a report's time and tests/test_report.py
checks the figures)."""

import io
import runpy
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import h5py
from quick_reports import blank_figures

from infoprobe.tasks import unregister_task

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def run_in_process(monkeypatch, name: str, *args: str) -> str:
    """Run an example as ``__main__`` in this process (its imports are already paid and the
    report's figures can be blank: drawing them is most of a report's time); its stdout."""
    monkeypatch.setattr(sys, "argv", [name, *args])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with blank_figures(), redirect_stdout(io.StringIO()) as printed:
        try:
            runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        except SystemExit as exit_info:
            assert exit_info.code in (0, None), printed.getvalue()[-3000:]
    return printed.getvalue()


def test_cache_activations_example(tmp_path):
    out = run_example(
        "cache_activations.py", "--out", str(tmp_path / "c"), "--steps", "30", "--n", "300"
    )
    assert "TL cache: pattern of block 0 (16, 2, 9, 9)" in out
    with h5py.File(tmp_path / "c" / "acts.h5") as f:
        assert f.attrs["n_committed"] == 300 and f["inputs/x"].shape == (300, 8, 4)


def test_probe_checkpoint_then_compare_sets_examples(tmp_path, monkeypatch):
    run = tmp_path / "p"
    out = run_in_process(monkeypatch, "probe_checkpoint.py", "--out", str(run), "--steps", "30",
                         "--n", "600")  # fmt: skip
    assert "InfoFlow: efficient" in out and (run / "report" / "report.html").is_file()
    out = run_example("compare_sets.py", str(run))
    assert "== infoflow vs flow" in out and "== rollout vs decodability" in out
    # one line per instrument (flow, its random-init control, decodability) and layer 0..2
    assert out.count("violations,") == 9


def test_own_task_example(tmp_path, monkeypatch):
    try:
        out = run_in_process(monkeypatch, "own_task.py", "--out", str(tmp_path / "r"),
                             "--steps", "10", "--n", "100")  # fmt: skip
    finally:
        unregister_task("two-hop")  # registered by the example, for its process only
    assert "Python: efficient, alpha(8) = 1, minimum heads (1, 1)" in out
    assert "verdict: inefficient" in out and "max(1, 0.125*T - 1)" in out  # heads 2: one layer
    assert "run exit status 0" in out and (tmp_path / "r" / "report" / "report.html").is_file()


def test_own_model_example(tmp_path, monkeypatch):
    """A model built by the user's code: trained by its own loop, saved with its factory
    beside the weights, probed by every instrument."""
    run = tmp_path / "m"
    out = run_in_process(monkeypatch, "own_model.py", "--out", str(run), "--steps", "20",
                         "--n", "600")  # fmt: skip
    assert "InfoFlow: efficient (cost exponent 1)" in out and "heads per layer [2, 2]" in out
    assert (run / "checkpoint" / "own_model.py").is_file()
    assert (run / "probe" / "report" / "report.html").is_file()
