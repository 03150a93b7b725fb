"""Raw cache writes (``os.pwrite`` at the chunks' file offsets) give the file h5py would.

Every check writes the same cache twice, once with raw writes and once with every dataset
through h5py's ``write_direct``, and compares what a reader sees (values, shapes, dtypes,
chunks, attributes, dimension labels); chunk sizes are chosen so that batches start and
end inside chunks and the last chunk is partial. The values are also compared with arrays
computed without the writer (the batch function and TransformerLens' own cache), so
wrong offsets cannot pass by being wrong the same way in both files.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from infoprobe.hooks import CachePlan, open_cache, plan_cache, read_header, write_cache
from infoprobe.hooks import raw as raw_module
from infoprobe.hooks import writer as writer_module
from infoprobe.hooks.raw import raw_rows, unsupported_reason
from infoprobe.hooks.schema import DatasetPlan
from infoprobe.model import InfoFlowTransformer, ModelConfig

CFG = dict(d_in=3, n_ctx=5, d_model=12, heads=[2, 3], d_mlp=16, d_readout=8)
SITES = "residual,attention"
PROVENANCE = {"checkpoint_sha256": None, "model_config": CFG, "data_spec": {"seed": 11}}
# (n, batch size, samples per chunk or None for the writer's own choice, storage dtype)
LAYOUTS = [
    (22, 8, None, "float32"),
    (22, 7, 3, "float32"),
    (22, 4, 10, "float32"),
    (9, 9, 4, "float32"),
    (22, 7, 3, "float16"),
]

pytestmark = pytest.mark.usefixtures("one_thread")


def make_model() -> InfoFlowTransformer:
    return InfoFlowTransformer(ModelConfig.from_dict(CFG), seed=3)


def batch_fn(index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Random x [size, n_ctx, d_in] and y [size, 2] of batch ``index``."""
    rng = np.random.default_rng([11, index])
    x = rng.standard_normal((size, CFG["n_ctx"], CFG["d_in"])).astype(np.float32)
    return x, rng.standard_normal((size, 2)).astype(np.float32)


def with_chunk_rows(plan: CachePlan, rows: int | None) -> CachePlan:
    """``plan`` with ``rows`` samples per chunk in every dataset (None: unchanged)."""
    if rows is None:
        return plan
    datasets = tuple(
        dataclasses.replace(d, chunks=(min(rows, plan.n), *d.chunks[1:])) for d in plan.datasets
    )
    return dataclasses.replace(plan, datasets=datasets)


def write(
    path: Path,
    monkeypatch,
    *,
    raw: bool,
    n: int,
    batch: int,
    rows: int | None,
    dtype: str = "float32",
    fn=batch_fn,
):
    """Write (or resume) the cache at ``path`` with raw writes on or off."""
    monkeypatch.setattr(writer_module, "RAW_WRITES", raw)
    model = make_model()
    plan = plan_cache(model, fn, n=n, batch_size=batch, sites=SITES, dtype=dtype)
    return write_cache(
        path,
        model,
        fn,
        n=n,
        batch_size=batch,
        sites=SITES,
        provenance=PROVENANCE,
        dtype=dtype,
        progress=False,
        plan=with_chunk_rows(plan, rows),
    )


def plain(value):
    """An attribute value comparable with ``==`` (arrays as lists)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def contents(path: Path) -> dict[str, object]:
    """What a reader of ``path`` sees: root attributes except the creation time, and per
    dataset its values, shape, dtype, chunks, maxshape, filters, attributes, labels."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        out["/"] = {k: plain(v) for k, v in f.attrs.items() if k != "created"}

        def visit(name: str, obj) -> None:
            if isinstance(obj, h5py.Dataset):
                out[name] = {
                    "values": obj[()].tobytes(),
                    "layout": (obj.shape, obj.dtype.str, obj.chunks, obj.maxshape),
                    "filters": obj.id.get_create_plist().get_nfilters(),
                    "attrs": {k: plain(v) for k, v in obj.attrs.items() if k != "DIMENSION_LIST"},
                    "labels": [dim.label for dim in obj.dims],
                }

        f.visititems(visit)
    return out


def assert_same_contents(a: Path, b: Path) -> None:
    got, want = contents(a), contents(b)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"{a} and {b} differ in {name}"


