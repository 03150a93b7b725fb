"""``infoprobe spread``: the spread of a comparison over training seeds.

Three real run folders of one tiny architecture (one ``run_pipeline`` with three seeds,
which analyses the best, and ``probe_checkpoint`` of the other two) are set side by side;
the numbers are checked against numpy on the values read straight from the JSON files.
Bad input is refused in one line (exit 2) and nothing is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from quick_reports import blank_figures
from test_bad_input import assert_refused, run_command

from infoprobe.base.header import make_header
from infoprobe.cli import main
from infoprobe.compare.spread import METRICS, RULE, seed_spread
from infoprobe.compare.spread_runs import SpreadError
from infoprobe.model import ModelConfig
from infoprobe.pipeline.run import probe_checkpoint, run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig

TASK = make_task("intrinsic-dim", T=5, D=2)
MODEL = ModelConfig(d_in=4, n_ctx=5, d_model=16, heads=(2, 2), d_mlp=16, d_readout=8)
TRAIN = TrainConfig(steps=40, batch_size=64, n_val=128, n_test=128, eval_every=20, lr=3e-3)
SETTINGS = RunSettings(n_cache=600, batch_size=200, rollout=False)
SEEDS = (0, 1, 2)
INSTRUMENTS = ("flow", "flow (random-init)", "decodability")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Three run folders, one per seed: the run's own (its best seed) and two probed."""
    root = tmp_path_factory.mktemp("spread")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with blank_figures():
            run = root / "run"
            run_pipeline(run, TASK, MODEL, TRAIN, SETTINGS, seeds=SEEDS, progress=False, log=None)
            best = json.loads((run / "seeds" / "summary.json").read_text())["best_seed"]
            folders = [run]
            for seed in (s for s in SEEDS if s != best):
                folders.append(root / f"run-{seed}")
                probe_checkpoint(run / "seeds" / f"seed-{seed}", folders[-1], SETTINGS,
                                 progress=False, log=None)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return folders


def raw(folder: Path, instrument: str, name: str) -> tuple[list, list]:
    """(values [L+1], intervals [L+1]) of a metric, read straight from comparison.json."""
    metric = METRICS[name]
    doc = json.loads((folder / "comparison.json").read_text())
    group = doc["comparisons"][instrument]["infoflow"][metric.scope]["others"]
    values = group
    for key in metric.value:
        values = values[key]
    return values, group[metric.interval]


def nan_array(rows: list[list]) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def test_the_spread_equals_numpy_on_the_files(runs):
    spread = seed_spread(runs)
    assert [r.folder for r in spread.runs] == [str(r) for r in runs]
    assert sorted(r.seed for r in spread.runs) == list(SEEDS)
    assert spread.n_layers == 2 and spread.arch["heads"] == [2, 2]
    assert list(spread.instruments) == list(INSTRUMENTS)
    checked = 0
    for instrument in INSTRUMENTS:
        for name in METRICS:
            got = spread.instruments[instrument][name]
            files = [raw(r, instrument, name) for r in runs]
            values = nan_array([f[0] for f in files])  # [R, L+1]
            assert [list(v) for v in got.values] == [f[0] for f in files]
            for r, (_, intervals) in enumerate(files):
                for layer, interval in enumerate(intervals or [None] * 3):
                    found = got.intervals[r][layer]
                    assert (found is None) == (interval is None or None in interval)
                    assert found is None or list(found) == interval
            for layer in range(3):
                column = values[:, layer][np.isfinite(values[:, layer])]
                assert got.n[layer] == column.size
                if column.size == 0:
                    continue
                checked += 1
                assert got.mean[layer] == pytest.approx(column.mean(), abs=1e-12)
                assert got.min[layer] == column.min() and got.max[layer] == column.max()
                if column.size > 1:
                    assert got.std[layer] == pytest.approx(column.std(ddof=1), abs=1e-12)
    assert checked >= 20  # per-sample AUROCs and shares of layers 1, 2 in every instrument
    sd = spread.instruments["flow"]["auroc"].std[1]
    assert sd is not None and sd > 0  # three trained models differ


def test_undefined_layers_stay_none(runs):
    spread = seed_spread(runs)
    for instrument in INSTRUMENTS:
        auroc = spread.instruments[instrument]["auroc"]
        assert all(raw(r, instrument, "auroc")[0][0] is None for r in runs)  # layer 0
        assert auroc.n[0] == 0
        assert (auroc.mean[0], auroc.std[0], auroc.min[0], auroc.max[0]) == (None,) * 4
        assert all(v[0] is None for v in auroc.values)
    document = spread.to_dict()
    flow = document["instruments"]["flow"]["auroc"]
    assert flow["mean"][0] is None and flow["per_run"][0][0] is None
    json.dumps(document, allow_nan=False)  # no NaN anywhere


