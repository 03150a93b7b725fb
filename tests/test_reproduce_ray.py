"""`--backend ray`: a two-run sweep on a local Ray instance gives the same records as a
serial run (CPU training is deterministic), gathered into the same results.json."""

from __future__ import annotations

import pytest

from infoprobe.reproduce import CLAIMS, LocalBackend, RayBackend, RunStore, reproduce, run_sweep
from infoprobe.reproduce.results import load_results

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install 'infoprobe[ray]'); CI installs the extra"
)

TINY = {"steps": 6, "batch_size": 32, "n_val": 128, "n_test": 128, "eval_every": 3, "warmup": 2}


def test_two_run_sweep_on_local_ray_matches_serial(tmp_path):
    prof = CLAIMS["triangle"].profile("quick").override(train=TINY, points=[0, 1], seeds=1)
    backend = RayBackend(threads=1, init_kwargs={"num_cpus": 2})
    lines: list[str] = []
    rep = reproduce(
        "triangle", profile=prof, backend=backend, out=tmp_path / "ray", log=lines.append
    )
    assert not ray.is_initialized()  # the local Ray started for the sweep is shut down
    assert sum(" done " in ln for ln in lines) == 2

    results = load_results(tmp_path / "ray" / "results.json")
    assert results["backend"] == "ray" and results["n_finished"] == 2
    assert rep.results["runs"] == results["runs"]

    specs = CLAIMS["triangle"].runs(prof)
    serial = RunStore(tmp_path / "serial")
    run_sweep(specs, serial, LocalBackend(workers=1, threads=1))
    for record in results["runs"]:
        reference = serial.load(record["run_id"])
        assert record["history"] == reference["history"]
        assert record["test_nmse"] == reference["test_nmse"]
        # Ray workers send the checkpoint back; the driver stored it.
        assert (tmp_path / "ray" / "runs" / record["run_id"] / "checkpoint").is_dir()
