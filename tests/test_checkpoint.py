"""Checkpoints: bit-identical round trip, atomic writes, and every bad checkpoint."""

import json

import numpy as np
import pytest
import torch

import infoprobe
from infoprobe.atomic import OutputExistsError
from infoprobe.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.tasks import make_task


@pytest.fixture
def saved(tmp_path):
    task = make_task("fixed-positions", T=5, positions=(0, 2, 4), seed=3)
    cfg = ModelConfig(
        d_in=task.d, n_ctx=task.T, d_out=task.d_out, d_model=8, heads=(2,), pos_encoding="learned"
    )
    model = InfoFlowTransformer(cfg, seed=7)
    model.readout.y_mean.fill_(0.25)
    path = save_checkpoint(tmp_path / "ck", model, task, history=[{"step": 1, "val_nmse": 0.5}])
    return path, model, task


def test_round_trip_is_bit_identical(saved):
    path, model, task = saved
    loaded_model, loaded_task = infoprobe.load_checkpoint(path)
    assert loaded_task == task and loaded_model.cfg == model.cfg
    original = model.state_dict()
    for name, tensor in loaded_model.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    x = torch.as_tensor(task.sample(4, np.random.default_rng(0))[0])
    assert torch.equal(loaded_model(x), model.eval()(x))
    ck = load_checkpoint(path)
    assert ck.history == [{"step": 1, "val_nmse": 0.5}]
    assert len(ck.weights_sha256) == 64 and not ck.model.training


def test_existing_folder_is_refused_unless_overwrite(saved):
    path, model, task = saved
    before = (path / "checkpoint.json").read_text()
    with pytest.raises(OutputExistsError, match="--overwrite"):
        save_checkpoint(path, model, task)
    assert (path / "checkpoint.json").read_text() == before
    save_checkpoint(path, model, task, overwrite=True)
    assert not list(path.parent.glob("*.tmp-*")) and not list(path.parent.glob("*.old-*"))


def test_a_crash_while_writing_leaves_no_folder(tmp_path, monkeypatch):
    task = make_task("intrinsic-dim", T=4, D=1)
    model = InfoFlowTransformer(ModelConfig(d_in=4, n_ctx=4))

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("infoprobe.checkpoint.save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "ck", model, task)
    assert list(tmp_path.iterdir()) == []


def test_truncated_weights_are_detected(saved):
    path = saved[0]
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"SHA-256.*truncated"):
        load_checkpoint(path)


@pytest.mark.parametrize("field", ["model_config", "task", "weights_sha256", "format"])
def test_missing_field_is_named(saved, field):
    path = saved[0]
    meta = json.loads((path / "checkpoint.json").read_text())
    del meta[field]
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=f"missing field.*{field}"):
        load_checkpoint(path)


def test_foreign_truncated_and_absent_checkpoints(saved, tmp_path):
    path = saved[0]
    meta_path = path / "checkpoint.json"
    text = meta_path.read_text()
    meta_path.write_text(text[: len(text) // 2])
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(path)
    meta_path.write_text(json.dumps({**json.loads(text), "format": "other.tool"}))
    with pytest.raises(CheckpointError, match=r"'format'.*other\.tool"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="not a folder"):
        load_checkpoint(tmp_path / "nowhere")
    (path / "model.safetensors").unlink()
    meta_path.write_text(text)
    with pytest.raises(CheckpointError, match=r"missing model\.safetensors"):
        load_checkpoint(path)