def test_the_command_prints_every_run_and_writes_the_json(runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "spread.json"
    argv = [*map(str, runs), "--out", str(out)]
    assert run_command(monkeypatch, "spread", argv) == 0
    printed = capsys.readouterr().out
    spread = seed_spread(runs)
    for instrument in INSTRUMENTS:
        auroc = spread.instruments[instrument]["auroc"]
        for r, run in enumerate(runs):
            assert f"run {r + 1}: {run}" in printed
            for layer in (1, 2):
                value = raw(run, instrument, "auroc")[0][layer]
                lo, hi = raw(run, instrument, "auroc")[1][layer]
                assert f"{value:.3f} [{lo:.3f}, {hi:.3f}]" in printed, (instrument, r, layer)
        for layer in (1, 2):
            assert f"{auroc.mean[layer]:.3f} ± {auroc.std[layer]:.3f}" in printed
            assert f"{auroc.min[layer]:.3f} .. {auroc.max[layer]:.3f}" in printed
    assert "layer 0: undefined in every run" in printed
    assert f"rule: {RULE}" in printed
    document = json.loads(out.read_text())
    header = make_header("infoprobe.spread", 1, ("layer",))
    assert {k: document[k] for k in header if k != "created"} == {
        k: v for k, v in header.items() if k != "created"
    }
    assert document["instruments"] == json.loads(json.dumps(spread.to_dict()["instruments"]))
    assert document["rule"] == RULE
    assert run_command(monkeypatch, "spread", argv) == 2  # --out exists: refused
    assert "--overwrite" in capsys.readouterr().err and json.loads(out.read_text()) == document
    assert run_command(monkeypatch, "spread", [*argv, "--overwrite"]) == 0


def _copy(run: Path, to: Path, edit=None) -> Path:
    """A folder holding ``run``'s comparison.json, edited by ``edit(document)``."""
    to.mkdir()
    document = json.loads((run / "comparison.json").read_text())
    if edit is not None:
        edit(document)
    (to / "comparison.json").write_text(json.dumps(document))
    return to


def _predicted(document: dict) -> dict:
    return next(v for k, v in document["provenance"].items() if k.startswith("predicted sets"))


def _other_task(document):
    _predicted(document)["task"]["params"]["T"] = 6


def _other_heads(document):
    _predicted(document)["arch"]["heads"] = [1, 2]


def _other_depth(document):
    _predicted(document)["n_layers"] = 3


def _old_schema(document):
    document["schema_version"] = 3


def _short_list(document):
    document["comparisons"]["flow"]["infoflow"]["per_sample"]["others"]["auroc_per_layer"] = [0.5]


@pytest.mark.parametrize(
    "edit, words",
    [
        (_other_task, ["task.params.T", "is 6", "expected 5", "one task"]),
        (_other_heads, ["arch.heads", "[1, 2]", "expected [2, 2]"]),
        (_other_depth, ["'n_layers'", "is 3", "expected 2"]),
        (_old_schema, ["'schema_version'", "is 3", "expected 4", "intervals"]),
        (_short_list, ["comparisons/flow/infoflow/per_sample/others/auroc_per_layer",
                       "expected a list of 3"]),
    ],
    ids=["task", "architecture", "layers", "old-schema", "damaged"],
)  # fmt: skip
def test_a_run_that_does_not_fit_is_refused(runs, tmp_path, monkeypatch, capsys, edit, words):
    other = _copy(runs[1], tmp_path / "other", edit)
    argv = [str(runs[0]), str(other), "--out", str(tmp_path / "spread.json")]
    assert_refused(monkeypatch, capsys, tmp_path, "spread", argv, [str(other), *words])


def test_one_run_a_missing_file_and_the_same_model_twice_are_refused(
    runs, tmp_path, monkeypatch, capsys
):
    out = str(tmp_path / "spread.json")
    assert_refused(monkeypatch, capsys, tmp_path, "spread", [str(runs[1]), "--out", out],
                   ["2 or more runs", "got 1"])  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(monkeypatch, capsys, tmp_path, "spread", [str(runs[0]), str(empty), "--out",
                   out], [str(empty), "no comparison.json"])  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "spread", [str(runs[0]), str(tmp_path / "no"),
                   "--out", out], ["no such run folder"])  # fmt: skip
    twice = _copy(runs[0], tmp_path / "again")
    assert_refused(monkeypatch, capsys, tmp_path, "spread", [str(runs[0]), str(twice), "--out",
                   out], ["checkpoint_sha256", "the same trained model"])  # fmt: skip


