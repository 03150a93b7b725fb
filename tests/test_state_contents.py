"""A resumable state is an input: an edited one is refused in one line, nothing written.

A genuine state is written (a run stopped by its budget at step 40 of 300), edited the way
a careless or hostile hand would, and the same command run again: every edit must be
refused naming the field, exit 2, the folder byte for byte as before. The unedited state
then continues to the end (the check refuses nothing a run itself writes).
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from test_bad_input import one_line_refusal, snapshot
from test_resume import TRAIN, sweep

from infoprobe.cli import main
from infoprobe.train.budget import BUDGET_EXIT


def read_state(path):
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, metadata, json.loads(metadata["state"])


def write_state(path, tensors, metadata, document):
    save_file(tensors, str(path), metadata={**metadata, "state": json.dumps(document)})


def first(tensors, prefix):
    return next(k for k in sorted(tensors) if k.startswith(prefix))


def int_weights(t, d):
    name = first(t, "model.")
    t[name] = t[name].to(torch.int32)
    return name


def nan_best(t, d):
    name = first(t, "best.")
    t[name] = t[name].clone()
    t[name].view(-1)[0] = math.nan
    return name


def extra_tensor(t, d):
    t["model.extra"] = torch.zeros(3)
    return "model.extra"


def opt_step(t, d):
    t["opt.0.step"] = torch.tensor(7.0)
    return "opt.0.step"


def far_step(t, d):
    d["step"] = 10**9
    return "step"


def late_step(t, d):  # one step before the end, with the step-40 weights and history
    d["step"] = 299
    return "optimiser[0].lr"


def lr_x1000(t, d):
    d["optimiser"][0]["lr"] *= 1000
    return "optimiser[0].lr"


def weight_decay(t, d):
    d["optimiser"][0]["weight_decay"] = 0.9
    return "optimiser[0].weight_decay"


def scheduler_position(t, d):
    d["scheduler"]["last_epoch"] = 5
    return "scheduler.last_epoch"


def nan_best_nmse(t, d):
    d["tracker"]["val_nmse"] = math.nan
    return "tracker.val_nmse"


def best_step(t, d):
    d["tracker"]["best_step"] += 20
    return "tracker.best_step"


def lost_evaluation(t, d):
    del d["tracker"]["history"][0]
    return "tracker.history"


def garbled_rngs(t, d):
    d["rngs"] = {"numpy": "x"}
    return "rngs"


ONE = [int_weights, nan_best, extra_tensor, opt_step, far_step, late_step, lr_x1000,
       weight_decay, scheduler_position, nan_best_nmse, best_step, lost_evaluation,
       garbled_rngs]  # fmt: skip


def member_nan(t, d):
    t["stack.flat"] = t["stack.flat"].clone()
    t["stack.flat"][1, 0] = math.nan
    return "stack.flat"


def member_rows(t, d):
    t["stack.exp_avg"] = t["stack.exp_avg"][:2].clone()
    return "stack.exp_avg"


def member_lost(t, d):
    d["active"] = d["active"][:2]
    return "active"


def member_history(t, d):
    d["active"][1]["tracker"]["history"][-1]["lr"] *= 1000
    return "active[1].tracker.history[1].lr"


def member_negative_moment(t, d):
    t["stack.exp_avg_sq"] = -t["stack.exp_avg_sq"]
    return "stack.exp_avg_sq"


SEEDS = [far_step, member_nan, member_rows, member_lost, member_history, member_negative_moment]


def genuine_state(tmp_path, seeds: bool):
    out = tmp_path / "run"
    argv = [*TRAIN, *(["--seeds", "0,1,2"] if seeds else []), "--out", str(out)]
    assert main([*argv, "--budget-minutes", "0"]) == BUDGET_EXIT
    path = out / "train.state.safetensors" if seeds else tmp_path / "run.state.safetensors"
    return argv, path


@pytest.mark.parametrize("seeds, edits", [(False, ONE), (True, SEEDS)], ids=["one", "seeds"])
def test_an_edited_state_is_refused_naming_the_field(monkeypatch, capsys, tmp_path, seeds, edits):
    argv, path = genuine_state(tmp_path, seeds)
    capsys.readouterr()
    genuine = path.read_bytes()
    for edit in edits:
        path.write_bytes(genuine)
        tensors, metadata, document = read_state(path)
        field = edit(tensors, document)
        write_state(path, tensors, metadata, document)
        before = snapshot(tmp_path)
        line = one_line_refusal(monkeypatch, capsys, "train", argv[1:], [f"'{field}'", "--restart"])
        assert str(path) in line, (edit.__name__, line)
        assert snapshot(tmp_path) == before, edit.__name__
    path.write_bytes(genuine)  # the run's own state is taken and continues to the end
    assert main(argv) == 0
    assert not path.exists()


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """A finished two-run sweep (its records and checkpoints)."""
    out = tmp_path_factory.mktemp("sweep") / "alone"
    sweep(out)
    return out


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda r: r.update(seed=7), "seed"),
        (lambda r: r.update(best_val_nmse=1e-12), "best_val_nmse"),
        (lambda r: r.update(best_step=r["best_step"] + 1), "best_step"),
        (lambda r: r["history"].pop(), "history of checkpoint.json"),
    ],
    ids=["seed", "best", "step", "history"],
)
def test_an_edited_reproduce_record_is_refused_before_it_is_counted(
    finished_sweep, tmp_path, edit, field
):
    from infoprobe.reproduce import ReproduceError

    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    record = sorted(out.glob("runs/*/record.json"))[0]
    document = json.loads(record.read_text())
    edit(document)
    record.write_text(json.dumps(document))
    before = snapshot(out)
    with pytest.raises(ReproduceError, match=f"field '{field}"):
        sweep(out)
    assert snapshot(out) == before  # nothing rewritten, results.json included


def test_a_state_whose_document_is_not_an_object_names_that_field(monkeypatch, capsys, tmp_path):
    argv, path = genuine_state(tmp_path, seeds=False)
    capsys.readouterr()
    tensors, metadata, _ = read_state(path)
    save_file(tensors, str(path), metadata={**metadata, "state": "[1, 2]"})
    line = one_line_refusal(monkeypatch, capsys, "train", argv[1:], ["'state'", "JSON object"])
    assert "'format'" not in line  # the format is right; the document is not


def test_an_edited_state_in_a_reproduce_sweep_is_refused_and_results_stay(tmp_path):
    from infoprobe.train.budget import BudgetStop, Resume
    from infoprobe.train.state import StateMismatchError

    out = tmp_path / "sweep"
    with pytest.raises(BudgetStop):
        sweep(out, resume=Resume.budget(0, every=50))  # one run paused at its first state
    path = next(out.glob("runs/*/state.safetensors"))
    tensors, metadata, document = read_state(path)
    document["step"] = 10**9
    write_state(path, tensors, metadata, document)
    before = snapshot(out)
    with pytest.raises(StateMismatchError, match="field 'step'"):
        sweep(out, resume=Resume(every=50))
    assert snapshot(out) == before  # results.json as it was, the state kept