def expected_arrays(n: int, batch: int) -> dict[str, np.ndarray]:
    """Every dataset's values computed without the writer: x and y from ``batch_fn``,
    activations from TransformerLens' ``run_with_cache`` batch by batch."""
    model = make_model()
    parts: dict[str, list[np.ndarray]] = {}
    for index, start in enumerate(range(0, n, batch)):
        x, y = batch_fn(index, min(batch, n - start))
        with torch.inference_mode():
            _, cache = model.run_with_cache(torch.from_numpy(x))
        arrays = {"inputs/x": x, "targets/y": y}
        arrays.update({f"acts/{name}": t.numpy() for name, t in cache.items()})
        for key, value in arrays.items():
            parts.setdefault(key, []).append(value)
    return {key: np.concatenate(value) for key, value in parts.items()}


def assert_matches_expected(path: Path, n: int, batch: int) -> None:
    """Inputs and targets exactly, activations to the storage type's rounding, sample by
    sample."""
    expected = expected_arrays(n, batch)
    with open_cache(path) as cache:
        np.testing.assert_array_equal(cache.x[:], expected["inputs/x"])
        np.testing.assert_array_equal(cache.y[:], expected["targets/y"])
        rtol = {"float32": 1e-5, "float16": 2.0**-10}[cache.dtype]
        for name in cache.hook_names:
            stored = cache.acts(name)[:]
            assert stored.dtype == np.dtype(cache.dtype), name
            np.testing.assert_allclose(
                stored, expected[f"acts/{name}"], rtol=rtol, atol=1e-6, err_msg=name
            )


def count_write_direct(monkeypatch) -> list[int]:
    """Count calls of h5py's ``Dataset.write_direct`` from now on (a one-item list)."""
    calls = [0]
    original = h5py.Dataset.write_direct

    def counting(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "write_direct", counting)
    return calls


# --- the same file ------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "batch", "rows", "dtype"), LAYOUTS)
def test_raw_writes_give_the_file_hdf5_writes_give(tmp_path, monkeypatch, n, batch, rows, dtype):
    calls = count_write_direct(monkeypatch)
    layout = dict(n=n, batch=batch, rows=rows, dtype=dtype)
    write(tmp_path / "raw.h5", monkeypatch, raw=True, **layout)
    assert calls[0] == 0, "every dataset qualifies for raw writes, none may go through HDF5"
    write(tmp_path / "hdf5.h5", monkeypatch, raw=False, **layout)
    assert calls[0] > 0
    with h5py.File(tmp_path / "raw.h5", "r") as f:
        if rows is not None:
            assert f["inputs/x"].chunks[0] == min(rows, n)
    assert_same_contents(tmp_path / "raw.h5", tmp_path / "hdf5.h5")
    assert_matches_expected(tmp_path / "raw.h5", n, batch)


class Interrupted(RuntimeError):
    """Raised on purpose to stop a cache part way."""


def fail_in_batch_fn(monkeypatch):
    """From now on, generating batch 2 fails (batches 0 and 1 are committed)."""

    def failing(index: int, size: int):
        if index == 2:
            raise Interrupted("batch 2 not generated")
        return batch_fn(index, size)

    return failing