def test_one_command_spreads_every_seed_whichever_trained_best(runs, tmp_path, capsys):
    """The README's chain as printed, `infoprobe run ... --seeds 0,1,2 --out RUN` (the
    fixture's run) then `infoprobe spread RUN`: the other seeds are analysed alike and the
    spread is over every seed, equal to probing each seed by hand and giving the folders."""
    run = tmp_path / "RUN"
    shutil.copytree(runs[0], run)
    best = json.loads((run / "seeds" / "summary.json").read_text())["best_seed"]
    assert best != 0, "precondition: seed 0 must not be the best (the old chain's case)"
    out = tmp_path / "spread.json"
    argv = ["spread", str(run), "--threads", "1", "--quiet", "--out", str(out)]
    with blank_figures():
        assert main(argv) == 0
    printed = capsys.readouterr().out
    auto = json.loads(out.read_text())
    assert sorted(r["seed"] for r in auto["runs"]) == list(SEEDS)
    assert auto["runs"][0]["folder"] == str(run)  # the best seed's analysis is RUN's own
    by_hand = seed_spread(runs).to_dict()
    assert auto["instruments"] == by_hand["instruments"]
    assert [r["seed"] for r in auto["runs"]] == [r["seed"] for r in by_hand["runs"]]
    for seed in (s for s in SEEDS if s != best):
        assert (run / "seeds" / "analysis" / f"seed-{seed}" / "comparison.json").is_file()
        assert f"seed {seed}" in printed
    # run again: every seed's analysis is kept (resumable), the numbers are the same
    with blank_figures():
        assert main([*argv, "--overwrite"]) == 0
    assert json.loads(out.read_text())["instruments"] == auto["instruments"]


# The pure function on synthetic comparison files: partly undefined layers.


def synthetic(folder: Path, values: list, interval: list | None, sha: str) -> Path:
    """A run folder whose comparison holds one instrument with these per-sample AUROCs."""
    group = {"auroc_per_layer": values, "auroc_per_layer_interval": interval,
             "per_layer": {"recall": values, "violation_rate": values}}  # fmt: skip
    document = {
        **make_header("infoprobe.comparison", 4),
        "comparisons": {"flow": {"infoflow": {"per_sample": {"others": group},
                                              "aggregate": None}}},
        "headline": [],
        "provenance": {"predicted sets (pred.h5)": {
            "task": {"name": "t", "params": {}}, "n_layers": 2, "arch": {"heads": [1, 1]},
            "checkpoint_sha256": sha}},
    }  # fmt: skip
    folder.mkdir()
    (folder / "comparison.json").write_text(json.dumps(document))
    return folder


def test_statistics_skip_the_runs_where_a_value_is_undefined(tmp_path):
    folders = [
        synthetic(tmp_path / "a", [None, 0.6, 0.9], [None, [0.5, 0.7], None], "a"),
        synthetic(tmp_path / "b", [None, 0.8, None], None, "b"),
        synthetic(tmp_path / "c", [None, 0.7, None], [None, [0.6, 0.8], [None, None]], "c"),
    ]
    got = seed_spread(folders).instruments["flow"]["auroc"]
    assert got.n == (0, 3, 1)
    assert got.mean[0] is None and got.std[0] is None
    assert got.mean[1] == pytest.approx(0.7) and got.std[1] == pytest.approx(0.1)
    assert (got.min[1], got.max[1]) == (0.6, 0.8)
    assert got.mean[2] == 0.9 and got.std[2] is None and got.min[2] == got.max[2] == 0.9
    assert got.intervals == ((None, (0.5, 0.7), None), (None,) * 3, (None, (0.6, 0.8), None))
    aggregate = seed_spread(folders).instruments["flow"]["aggregate_auroc"]
    assert aggregate.n == (0, 0, 0) and aggregate.mean == (None,) * 3  # no aggregate scope
    with pytest.raises(SpreadError, match="2 or more runs"):
        seed_spread(folders[:1])
    shutil.rmtree(folders[2])
    with pytest.raises(SpreadError, match="no such run folder"):
        seed_spread(folders)
