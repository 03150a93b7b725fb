"""Every file infoprobe writes carries the header of docs/conventions.md ("File headers").

The expected formats, schema versions and axis vocabulary are read from the document, not
from the code, so a format that drifts from its documentation fails here. Files of each
format's previous schema are still read; newer ones are refused naming the field.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import h5py
import numpy as np
import pytest

from infoprobe.checkpoint import CheckpointError, load_checkpoint
from infoprobe.hooks import NewerSchemaError, ProvenanceMismatchError, open_cache
from infoprobe.hooks.hdf5 import json_differences
from infoprobe.influence import read_influence
from infoprobe.infoflow import read_sets
from infoprobe.infoflow.errors import SetsFileError
from infoprobe.model import ModelConfig
from infoprobe.pipeline.run import run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.probes.errors import ResultsFileError
from infoprobe.probes.results import ProbeResults
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("blank_report_figures", "one_thread")

CONVENTIONS = Path(__file__).parents[1] / "docs" / "conventions.md"
TASK = make_task("intrinsic-dim", T=5, D=2)
MODEL = ModelConfig(d_in=4, n_ctx=5, d_model=16, heads=(2, 2), d_mlp=16, d_readout=8)
TRAIN = TrainConfig(steps=40, batch_size=64, n_val=128, n_test=128, eval_every=20, lr=3e-3)
SETTINGS = RunSettings(n_cache=600, batch_size=200)
HEADER = ("format", "schema_version", "created", "infoprobe_version", "axes")
CREATED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def doc_section(title: str) -> str:
    text = CONVENTIONS.read_text()
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start : end if end >= 0 else None]


def doc_vocabulary() -> set[str]:
    """Axis names from the table of docs/conventions.md, "Axis names"."""
    rows = [line for line in doc_section("### Axis names").splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def doc_formats() -> dict[str, int]:
    """format → schema_version from the table of docs/conventions.md, "File headers"."""
    found = {}
    for line in doc_section("## File headers").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[2].startswith("`infoprobe.") and cells[3].isdigit():
            found[cells[2].strip("`")] = int(cells[3])
    return found


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("headers") / "run"
    start = datetime.now(UTC).replace(microsecond=0)
    run_pipeline(out, TASK, MODEL, TRAIN, SETTINGS, seeds=[0, 1], progress=False, log=None)
    return out, start, datetime.now(UTC)


def headers(folder: Path) -> dict[Path, dict]:
    """Every JSON and HDF5 file below ``folder`` → its header fields as plain Python."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".json":
            out[path] = json.loads(path.read_text())
        elif path.suffix == ".h5":
            with h5py.File(path, "r") as f:
                head = {k: f.attrs[k] for k in HEADER if k in f.attrs}
            out[path] = {
                k: [str(a) for a in v] if k == "axes" else (v.item() if hasattr(v, "item") else v)
                for k, v in head.items()
            }
    return out


def test_the_doc_lists_a_vocabulary_and_every_format():
    assert {"sample", "layer", "token", "position", "d_model", "d_head"} <= doc_vocabulary()
    assert "pos" not in doc_vocabulary()
    assert len(doc_formats()) == 13


