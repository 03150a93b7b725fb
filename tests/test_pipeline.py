"""The main job: stages chain, resume by skipping, refuse foreign folders, agree with parts."""

import json
import shutil
from html import unescape

import h5py
import numpy as np
import pytest

from infoprobe.checkpoint import CheckpointError, load_checkpoint
from infoprobe.cli import main
from infoprobe.hooks import open_cache
from infoprobe.infoflow import predict, read_sets
from infoprobe.model import ModelConfig
from infoprobe.pipeline.folder import RunFolderError
from infoprobe.pipeline.run import probe_checkpoint, run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("blank_report_figures")  # not the figures under test

TASK = make_task("intrinsic-dim", T=5, D=2)
MODEL = ModelConfig(d_in=4, n_ctx=5, d_model=16, heads=(2, 2), d_mlp=16, d_readout=8)
TRAIN = TrainConfig(steps=40, batch_size=64, n_val=128, n_test=128, eval_every=20, lr=3e-3)
SETTINGS = RunSettings(n_cache=600, batch_size=200)
STAGES = ["train", "cache", "control", "probe", "flow", "flow-control", "predict", "compare"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipe") / "run"
    lines: list[str] = []
    summary = run_pipeline(out, TASK, MODEL, TRAIN, SETTINGS, progress=False, log=lines.append)
    return out, summary, lines


def test_every_stage_ran_once_and_wrote_its_output(run_dir):
    out, summary, lines = run_dir
    manifest = json.loads((out / "run.json").read_text())
    assert sorted(manifest["stages"]) == sorted(STAGES)
    for name in (
        "checkpoint",
        "acts.h5",
        "acts-random-init.h5",
        "probes.h5",
        "flow.h5",
        "flow-random-init.h5",
        "pred.h5",
        "comparison.json",
        "report/report.html",
        "report/summary.json",
    ):
        assert (out / name).exists(), name
    assert [line.split("]")[0] for line in lines if "done in" in line] == [
        f"[{i}/8" for i in range(1, 9)
    ]
    assert not list(out.glob("*.tmp-*"))
    assert summary.report == out / "report" / "report.html"


def test_summary_numbers_match_the_files(run_dir):
    out, summary, _ = run_dir
    ck = load_checkpoint(out / "checkpoint")
    assert summary.val_nmse == ck.meta["metrics"]["val_nmse"]
    assert summary.verdict == predict(TASK, MODEL).verdict == "efficient"
    assert summary.exponent == str(predict(TASK, MODEL).exponent)
    assert "  rate: α = 1 at T=5, E=16" in summary.lines()  # efficient: alpha 1 at its size
    # the orientation of every comparison is printed with the agreement behind it
    chosen = read_sets(out / "pred.h5").provenance["orientation"]
    line = next(x for x in summary.lines() if x.startswith("  orientation: "))
    for c in chosen:
        assert f"{c['label']}: {c['chosen']}" in line
    comparison = json.loads((out / "comparison.json").read_text())
    assert summary.layer_verdicts == comparison["headline"]
    assert set(comparison["comparisons"]) == {"flow", "flow (random-init)", "decodability"}
    html = unescape((out / "report" / "report.html").read_text())
    for verdict in summary.layer_verdicts:
        assert verdict.split(";")[0] in html
    flow = comparison["comparisons"]["flow"]["infoflow"]["per_sample"]["others"]
    for layer, line in enumerate(summary.layer_verdicts):
        n_predicted = flow["per_layer"]["agree"][layer] + flow["per_layer"]["omissions"][layer]
        if n_predicted == 0:  # layer 0: I(t, 0) = {t}, nothing else to rank
            assert line.startswith("layer 0: nothing predicted besides")
        else:
            value = f"{flow['auroc_per_layer'][layer]:.2f}"
            lo, hi = flow["auroc_per_layer_interval"][layer]
            interval = f"[{lo:.2f}, {hi:.2f}]"
            assert line.startswith(f"layer {layer}: flow AUROC {value} {interval} (random-init ")


def test_flow_and_decodability_score_the_same_samples(run_dir):
    from infoprobe.influence import read_influence
    from infoprobe.probes.results import ProbeResults

    out, _, _ = run_dir
    test_index = ProbeResults.read(out / "probes.h5").test_index
    for name in ("flow.h5", "flow-random-init.h5"):
        np.testing.assert_array_equal(read_influence(out / name).sample_index, test_index)


def test_a_deleted_comparison_is_rebuilt_on_rerun(run_dir, tmp_path):
    out, _, _ = run_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = json.loads((copy / "comparison.json").read_text())["comparisons"]
    (copy / "comparison.json").unlink()
    lines: list[str] = []
    run_pipeline(copy, TASK, MODEL, TRAIN, SETTINGS, progress=False, log=lines.append)
    assert json.loads((copy / "comparison.json").read_text())["comparisons"] == before
    assert [line for line in lines if "running" in line] == ["[8/8] compare   running ..."]


def test_predicted_sets_are_those_of_the_cached_samples(run_dir):
    out, _, _ = run_dir
    sets = read_sets(out / "pred.h5")
    with open_cache(out / "acts.h5") as cache:
        x = cache.x[:]
        control = open_cache(out / "acts-random-init.h5")
        assert np.array_equal(control.x[:], x)  # the control sees the same samples
        assert control.checkpoint_sha256 == cache.checkpoint_sha256
        control.close()
    assert np.array_equal(sets.x, x)
    # in the orientation read from the cached attention (tests/test_orientation.py checks
    # the choice itself)
    chosen = [c["chosen"] for c in sets.provenance["orientation"]]
    assert np.array_equal(sets.sets, predict(TASK, MODEL, orientation=chosen).sets(x))


def test_rerun_skips_every_stage_and_changes_nothing(run_dir):
    out, _, _ = run_dir
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    lines: list[str] = []
    run_pipeline(out, TASK, MODEL, TRAIN, SETTINGS, progress=False, log=lines.append)
    assert all("up to date" in line for line in lines) and len(lines) == len(STAGES)
    assert stamps == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def test_a_changed_setting_is_refused_naming_it(run_dir, tmp_path):
    out, _, _ = run_dir
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with pytest.raises(RunFolderError, match=r"n_cache|n: file has 600, this run has 900"):
        run_pipeline(
            copy,
            TASK,
            MODEL,
            TRAIN,
            RunSettings(n_cache=900, batch_size=200),
            progress=False,
            log=lambda line: None,
        )


def test_changed_training_invalidates_everything_downstream_with_overwrite(run_dir, tmp_path):
    out, _, _ = run_dir
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    lines: list[str] = []
    other = TrainConfig(**{**TRAIN.to_dict(), "steps": 20})
    with pytest.raises(RunFolderError, match="steps: file has 40, this run has 20"):
        run_pipeline(copy, TASK, MODEL, other, SETTINGS, progress=False, log=lines.append)
    run_pipeline(
        copy, TASK, MODEL, other, SETTINGS, overwrite=True, progress=False, log=lines.append
    )
    assert sum("done in" in line for line in lines) == len(STAGES)
    assert load_checkpoint(copy / "checkpoint").meta["train_config"]["steps"] == 20


def test_a_foreign_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not an infoprobe run folder"):
        run_pipeline(tmp_path, TASK, MODEL, TRAIN, SETTINGS, progress=False)


def test_probe_checkpoint_without_task_asks_for_one_then_uses_it(run_dir, tmp_path, capsys):
    out, _, _ = run_dir
    bare = tmp_path / "bare"
    shutil.copytree(out / "checkpoint", bare)
    meta = json.loads((bare / "checkpoint.json").read_text())
    del meta["task"]
    (bare / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="pass --task"):
        probe_checkpoint(bare, tmp_path / "p", SETTINGS, progress=False)
    rc = main(
        [
            "probe-checkpoint",
            str(bare),
            "--out",
            str(tmp_path / "p"),
            "--task",
            "intrinsic-dim",
            "--T",
            "5",
            "--D",
            "2",
            "--n-cache",
            "600",
            "--cache-batch",
            "200",
            "--no-rollout",
            "--quiet",
        ]
    )
    assert rc == 0
    assert load_checkpoint(tmp_path / "p" / "checkpoint").task == TASK
    with h5py.File(tmp_path / "p" / "acts.h5") as f:
        assert f.attrs["n_committed"] == 600
    printed = capsys.readouterr().out
    assert "report:" in printed
    # the observed program is printed, a line per head with its modes, as comparison.json has it
    heads = json.loads((tmp_path / "p" / "comparison.json").read_text())["heads"]["heads"]
    assert len(heads) == 4  # heads (2, 2)
    lines = printed.splitlines()
    for row in heads:
        (line,) = [x for x in lines if f"block {row['block']} head {row['head']}:" in x]
        assert f"data queries: {row['data']['mode']}" in line and row["cls"]["mode"] in line


def test_seeds_train_together_and_the_best_is_analysed(tmp_path, capsys):
    out = tmp_path / "seeds-run"
    args = (
        "run --task intrinsic-dim --T 5 --D 2 --heads 2,2 --E 16 --d-mlp 16 --d-readout 8 "
        "--steps 40 --batch-size 64 --n-val 128 --n-test 128 --eval-every 20 --lr 3e-3 "
        "--n-cache 600 --cache-batch 200 --quiet --seeds 4,2 --out"
    ).split()
    assert main([*args, str(out)]) == 0
    members = json.loads((out / "seeds" / "summary.json").read_text())["members"]
    val = {int(s): m["val_nmse"] for s, m in members.items()}
    best = min(val, key=val.get)
    analysed = (out / "checkpoint" / "model.safetensors").read_bytes()
    assert analysed == (out / "seeds" / f"seed-{best}" / "model.safetensors").read_bytes()
    printed = capsys.readouterr().out
    assert f"seed 4: {val[4]:.3g}" in printed and f"seed 2: {val[2]:.3g}" in printed
    assert load_checkpoint(out / "checkpoint").meta["train_config"]["seed"] == best
