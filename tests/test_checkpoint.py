"""Checkpoints: bit-identical round trip, atomic writes, and every bad checkpoint."""

import json

import numpy as np
import pytest
import torch

import infoprobe
from infoprobe.base.atomic import OutputExistsError
from infoprobe.base.errors import UsageError
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

    monkeypatch.setattr("safetensors.torch.save_file", boom)
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
        load_checkpoint(path, allow_no_task=False)


def test_a_checkpoint_without_a_task_loads_with_no_flag(saved):
    """A checkpoint saved with no task (its data come from a file) loads as it is: its
    model, no task; a caller that draws samples asks for a task and is told it is missing."""
    path, model = saved[0], saved[1]
    meta = json.loads((path / "checkpoint.json").read_text())
    del meta["task"]
    (path / "checkpoint.json").write_text(json.dumps(meta))
    ck = load_checkpoint(path)
    assert ck.task is None
    for name, tensor in model.state_dict().items():
        assert torch.equal(ck.model.state_dict()[name], tensor)
    with pytest.raises(CheckpointError, match=r"missing field.*task"):
        load_checkpoint(path, allow_no_task=False)


@pytest.mark.parametrize("value", ["no", 1, None, "False"])
def test_trust_and_task_flags_take_only_a_bool(saved, value):
    """``trust_code="no"`` is truthy: anything but a bool is refused, never taken as trust."""
    for name in ("trust_code", "allow_no_task"):
        with pytest.raises(UsageError, match=f"{name}: expected True or False"):
            load_checkpoint(saved[0], **{name: value})


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


# --- corrupt metadata: a ValueError of infoprobe naming the file and the field ----------


def rewrite_meta(path, **changes):
    meta_path = path / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    meta_path.write_text(json.dumps(meta))
    return meta_path


def assert_names(err, *words):
    assert isinstance(err, ValueError) and type(err).__module__.startswith("infoprobe")
    for word in words:
        assert word in str(err), (word, str(err))


def test_truncated_or_non_object_json_names_the_file(saved):
    path = saved[0]
    meta_path = path / "checkpoint.json"
    meta_path.write_text(meta_path.read_text()[:10])
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(meta_path), "not valid JSON")
    meta_path.write_text("[1, 2]")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(meta_path), "JSON object", "list")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("schema_version", "1", ["schema_version", "'1'", "integer"]),
        ("schema_version", None, ["schema_version", "None"]),
        ("schema_version", 0, ["schema_version", "0"]),
        ("schema_version", 99, ["schema_version", "99", "upgrade infoprobe"]),
        ("history", {"step": 1}, ["history", "list"]),
        ("history", [1, 2], ["history", "list of objects"]),
        ("weights_sha256", 12, ["weights_sha256", "64 hex"]),
        ("model_config", [1, 2], ["model_config", "object"]),
        ("model_config", {"d_in": "4", "n_ctx": 5}, ["model_config", "d_in", "'4'"]),
        ("model_config", {"d_in": 1, "n_ctx": 5, "heads": "2,2"}, ["model_config", "heads"]),
        ("model_config", {"d_in": 1, "n_ctx": 5, "residual": "no"}, ["model_config", "residual"]),
        ("model_config", {"d_in": 1, "n_ctx": 5, "d_model": 8.5}, ["model_config", "d_model"]),
        ("train_config", "fast", ["train_config", "object"]),
        ("metrics", [], ["metrics", "object"]),
    ],
)
def test_wrong_types_name_the_file_and_the_field(saved, field, value, words):
    path = saved[0]
    meta_path = rewrite_meta(path, **{field: value})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(meta_path), *words)


def test_model_config_that_disagrees_with_the_weights_is_named(saved):
    path, model, _ = saved
    config = {**model.cfg.to_dict(), "d_model": 16, "heads": [2]}
    meta_path = rewrite_meta(path, model_config=config)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(meta_path), "model_config", "embed.W_E", "[2, 16]", "[2, 8]")


def _resave(path, state):
    from safetensors.torch import save_file

    from infoprobe.checkpoint import file_sha256

    weights = path / "model.safetensors"
    save_file(state, str(weights))
    rewrite_meta(path, weights_sha256=file_sha256(weights))
    return weights


def test_renamed_tensor_is_named(saved):
    path, model, _ = saved
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["embed.W_renamed"] = state.pop("embed.W_E")
    weights = _resave(path, state)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(weights), "embed.W_E", "embed.W_renamed")


def test_a_pickle_as_weights_file_is_refused(saved):
    import hashlib
    import pickle

    path = saved[0]
    weights = path / "model.safetensors"
    weights.write_bytes(pickle.dumps({"embed.W_E": [1.0, 2.0]}))
    rewrite_meta(path, weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest())
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert_names(info.value, str(weights), "not a safetensors file")


def test_versions_are_the_installed_ones_and_files_have_the_usual_mode(saved):
    """checkpoint.json names the installed transformer-lens (4.x has no __version__), and
    the weights file is as readable as any file the user writes (0666 less the umask)."""
    import os
    from importlib import metadata

    path = saved[0]
    versions = json.loads((path / "checkpoint.json").read_text())["versions"]
    assert versions["transformer_lens"] == metadata.version("transformer-lens") != "unknown"
    assert versions["torch"] == torch.__version__
    mask = os.umask(0)
    os.umask(mask)
    for name in ("model.safetensors", "checkpoint.json"):
        assert (path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name


@pytest.mark.parametrize(
    "text, words",
    [
        ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
        ('{"format": ' + "9" * 100_000 + "}", "cannot be read as numbers"),
    ],
    ids=["deep", "long-integer"],
)
def test_hostile_json_is_one_error_naming_the_file(saved, text, words):
    meta_path = saved[0] / "checkpoint.json"
    meta_path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(saved[0])
    assert_names(info.value, str(meta_path), words)