def test_every_file_of_a_run_has_the_documented_header(run_dir):
    out, start, end = run_dir
    vocabulary, formats = doc_vocabulary(), doc_formats()
    found = headers(out)
    kinds = {h.get("format") for h in found.values()}
    # cache, probes, flow, pred, comparison, run, checkpoint, seeds, seed analysis, report
    assert len(found) >= 10 and len(kinds) == 10, sorted(map(str, kinds))
    for path, head in found.items():
        assert all(field in head for field in HEADER), (path, sorted(head))
        assert formats.get(head["format"]) == head["schema_version"], (path, head["format"])
        assert type(head["schema_version"]) is int
        assert head["infoprobe_version"] == metadata.version("infoprobe")
        assert CREATED.fullmatch(head["created"]), (path, head["created"])
        created = datetime.strptime(head["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert start <= created <= end, (path, created)
        axes = head["axes"]
        assert isinstance(axes, list) and len(set(axes)) == len(axes), (path, axes)
        assert set(axes) <= vocabulary, (path, set(axes) - vocabulary)


def test_every_hdf5_dataset_names_its_axes(run_dir):
    out, _, _ = run_dir
    vocabulary = doc_vocabulary()
    files = sorted(out.rglob("*.h5"))
    assert len(files) == 6
    for path in files:
        used = []
        with h5py.File(path, "r") as f:

            def check(name, item, path=path, used=used):
                if not isinstance(item, h5py.Dataset):
                    return
                axes = [str(a) for a in item.attrs["axes"]]
                assert len(axes) == item.ndim, (path, name, axes, item.shape)
                assert [d.label for d in item.dims] == axes, (path, name)
                assert set(axes) <= vocabulary, (path, name, axes)
                used.extend(axes)

            f.visititems(check)
            assert set(f.attrs["axes"]) == set(used), path


def v1_cache(src: Path, dst: Path) -> Path:
    """A copy of a schema-2 cache rewritten as schema 1 wrote it (docs/conventions.md)."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        f.attrs["schema_version"] = 1
        f.attrs["created_utc"] = f.attrs["created"]
        del f.attrs["created"], f.attrs["axes"]
        for name in ("inputs/x", *(f"acts/{k}" for k in f["acts"])):
            old = [{"token": "pos", "position": "pos"}.get(a, a) for a in f[name].attrs["axes"]]
            f[name].attrs["axes"] = old
        f["targets/y"].attrs["axes"] = ["sample", "out"]
    return dst


def test_a_schema_1_cache_is_read_but_never_resumed(run_dir, tmp_path):
    out, _, _ = run_dir
    old = v1_cache(out / "acts.h5", tmp_path / "old.h5")
    with open_cache(out / "acts.h5") as new, open_cache(old) as cache:
        assert cache.header["schema_version"] == 1
        assert cache.header["created"] == new.header["created"]
        assert np.array_equal(cache.x[:], new.x[:])
        assert np.array_equal(cache["resid_post", -1][:], new["resid_post", -1][:])
    from infoprobe.pipeline.caching import cache_checkpoint

    with pytest.raises(ProvenanceMismatchError) as info:
        cache_checkpoint(
            out / "checkpoint", old, n=600, sites="residual,attention", batch_size=200,
            progress=False,
        )  # fmt: skip
    assert str(old) in str(info.value)
    assert "schema_version: file has 1, this run has 2" in str(info.value)


def test_previous_schemas_of_the_other_formats_are_read(run_dir, tmp_path):
    out, _, _ = run_dir
    pred = shutil.copy(out / "pred.h5", tmp_path / "pred.h5")
    with h5py.File(pred, "r+") as f:
        for key in ("format", "schema_version", "created", "axes"):
            del f.attrs[key]
        f.attrs["schema"] = "infoprobe.predicted-sets/1"
        f.attrs["axes"] = "layer,sample,token,position"
    assert np.array_equal(read_sets(pred).sets, read_sets(out / "pred.h5").sets)

    flow = shutil.copy(out / "flow.h5", tmp_path / "flow.h5")
    with h5py.File(flow, "r+") as f:
        f.attrs["schema_version"] = 1
        f.attrs["axes"] = json.dumps(["layer", "sample", "token", "position"])
    old = read_influence(flow)
    assert old.header["axes"] == ["layer", "sample", "token", "position"]
    assert np.array_equal(old.scores, read_influence(out / "flow.h5").scores)

    probes = shutil.copy(out / "probes.h5", tmp_path / "probes.h5")
    with h5py.File(probes, "r+") as f:
        f.attrs["schema_version"] = 1
        del f.attrs["axes"]
    assert (
        ProbeResults.read(probes).scores.keys()
        == ProbeResults.read(out / "probes.h5").scores.keys()
    )

    ckpt = tmp_path / "checkpoint"
    shutil.copytree(out / "checkpoint", ckpt)
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta["format_version"] = meta.pop("schema_version")
    del meta["axes"], meta["infoprobe_version"]
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))
    assert (
        load_checkpoint(ckpt).weights_sha256 == load_checkpoint(out / "checkpoint").weights_sha256
    )


def test_a_run_folder_of_schema_1_resumes(run_dir, tmp_path):
    out, _, _ = run_dir
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "run.json").read_text())
    for key in ("schema_version", "created", "infoprobe_version", "axes"):
        del manifest[key]
    (copy / "run.json").write_text(json.dumps(manifest))
    lines: list[str] = []
    run_pipeline(copy, TASK, MODEL, TRAIN, SETTINGS, seeds=[0, 1], progress=False,
                 log=lines.append)  # fmt: skip
    assert lines and all("up to date" in line for line in lines)


def test_newer_schemas_are_refused_naming_file_field_and_values(run_dir, tmp_path):
    out, _, _ = run_dir

    def newer_h5(name: str, version=99) -> Path:
        path = Path(shutil.copy(out / name, tmp_path / name))
        with h5py.File(path, "r+") as f:
            f.attrs["schema_version"] = version
        return path

    readers = [
        (ValueError, lambda v: open_cache(newer_h5("acts.h5", v))),  # NewerSchemaError for 99
        (SetsFileError, lambda v: read_sets(newer_h5("pred.h5", v))),
        (ValueError, lambda v: read_influence(newer_h5("flow.h5", v))),
        (ResultsFileError, lambda v: ProbeResults.read(newer_h5("probes.h5", v))),
    ]
    with pytest.raises(NewerSchemaError):
        open_cache(newer_h5("acts.h5"))
    for error, read in readers:
        for bad in (99, "two"):  # newer, and not an integer at all
            with pytest.raises(error) as info:
                read(bad)
            message = str(info.value)
            assert str(tmp_path) in message and "schema_version" in message, message
            assert str(bad) in message, message
            newest = "4" if read is readers[-1][1] else "2"  # probes.h5 is at schema 4
            assert newest in message.replace("99", ""), message  # the version this reads
    ckpt = tmp_path / "ckpt"
    shutil.copytree(out / "checkpoint", ckpt)
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    (ckpt / "checkpoint.json").write_text(json.dumps({**meta, "schema_version": 99}))
    with pytest.raises(CheckpointError, match=r"'schema_version' is 99, expected .*1\.\.3"):
        load_checkpoint(ckpt)


def flatten(value, prefix=""):
    """Leaf paths of a nested dict → value (brute force, for json_differences)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def test_json_differences_names_exactly_the_leaves_that_differ():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = {
            str(k): int(rng.integers(3)) if rng.random() < 0.6 else {"x": int(rng.integers(2))}
            for k in range(4)
        }
        b = json.loads(json.dumps(a))
        for key in rng.choice(4, size=int(rng.integers(0, 4)), replace=False):
            b[str(key)] = int(rng.integers(3))
        flat_a, flat_b = flatten(a), flatten(b)
        paths = set(flat_a) | set(flat_b)
        differ = {p for p in paths if flat_a.get(p, "<absent>") != flat_b.get(p, "<absent>")}
        # a value against an object is one difference, named at the shallower path
        expected = {p for p in differ if not any(p.startswith(f"{q}.") for q in paths)}
        lines = json_differences(a, b)
        assert {line.split(":")[0] for line in lines} == expected
        for line in json_differences(a, b, "key"):
            assert line.startswith("key.") and ": file has " in line and ", this run has " in line


def test_one_header_helper_reads_attributes_and_refuses_with_the_right_class(tmp_path):
    """hooks, probes and the hub share infoprobe.base.header: attribute values become plain
    Python (arrays as lists), and a check names the file, field, expected and found value,
    with a separate class for a newer schema where the caller asks for one."""
    from infoprobe.base import header
    from infoprobe.hooks import hdf5
    from infoprobe.probes import results

    assert hdf5.plain_attr is header.plain_attr and hdf5.check_format is header.check_format
    assert results.plain_attr is header.plain_attr
    assert header.plain_attr(np.array([b"a", b"b"], dtype=object)) == ["a", "b"]
    assert header.plain_attr(np.array([[1, 2]])) == [[1, 2]]
    assert header.plain_attr(np.int64(3)) == 3 and type(header.plain_attr(np.int64(3))) is int

    class Foreign(ValueError): ...

    class Newer(ValueError): ...

    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        header.write_attrs(f.attrs, header.make_header("infoprobe.x", 5, ["sample"]))
    with h5py.File(path, "r") as f:
        assert header.check_format(f, path, fmt="infoprobe.x", schema_version=5, what="an x",
                                   not_ours=Foreign, newer=Newer) == 5  # fmt: skip
        with pytest.raises(Foreign, match=r"x\.h5 is not an x: root attribute 'format' is"):
            header.check_format(f, path, fmt="infoprobe.y", schema_version=5, what="an x",
                                not_ours=Foreign, newer=Newer)  # fmt: skip
        with pytest.raises(Newer, match=r"'schema_version' is 5, expected an integer in 1\.\.4"):
            header.check_format(f, path, fmt="infoprobe.x", schema_version=4, what="an x",
                                not_ours=Foreign, newer=Newer)  # fmt: skip
        with pytest.raises(Foreign, match=r"is 5, expected an integer in 6\.\.7.*damaged"):
            header.check_header(f.attrs, path, fmt="infoprobe.x", readable=range(6, 8),
                                error=Foreign, newer=Newer, what="root attribute")  # fmt: skip
