"""``n_layers`` means L, the number of blocks, in every file a run writes; the layer axis
of every array has L + 1 entries (layer 0 = the embedding), docs/conventions.md."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from infoprobe.checkpoint import load_checkpoint
from infoprobe.model import ModelConfig
from infoprobe.pipeline.run import run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("blank_report_figures", "one_thread")

TASK = make_task("intrinsic-dim", T=5, D=2)
# three blocks of unequal widths, so that L, L + 1 and a head count cannot be mistaken
MODEL = ModelConfig(d_in=4, n_ctx=5, d_model=16, heads=(1, 2, 2), d_mlp=16, d_readout=8)
TRAIN = TrainConfig(steps=40, batch_size=64, n_val=128, n_test=128, eval_every=20, lr=3e-3)
SETTINGS = RunSettings(n_cache=300, batch_size=100)
L = len(MODEL.heads)
BLOCK_COUNTS = ("n_layers", "n_blocks")
# the one on-disk field named n_layers that holds L + 1 (docs/influence.md), by format
LAYER_AXIS_FIELDS = {"infoprobe.influence": "n_layers"}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_fields(value: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    """Every (where, key, value) of a key in ``BLOCK_COUNTS`` inside a JSON value, and
    of a ``shape`` object's ``layers`` (the layer-axis length, given as that minus 1)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in BLOCK_COUNTS:
                yield where, key, item
            elif key == "shape" and isinstance(item, dict) and "layers" in item:
                yield where, "shape.layers (L+1)", item["layers"] - 1
            yield from _json_fields(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _json_fields(item, f"{where}[{i}]")


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return None
    return None


def _axes(obj: h5py.HLObject) -> list[str] | None:
    axes = _plain(obj.attrs.get("axes"))
    if isinstance(axes, str):
        axes = json.loads(axes)
    return axes


def _check_hdf5(path: Path, where: str, problems: list[str]) -> int:
    """Check one HDF5 file; return how many layer axes it has."""
    n_axes = 0
    with h5py.File(path, "r") as f:
        fmt = _plain(f.attrs.get("format"))
        objects: list[tuple[str, h5py.HLObject]] = [("/", f)]
        f.visititems(lambda name, obj: objects.append((f"/{name}", obj)))
        for name, obj in objects:
            for key, raw in obj.attrs.items():
                value = _plain(raw)
                if key in BLOCK_COUNTS:
                    axis_field = name == "/" and LAYER_AXIS_FIELDS.get(fmt) == key
                    want = L + 1 if axis_field else L
                    if value != want:
                        problems.append(f"{where}:{name} attribute {key} = {value!r}, not {want}")
                for at, field, item in _json_fields(_maybe_json(value), f"{name}@{key}"):
                    if item != L:
                        problems.append(f"{where}:{at} field {field} = {item!r}, not L = {L}")
            if isinstance(obj, h5py.Dataset):
                axes = _axes(obj)
                if axes is not None and "layer" in axes:
                    n_axes += 1
                    size = obj.shape[axes.index("layer")]
                    if size != L + 1:
                        problems.append(f"{where}:{name} {axes} has {size} layers, not L+1")
    return n_axes


def test_n_layers_is_the_block_count_and_the_layer_axis_has_l_plus_one(tmp_path):
    out = tmp_path / "run"
    run_pipeline(out, TASK, MODEL, TRAIN, SETTINGS, progress=False, log=lambda _: None)
    ck = load_checkpoint(out / "checkpoint")
    assert ck.model_config.n_layers == L
    assert tuple(ck.model_config.heads) == MODEL.heads
    assert len(ck.model.blocks) == L

    problems: list[str] = []
    n_json = n_h5 = n_layer_axes = 0
    for path in sorted(out.rglob("*")):
        where = str(path.relative_to(out))
        if path.suffix == ".json":
            n_json += 1
            for at, field, item in _json_fields(json.loads(path.read_text()), where):
                if item != L:
                    problems.append(f"{at} field {field} = {item!r}, not L = {L}")
        elif h5py.is_hdf5(path):
            n_h5 += 1
            n_layer_axes += _check_hdf5(path, where, problems)
    assert not problems, "\n".join(problems)
    # the walk saw the run's files: the caches, probes, flow and predicted sets, JSON
    assert n_h5 >= 5 and n_json >= 3 and n_layer_axes >= 5, (n_h5, n_json, n_layer_axes)
