"""Hand-edited, damaged or numerically wrong files: one clear line naming the file and the
field, exit 2, nothing written; bad weights and inputs refused before they reach torch."""

import json
import shutil

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from test_bad_input import one_line_refusal, run_command, snapshot

from infoprobe.base.errors import CompareInputError
from infoprobe.checkpoint import (
    META,
    WEIGHTS,
    CheckpointError,
    file_sha256,
    load_checkpoint,
    save_checkpoint,
)
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
from infoprobe.train.save import train_and_save

TASK = make_task("intrinsic-dim", T=4, D=2)
MODEL = ModelConfig(d_in=4, n_ctx=4, d_model=8, heads=(1, 1), d_mlp=8, d_readout=8)


def refused(monkeypatch, capsys, folder, command, argv, words):
    """``infoprobe COMMAND ARGV`` exits 2 with one line holding ``words``; ``folder`` is
    left exactly as it was."""
    before = snapshot(folder)
    one_line_refusal(monkeypatch, capsys, command, argv, words)
    assert snapshot(folder) == before


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny checkpoint, its cache, predicted sets, probe results and flow."""
    root = tmp_path_factory.mktemp("files")
    cfg = TrainConfig(steps=4, batch_size=32, n_val=32, n_test=32, eval_every=2)
    train_and_save(TASK, MODEL, cfg, root / "ckpt", progress=False)
    mp = pytest.MonkeyPatch()
    ck, acts = str(root / "ckpt"), str(root / "acts.h5")
    try:
        for command, argv in (
            ("cache", [ck, "--out", acts, "--n", "120", "--quiet"]),
            ("predict", ["--cache", acts, "--out", str(root / "pred.h5")]),
            ("probe", [acts, "--out", str(root / "probes.h5")]),
            ("influence", [ck, "--cache", acts, "--n", "8", "--out", str(root / "flow.h5")]),
        ):
            assert run_command(mp, command, argv) == 0, command
    finally:
        mp.undo()
    return root


def edited(files, tmp_path, name, edit):
    """A copy of ``files/name`` in ``tmp_path/in`` after ``edit(h5py.File)``."""
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    path = folder / name
    shutil.copyfile(files / name, path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def set_attr(name, value):
    def edit(f):
        f.attrs[name] = value

    return edit


def replace_dataset(name, data):
    def edit(f):
        del f[name]
        f[name] = data

    return edit


def delete(name):
    def edit(f):
        if name in f:
            del f[name]
        else:
            del f.attrs[name]

    return edit


# --- predicted sets, probe results, flow: each field read is validated ----------------


@pytest.mark.parametrize(
    "edit, words",
    [
        (set_attr("task", "{bad"), ["'task'", "not JSON"]),
        (set_attr("provenance", "[1, 2]"), ["'provenance'", "JSON list", "JSON object"]),
        (set_attr("arch", json.dumps({"heads": [1], "d_model": 8})), ["'arch'"]),
        (
            set_attr(
                "arch",
                json.dumps({"heads": "x", "d_model": 8, "d_heads": [8, 8], "positions": False}),
            ),
            ["'arch'"],
        ),
        (replace_dataset("inputs/x", np.zeros(5, np.float32)), ["/inputs/x", "[N, T, d]"]),
        (set_attr("prediction", json.dumps({"verdict": 1})), ["'prediction'", "verdict"]),
    ],
)
def test_damaged_predicted_sets_are_one_line(files, monkeypatch, capsys, tmp_path, edit, words):
    pred = edited(files, tmp_path, "pred.h5", edit)
    argv = [str(pred), str(files / "probes.h5"), "--out", str(tmp_path / "c.json")]
    refused(monkeypatch, capsys, tmp_path, "compare", argv, [str(pred), *words])


def wrong_shape_errors(f):
    name = next(n for n in _datasets(f) if n.startswith("per_sample/"))
    data = f[name][()]
    del f[name]
    f[name] = data[:, :-1]


def _datasets(f):
    names = []
    f.visititems(lambda n, item: names.append(n) if isinstance(item, h5py.Dataset) else None)
    return names


@pytest.mark.parametrize(
    "edit, words",
    [
        (set_attr("provenance", "{bad"), ["'provenance'", "JSON object"]),
        (set_attr("settings", "[]"), ["'settings'", "JSON object"]),
        (delete("split/test_index"), ["split/test_index", "re-run `infoprobe probe`"]),
        (delete("layers"), ["'layers'", "missing"]),
        (set_attr("layers", "zero"), ["'layers'"]),
        (wrong_shape_errors, ["per_sample", "shape", "expected"]),
    ],
)
def test_damaged_probe_results_are_one_line(files, monkeypatch, capsys, tmp_path, edit, words):
    probes = edited(files, tmp_path, "probes.h5", edit)
    argv = [str(files / "pred.h5"), str(probes), "--out", str(tmp_path / "c.json")]
    refused(monkeypatch, capsys, tmp_path, "compare", argv, [str(probes), *words])


@pytest.mark.parametrize(
    "edit, words",
    [
        (set_attr("provenance", "{bad"), ["'provenance'", "not JSON"]),
        (set_attr("settings", '"local"'), ["'settings'", "JSON object"]),
        (set_attr("n_committed", 10**6), ["'n_committed'"]),
        (replace_dataset("sample_index", np.zeros(3, np.int64)), ["sample_index", "shape"]),
    ],
)
def test_damaged_flow_files_are_one_line(files, monkeypatch, capsys, tmp_path, edit, words):
    flow = edited(files, tmp_path, "flow.h5", edit)
    argv = [str(files / "pred.h5"), "--influence", str(flow), "--out", str(tmp_path / "c.json")]
    refused(monkeypatch, capsys, tmp_path, "compare", argv, [str(flow), *words])


# --- run.json and comparison.json ------------------------------------------------------


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"format": "infoprobe.run", "stag', ["not valid JSON"]),
        ("[]", ["JSON object", "JSON list"]),
        ('{"format": "infoprobe.run", "schema_version": 2, "stages": []}', ["'stages'"]),
        (
            '{"format": "infoprobe.run", "schema_version": 2, "stages": {"cache": 3}}',
            ["'stages.cache'", "key_sha"],
        ),
        (
            '{"format": "infoprobe.run", "schema_version": 2, "stages": {"cache": {"key_sha": 1,'
            ' "key": {}, "output": "acts.h5"}}}',
            ["'stages.cache'"],
        ),
    ],
)
def test_a_damaged_run_json_is_one_line(monkeypatch, capsys, tmp_path, text, words):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(text)
    argv = ["--task", "intrinsic-dim", "--D", "2", "--T", "4", "--steps", "2", "--quiet",
            "--n-cache", "200", "--out", str(folder)]  # fmt: skip
    refused(monkeypatch, capsys, tmp_path, "run", argv, ["run.json", *words])


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"format": "infoprobe.comparison", "sche', ["not valid JSON"]),
        ("[]", ["JSON object"]),
        (
            json.dumps(
                {
                    "format": "infoprobe.comparison",
                    "schema_version": 3,
                    "comparisons": {},
                    "headline": "layer 0",
                    "provenance": {},
                }
            ),
            ["'headline'"],
        ),
    ],
)
def test_read_comparisons_names_what_is_wrong(tmp_path, text, words):
    from infoprobe.compare.files import read_comparisons

    path = tmp_path / "comparison.json"
    path.write_text(text)
    with pytest.raises(CompareInputError) as info:
        read_comparisons(path)
    for word in [str(path), *words]:
        assert word in str(info.value)


# --- checkpoints: history values, bad weights, save checks what load checks -------------


def resaved(files, tmp_path, change_state=None, change_meta=None):
    """A copy of the checkpoint with its tensors and/or checkpoint.json changed (the
    recorded weights hash updated, as a careless hand edit would)."""
    dst = tmp_path / "ck"
    shutil.copytree(files / "ckpt", dst)
    if change_state is not None:
        state = load_file(str(dst / WEIGHTS))
        change_state(state)
        save_file(state, str(dst / WEIGHTS))
    meta = json.loads((dst / META).read_text())
    meta["weights_sha256"] = file_sha256(dst / WEIGHTS)
    if change_meta is not None:
        change_meta(meta)
    (dst / META).write_text(json.dumps(meta))
    return dst


def first_tensor(state):
    return next(iter(sorted(state)))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: s[first_tensor(s)].view(-1).__setitem__(0, float("nan")), ["nan", "finite"]),
        (lambda s: s[first_tensor(s)].view(-1).__setitem__(0, float("inf")), ["inf", "finite"]),
        (lambda s: s[first_tensor(s)].mul_(1e30), ["magnitude", "1e+06"]),
        (
            lambda s: s.__setitem__(first_tensor(s), s[first_tensor(s)].to(torch.int64)),
            ["int64", "float32"],
        ),
    ],
)
def test_bad_weights_are_refused_at_load_naming_the_tensor(
    files, monkeypatch, capsys, tmp_path, change, words
):
    ck = resaved(files, tmp_path, change_state=change)
    name = first_tensor(load_file(str(ck / WEIGHTS)))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(ck)
    for word in [repr(name), *words]:
        assert word in str(info.value)
    argv = [str(ck), "--out", str(tmp_path / "acts.h5"), "--n", "16", "--quiet"]
    refused(monkeypatch, capsys, tmp_path, "cache", argv, [repr(name)])


def test_a_history_value_that_is_not_a_number_is_refused(files, tmp_path):
    def edit(meta):
        meta["history"][0]["val_nmse"] = "0.5"

    ck = resaved(files, tmp_path, change_meta=edit)
    with pytest.raises(CheckpointError, match=r"'history' entry 0 key 'val_nmse' is '0.5'"):
        load_checkpoint(ck)


def test_save_checkpoint_refuses_what_load_would_refuse(tmp_path):
    wrong_d_out = ModelConfig(d_in=4, n_ctx=4, d_model=8, heads=(1,), d_mlp=8, d_out=3)
    with pytest.raises(CheckpointError, match="d_out"):
        save_checkpoint(tmp_path / "a", InfoFlowTransformer(wrong_d_out), TASK)
    model = InfoFlowTransformer(MODEL)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="finite"):
        save_checkpoint(tmp_path / "b", model, TASK)
    huge = InfoFlowTransformer(MODEL)
    with torch.no_grad():
        next(huge.parameters()).mul_(1e30)
    with pytest.raises(CheckpointError, match="magnitude"):
        save_checkpoint(tmp_path / "c", huge, TASK)
    assert list(tmp_path.iterdir()) == []
    # weights of a model trained in double precision are floating: saved and loaded
    double = InfoFlowTransformer(MODEL).double()
    loaded = load_checkpoint(save_checkpoint(tmp_path / "d", double, TASK)).model
    first = next(iter(double.state_dict()))
    torch.testing.assert_close(loaded.state_dict()[first], double.state_dict()[first].float())


# --- predict --cache refuses non-finite inputs and patterns ----------------------------


@pytest.mark.parametrize(
    "dataset, value",
    [("inputs/x", float("inf")), ("inputs/x", float("nan")), ("pattern", float("nan"))],
)
def test_predict_refuses_a_cache_with_non_finite_values(
    files, monkeypatch, capsys, tmp_path, dataset, value
):
    def edit(f):
        name = dataset
        if dataset == "pattern":
            name = next(n for n in _datasets(f) if n.endswith("hook_pattern"))
        data = f[name][()]
        data.reshape(-1)[1] = value
        f[name][...] = data

    acts = edited(files, tmp_path, "acts.h5", edit)
    argv = ["--cache", str(acts), "--out", str(tmp_path / "pred.h5")]
    refused(monkeypatch, capsys, tmp_path, "predict", argv, [str(acts), "finite"])


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("best_val_nmse", "0.5", ["'best_val_nmse'", "'0.5'", "a number"]),
        ("best_step", 2.5, ["'best_step'", "an integer"]),
        ("history", {"step": 1}, ["'history'", "a list"]),
    ],
)
def test_a_record_field_of_the_wrong_kind_is_refused(tmp_path, field, value, words):
    from infoprobe.reproduce.grid import ReproduceError
    from infoprobe.reproduce.runs import RECORD, RECORD_FORMAT, RunStore

    store = RunStore(tmp_path)
    store.run_dir("r1").mkdir(parents=True)
    record = {"format": RECORD_FORMAT, "schema_version": 2, "run_id": "r1", "seed": 0}
    record.update({"best_val_nmse": 0.1, "test_nmse": 0.2, "best_step": 2, "seconds": 1.0,
                   "train_seconds": 1.0, "history": [], "analyses": {}, field: value})  # fmt: skip
    (store.run_dir("r1") / RECORD).write_text(json.dumps(record))
    with pytest.raises(ReproduceError) as info:
        store.load("r1")
    for word in [str(store.run_dir("r1") / RECORD), *words]:
        assert word in str(info.value)
