"""``infoprobe train --seeds``: one checkpoint per seed from one batched ensemble, a summary,
and resuming after kill -9."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

import infoprobe.train.seeds as seeds_module
from infoprobe.cli import main
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
from infoprobe.train.ensemble import EnsembleError
from infoprobe.train.loop import train
from infoprobe.train.seeds import train_seeds

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = make_task("intrinsic-dim", D=2, T=8)
MODEL = ModelConfig(d_in=4, n_ctx=8, d_model=16, heads=(2, 2), d_mlp=32, d_readout=16)
CFG = TrainConfig(
    steps=60, batch_size=32, n_val=128, n_test=128, eval_every=20, warmup=5, dtype="float64"
)
ARGS = (
    "train --task intrinsic-dim --D 2 --T 8 --heads 2,2 --E 16 --d-mlp 32 --d-readout 16 "
    "--steps 60 --batch-size 32 --n-val 128 --n-test 128 --eval-every 20 --warmup 5 "
    "--dtype float64 --quiet"
).split()


def weights(folder) -> dict[str, torch.Tensor]:
    """The saved weights as stored (float64 here), not cast to a fresh float32 model."""
    return load_file(str(folder / "model.safetensors"))


def test_cli_writes_one_checkpoint_per_seed_equal_to_single_runs(tmp_path, capsys):
    out = tmp_path / "seeds"
    assert main([*ARGS, "--seeds", "3,1", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "infoprobe.seeds" and summary["finished"] == 2
    singles = {s: train(TASK, MODEL, TrainConfig(**{**CFG.to_dict(), "seed": s})) for s in (3, 1)}
    for seed, single in singles.items():
        member = summary["members"][str(seed)]
        assert member["val_nmse"] == pytest.approx(single.val_nmse, rel=1e-9)
        assert member["test_nmse"] == pytest.approx(single.test_nmse, rel=1e-9)
        saved = weights(out / f"seed-{seed}")
        for name, tensor in single.model.state_dict().items():
            torch.testing.assert_close(saved[name], tensor, atol=1e-9, rtol=0)
    best = min(singles, key=lambda s: singles[s].val_nmse)
    assert summary["best_seed"] == best
    printed = capsys.readouterr().out
    assert f"best seed {best}" in printed and "seed 3: validation NMSE" in printed


def test_rerun_keeps_finished_seeds_and_refuses_other_settings(tmp_path, monkeypatch):
    out = tmp_path / "seeds"
    train_seeds(TASK, MODEL, CFG, [0, 1], out, progress=False)
    kept = (out / "seed-0" / "model.safetensors").read_bytes()
    shutil.rmtree(out / "seed-1")
    trained = []
    real = seeds_module.train_ensemble

    def spy(task, model_cfg, cfgs, **kwargs):
        trained.extend(c.seed for c in cfgs)
        return real(task, model_cfg, cfgs, **kwargs)

    monkeypatch.setattr(seeds_module, "train_ensemble", spy)
    summary = train_seeds(TASK, MODEL, CFG, [0, 1], out, progress=False)
    assert trained == [1] and summary["finished"] == 2
    assert (out / "seed-0" / "model.safetensors").read_bytes() == kept
    with pytest.raises(EnsembleError, match="train_config"):
        train_seeds(TASK, MODEL, TrainConfig(**{**CFG.to_dict(), "lr": 5e-3}), [0, 1], out)
    with pytest.raises(EnsembleError, match="duplicate seed"):
        train_seeds(TASK, MODEL, CFG, [2, 2], tmp_path / "dup")


@pytest.mark.parametrize(
    ("seeds", "message"), [("1,1", "lists a seed twice"), ("", "comma-separated")]
)
def test_cli_refuses_bad_seed_lists(tmp_path, capsys, seeds, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGS, "--seeds", seeds, "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


CHILD = """
import os, signal, sys
import torch
torch.set_num_threads(1)
import infoprobe.train.seeds as seeds_module
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
save = seeds_module.save_checkpoint
calls = [0]
def killing_save(*args, **kwargs):
    calls[0] += 1
    if calls[0] == 2:  # the first seed is saved, the second is being saved
        os.kill(os.getpid(), signal.SIGKILL)
    return save(*args, **kwargs)
seeds_module.save_checkpoint = killing_save
seeds_module.train_seeds(
    make_task("intrinsic-dim", D=2, T=8), ModelConfig.from_dict(MODEL),
    TrainConfig.from_dict(CFG), [0, 1, 2], sys.argv[1], progress=False)
print("finished without being killed")
"""


def test_kill_9_mid_ensemble_then_rerun(tmp_path):
    out, script = tmp_path / "seeds", tmp_path / "child.py"
    script.write_text(
        f"MODEL = {MODEL.to_dict()!r}\nCFG = {CFG.to_dict()!r}\n" + textwrap.dedent(CHILD)
    )
    child = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300
    )
    assert child.returncode == -9, child.stdout + child.stderr
    finished = sorted(p.name for p in out.iterdir() if (p / "checkpoint.json").is_file())
    assert finished == ["seed-0"]
    kept = (out / "seed-0" / "model.safetensors").read_bytes()
    summary = train_seeds(TASK, MODEL, CFG, [0, 1, 2], out, progress=False)
    assert summary["finished"] == 3
    assert (out / "seed-0" / "model.safetensors").read_bytes() == kept
    reference = train_seeds(TASK, MODEL, CFG, [0, 1, 2], tmp_path / "ref", progress=False)
    for seed in ("0", "1", "2"):
        assert summary["members"][seed]["val_nmse"] == pytest.approx(
            reference["members"][seed]["val_nmse"], rel=1e-9
        )
    for seed in (1, 2):
        a, b = weights(out / f"seed-{seed}"), weights(tmp_path / "ref" / f"seed-{seed}")
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_foreign_folder_is_never_replaced_even_with_overwrite(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code = main([*ARGS, "--seeds", "0,1", "--overwrite", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an infoprobe seeds folder" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "keep me"