def fail_mid_write(monkeypatch):
    """From now on, the 3rd dataset write of batch 2 fails (its first two datasets hold
    batch 2's samples past the cursor), whichever path writes it."""
    calls = [0]

    def wrap(original):
        def failing(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 2 * 13 + 3:  # 13 datasets per batch
                raise Interrupted("killed inside batch 2")
            return original(*args, **kwargs)

        return failing

    monkeypatch.setattr(raw_module.RawRows, "write", wrap(raw_module.RawRows.write))
    monkeypatch.setattr(h5py.Dataset, "write_direct", wrap(h5py.Dataset.write_direct))
    return batch_fn


@pytest.mark.parametrize("failure", [fail_in_batch_fn, fail_mid_write])
@pytest.mark.parametrize(("first", "then"), [(True, True), (False, True), (True, False)])
def test_an_interrupted_write_resumes_to_the_same_file(tmp_path, failure, first, then):
    n, batch, rows = 22, 7, 3
    with pytest.MonkeyPatch.context() as patch:
        fn = failure(patch)
        with pytest.raises(Interrupted):
            write(tmp_path / "a.h5", patch, raw=first, n=n, batch=batch, rows=rows, fn=fn)
    assert read_header(tmp_path / "a.h5", allow_incomplete=True)["n_committed"] == 2 * batch
    with pytest.MonkeyPatch.context() as patch:
        summary = write(tmp_path / "a.h5", patch, raw=then, n=n, batch=batch, rows=rows)
        assert summary.resumed_from == 2 * batch
        write(tmp_path / "b.h5", patch, raw=False, n=n, batch=batch, rows=rows)
    assert_same_contents(tmp_path / "a.h5", tmp_path / "b.h5")
    assert_matches_expected(tmp_path / "a.h5", n, batch)


def test_the_value_check_catches_wrong_offsets(tmp_path, monkeypatch):
    """Chunk offsets one chunk out of place put samples in the wrong rows; the comparison
    with independently computed arrays must see it (else the tests above prove nothing)."""
    offsets = raw_module.chunk_offsets
    monkeypatch.setattr(raw_module, "chunk_offsets", lambda ds: np.roll(offsets(ds), 1))
    write(tmp_path / "wrong.h5", monkeypatch, raw=True, n=22, batch=7, rows=3)
    with pytest.raises(AssertionError):
        assert_matches_expected(tmp_path / "wrong.h5", 22, 7)


def test_short_pwrites_are_continued(tmp_path, monkeypatch):
    pwrite = raw_module.os.pwrite
    monkeypatch.setattr(raw_module.os, "pwrite", lambda fd, data, off: pwrite(fd, data[:40], off))
    write(tmp_path / "short.h5", monkeypatch, raw=True, n=22, batch=7, rows=3)
    assert_matches_expected(tmp_path / "short.h5", 22, 7)


# --- what qualifies -----------------------------------------------------------------------
def early(**kwargs) -> dict:
    """create_dataset arguments of a [10, 3] dataset with its chunks allocated at creation."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return dict(shape=(10, 3), maxshape=(None, 3), chunks=(4, 3), dtype="<f4", dcpl=dcpl) | kwargs


UNSUPPORTED = {
    "gzip": (dict(compression="gzip"), "filters"),
    "big-endian": (dict(dtype=">f4"), "not the machine's own float32"),
    "part-sample chunks": (dict(chunks=(4, 1)), "whole samples"),
    "contiguous": (dict(chunks=None, maxshape=None), "not chunked"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_datasets_raw_bytes_would_not_fit_go_through_hdf5(tmp_path, case):
    changes, words = UNSUPPORTED[case]
    with h5py.File(tmp_path / "f.h5", "w") as f:
        ds = f.create_dataset("d", **early(**changes))
        assert words in unsupported_reason(ds)
        assert raw_rows(ds) is None


def test_unallocated_chunks_and_user_blocks_go_through_hdf5(tmp_path):
    with h5py.File(tmp_path / "late.h5", "w") as f:
        ds = f.create_dataset("d", shape=(10, 3), maxshape=(None, 3), chunks=(4, 3), dtype="f4")
        assert unsupported_reason(ds) is None and raw_rows(ds) is None
    with h5py.File(tmp_path / "ub.h5", "w", userblock_size=512) as f:
        assert "user block" in unsupported_reason(f.create_dataset("d", **early()))


def test_one_batch_mixes_raw_and_hdf5_datasets(tmp_path):
    """A compressed and a big-endian dataset beside a raw one: each gets its values."""
    paths = {"raw": {}, "gzip": dict(compression="gzip"), "big": dict(dtype=">f4")}
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.attrs["n_committed"] = 0
        for name, changes in paths.items():
            f.create_dataset(name, **early(**changes))
    plan = CachePlan(
        10,
        4,
        "float32",
        (),
        0,
        tuple(DatasetPlan(p, (10, 3), "float32", (4, 3), ("a", "b")) for p in paths),
    )
    values = np.arange(30, dtype=np.float32).reshape(10, 3)
    with h5py.File(tmp_path / "m.h5", "r+", rdcc_nbytes=0) as f:
        committer = writer_module._Committer(f, plan, durable=True)
        assert sorted(committer.raw) == ["raw"]
        for start in (0, 4, 8):
            committer.write(start, {p: values[start : start + 4] for p in paths})
            assert f.attrs["n_committed"] == min(start + 4, 10)
    with h5py.File(tmp_path / "m.h5", "r") as f:
        for name in paths:
            np.testing.assert_array_equal(f[name][()], values, err_msg=name)
