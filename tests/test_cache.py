"""The HDF5 activation cache: contents, resume after kill -9, refusals, bad files, reading."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformer_lens import ActivationCache

from infoprobe.hooks import (
    BatchFunctionError,
    Float16OverflowError,
    IncompleteCacheError,
    InsufficientDiskError,
    NewerSchemaError,
    NotACacheError,
    ProvenanceMismatchError,
    TruncatedCacheError,
    UnknownSiteError,
    layer_sites,
    open_cache,
    read_header,
    resolve_sites,
    write_cache,
)
from infoprobe.hooks.schema import CHUNK_MIN_BYTES, CHUNK_TARGET_BYTES, chunk_rows
from infoprobe.model import InfoFlowTransformer, ModelConfig

CFG = dict(d_in=3, n_ctx=5, d_model=12, heads=[2, 3], d_mlp=16, d_readout=8)
N, BATCH, SEED = 22, 8, 5  # three batches: 8, 8, 6


pytestmark = pytest.mark.usefixtures("one_thread")


def make_model(seed: int = 3) -> InfoFlowTransformer:
    return InfoFlowTransformer(ModelConfig.from_dict(CFG), seed=seed)


def batch_fn(index: int, size: int, seed: int = SEED):
    rng = np.random.default_rng([seed, index])
    x = rng.standard_normal((size, CFG["n_ctx"], CFG["d_in"])).astype(np.float32)
    return x, x.max(axis=(1, 2))[:, None]


def provenance(**changes) -> dict:
    base = {
        "checkpoint_sha256": "ab" * 32,
        "model_config": CFG,
        "data_spec": {"seed": SEED, "n": N, "batch_size": BATCH},
    }
    return {**base, **changes}


def make_cache(
    path: Path,
    *,
    model=None,
    sites="residual,attention",
    n=N,
    batch_size=BATCH,
    dtype="float32",
    prov=None,
    fn=batch_fn,
    overwrite=False,
):
    return write_cache(
        path,
        model or make_model(),
        fn,
        n=n,
        batch_size=batch_size,
        sites=sites,
        provenance=prov or provenance(),
        dtype=dtype,
        overwrite=overwrite,
        progress=False,
    )


def all_datasets(path: Path) -> dict[str, bytes]:
    """Every dataset's raw bytes, read with plain h5py."""
    out: dict[str, bytes] = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()].tobytes()) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_inputs(n: int = N, batch_size: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """x, y of the whole cache computed independently of the writer's batching code."""
    xs, ys, start = [], [], 0
    for index in range(0, 1000):
        if start >= n:
            break
        size = min(batch_size, n - start)
        x, y = batch_fn(index, size)
        xs.append(x)
        ys.append(y)
        start += size
    return np.concatenate(xs), np.concatenate(ys)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted cache (residual + attention, float32)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("ref") / "acts.h5"
    make_cache(path)
    torch.set_num_threads(before)
    return path


# --- contents -------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["residual", "attention", "all", "layers"])
def test_every_preset_gives_documented_names_and_shapes(tmp_path, preset):
    model = make_model()
    make_cache(tmp_path / "a.h5", model=model, sites=preset, n=10, batch_size=4)
    x, _ = batch_fn(0, 2)
    with torch.inference_mode():
        _, ref = model.run_with_cache(torch.from_numpy(x))
    with open_cache(tmp_path / "a.h5") as cache:
        assert set(cache.hook_names) == set(resolve_sites(model.hook_dict, preset))
        assert cache.x.shape == (10, CFG["n_ctx"], CFG["d_in"]) and cache.y.shape == (10, 1)
        for name in cache.hook_names:
            assert cache.acts(name).shape == (10, *ref[name].shape[1:]), name
            assert len(cache.axes(name)) == ref[name].ndim


def test_values_equal_a_fresh_run_with_cache_on_the_same_samples(reference):
    x_expected, y_expected = expected_inputs()
    model = make_model()
    with open_cache(reference) as cache:
        np.testing.assert_array_equal(cache.x[:], x_expected)
        np.testing.assert_array_equal(cache.y[:], y_expected)
        with torch.inference_mode():
            _, ref = model.run_with_cache(torch.from_numpy(x_expected))
        for name in cache.hook_names:
            np.testing.assert_allclose(
                cache.acts(name)[:], ref[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name
            )
        assert cache.dtype == "float32" and cache.n == N and cache.complete


def test_float16_round_trip_is_within_half_precision(tmp_path, reference):
    make_cache(tmp_path / "h.h5", dtype="float16")
    with open_cache(tmp_path / "h.h5") as half, open_cache(reference) as full:
        assert half.dtype == "float16"
        np.testing.assert_array_equal(half.x[:], full.x[:])  # inputs stay float32
        for name in full.hook_names:
            stored = half.acts(name)[:]
            assert stored.dtype == np.float16
            exact = full.acts(name)[:]
            # round-to-nearest: |error| <= 2^-11 |a| (normal) or 2^-25 (subnormal spacing / 2)
            bound = 2.0**-11 * np.abs(exact) + 2.0**-25
            assert np.all(np.abs(stored.astype(np.float32) - exact) <= bound), name


def test_float16_overflow_is_refused(tmp_path):
    model = make_model()
    with torch.no_grad():
        model.embed.W_E.mul_(1e6)
    with pytest.raises(Float16OverflowError, match="65504"):
        make_cache(tmp_path / "o.h5", model=model, dtype="float16", sites="layers")


def test_plain_h5py_finds_everything_the_format_doc_promises(reference):
    with h5py.File(reference, "r") as f:
        attrs = dict(f.attrs)
        for key in (
            "format",
            "schema_version",
            "infoprobe_version",
            "created",
            "axes",
            "n",
            "batch_size",
            "n_committed",
            "dtype",
            "hook_names",
            "n_blocks",
            "checkpoint_sha256",
            "model_config_json",
            "data_spec_json",
            "provenance_json",
        ):
            assert key in attrs, key
        assert attrs["format"] == "infoprobe.activation-cache"
        assert attrs["schema_version"] == 2 and attrs["n_committed"] == attrs["n"] == N
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", attrs["created"])
        assert attrs["checkpoint_sha256"] == "ab" * 32
        assert json.loads(attrs["model_config_json"]) == CFG
        assert json.loads(attrs["data_spec_json"]) == provenance()["data_spec"]
        assert json.loads(attrs["provenance_json"]) == provenance()
        assert attrs["n_blocks"] == 2
        names = [str(h) for h in attrs["hook_names"]]
        assert f["inputs/x"].shape == (N, CFG["n_ctx"], CFG["d_in"])
        assert list(f["inputs/x"].attrs["axes"]) == ["sample", "position", "d_in"]
        assert list(f["targets/y"].attrs["axes"]) == ["sample", "d_out"]
        assert list(f["acts/blocks.0.hook_resid_post"].attrs["axes"]) == [
            "sample",
            "token",
            "d_model",
        ]
        assert set(f["acts"]) == set(names)
        for name in names:
            ds = f["acts"][name]
            assert ds.shape[0] == N and ds.dtype == np.float32
            assert ds.chunks[1:] == ds.shape[1:], "a chunk holds whole samples"
            assert ds.compression is None
            assert ds.maxshape[0] is None  # resizable along samples
        pattern = f["acts/blocks.1.attn.hook_pattern"]
        assert list(pattern.attrs["axes"]) == ["sample", "head", "query", "key"]
        assert pattern.shape == (N, 3, CFG["n_ctx"] + 1, CFG["n_ctx"] + 1)


@given(row_bytes=st.integers(1, 3 << 20), batch=st.integers(1, 4096), n=st.integers(1, 10**6))
def test_chunk_rows_properties(row_bytes, batch, n):
    rows = chunk_rows(row_bytes, batch, n)
    assert 1 <= rows <= min(batch, n)
    assert rows == 1 or rows * row_bytes <= CHUNK_TARGET_BYTES
    cap = max(1, min(CHUNK_TARGET_BYTES // row_bytes, batch, n))
    aligned = max(d for d in range(1, cap + 1) if batch % d == 0)
    if aligned * row_bytes >= min(CHUNK_MIN_BYTES, cap * row_bytes):
        assert batch % rows == 0  # whole chunks per batch whenever that is not too small


# --- resume ---------------------------------------------------------------------------------
def test_interrupted_run_resumes_to_an_identical_file(tmp_path, reference):
    path = tmp_path / "acts.h5"

    def failing(index, size):
        if index == 2:
            raise RuntimeError("simulated crash while generating batch 2")
        return batch_fn(index, size)

    with pytest.raises(RuntimeError, match="simulated"):
        make_cache(path, fn=failing)
    assert read_header(path, allow_incomplete=True)["n_committed"] == 2 * BATCH
    with pytest.raises(IncompleteCacheError, match=r"n_committed=16 of n=22.*resume"):
        open_cache(path)
    summary = make_cache(path)
    assert summary.resumed_from == 2 * BATCH and summary.n_written == N - 2 * BATCH
    assert all_datasets(path) == all_datasets(reference)
    again = make_cache(path)  # complete: nothing is rewritten
    assert again.n_written == 0 and all_datasets(path) == all_datasets(reference)


CHILD = """
import os, signal, sys
import h5py, numpy as np, torch
torch.set_num_threads(1)
from infoprobe.hooks import write_cache
from infoprobe.model import InfoFlowTransformer, ModelConfig
mode, kill_at, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
calls = [0]
def kill_on(count):
    calls[0] += 1
    if calls[0] == count:
        os.kill(os.getpid(), signal.SIGKILL)
if mode == "dataset-write":  # killed in the middle of writing a batch's datasets (raw)
    pwrite = os.pwrite
    def patched(*args):
        kill_on(kill_at)
        return pwrite(*args)
    os.pwrite = patched
elif mode == "hdf5-dataset-write":  # the same, every dataset written through h5py
    import infoprobe.hooks.writer
    infoprobe.hooks.writer.RAW_WRITES = False
    write_direct = h5py.Dataset.write_direct
    def patched(self, *args, **kwargs):
        kill_on(kill_at)
        return write_direct(self, *args, **kwargs)
    h5py.Dataset.write_direct = patched
elif mode == "before-cursor":  # data flushed (and fsync'ed), cursor not yet advanced
    modify = h5py.AttributeManager.modify
    def patched(self, name, value):
        if name == "n_committed":
            kill_on(kill_at)
        return modify(self, name, value)
    h5py.AttributeManager.modify = patched
def batch_fn(index, size):
    rng = np.random.default_rng([SEED, index])
    x = rng.standard_normal((size, CFG["n_ctx"], CFG["d_in"])).astype(np.float32)
    return x, x.max(axis=(1, 2))[:, None]
model = InfoFlowTransformer(ModelConfig.from_dict(CFG), seed=3)
write_cache(path, model, batch_fn, n=N, batch_size=BATCH, sites="residual,attention",
            provenance=PROVENANCE, progress=False, durable=DURABLE)
print("finished without being killed")
"""


@pytest.mark.parametrize(
    ("mode", "kill_at", "durable"),
    [
        ("dataset-write", 2 * 13 + 5, False),
        ("hdf5-dataset-write", 2 * 13 + 5, False),
        ("before-cursor", 2, True),
    ],
)
def test_kill_9_mid_run_then_resume_gives_identical_datasets(
    tmp_path, reference, mode, kill_at, durable
):
    path = tmp_path / "acts.h5"
    script = tmp_path / "child.py"
    script.write_text(
        f"CFG = {CFG!r}\nSEED, N, BATCH = {SEED}, {N}, {BATCH}\nPROVENANCE = {provenance()!r}\n"
        f"DURABLE = {durable}\n" + textwrap.dedent(CHILD)
    )
    child = subprocess.run(
        [sys.executable, str(script), mode, str(kill_at), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stdout + child.stderr
    committed = read_header(path, allow_incomplete=True)["n_committed"]
    # *dataset-write: killed inside batch 2 (13 datasets of one chunk per batch);
    # before-cursor: batch 1
    assert committed == (2 * BATCH if mode.endswith("dataset-write") else BATCH)
    summary = make_cache(path)
    assert summary.resumed_from == committed
    assert all_datasets(path) == all_datasets(reference)


# --- refusals ------------------------------------------------------------------------------
CHANGES = {
    "checkpoint": dict(prov=provenance(checkpoint_sha256="cd" * 32)),
    "data seed": dict(prov=provenance(data_spec={"seed": 6, "n": N, "batch_size": BATCH})),
    "sites": dict(sites="residual"),
    "dtype": dict(dtype="float16"),
    "n": dict(n=N + 8),
    "batch size": dict(batch_size=BATCH // 2),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_different_run_refuses_to_append_and_leaves_the_file_untouched(
    tmp_path, reference, change
):
    path = tmp_path / "acts.h5"
    shutil.copy(reference, path)
    before = file_digest(path)
    with pytest.raises(ProvenanceMismatchError, match="overwrite"):
        make_cache(path, **CHANGES[change])
    assert file_digest(path) == before
    make_cache(path, overwrite=True, **CHANGES[change])
    assert file_digest(path) != before
    with open_cache(path) as cache:
        assert cache.complete


def test_mismatch_message_names_the_field_and_both_values(tmp_path, reference):
    path = tmp_path / "acts.h5"
    shutil.copy(reference, path)
    with pytest.raises(ProvenanceMismatchError) as err:
        make_cache(path, prov=provenance(data_spec={"seed": 6, "n": N, "batch_size": BATCH}))
    assert "provenance.data_spec.seed: file has 5, this run has 6" in str(err.value)


def test_a_foreign_file_is_never_overwritten_without_permission(tmp_path):
    path = tmp_path / "acts.h5"
    path.write_text("my precious notes")
    with pytest.raises(NotACacheError):
        make_cache(path)
    assert path.read_text() == "my precious notes"


def test_refuses_when_the_disk_lacks_room(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("infoprobe.hooks.writer.shutil.disk_usage", lambda _: usage(1, 1, 1000))
    with pytest.raises(InsufficientDiskError, match="MB free"):
        make_cache(tmp_path / "acts.h5")
    assert list(tmp_path.iterdir()) == []


def test_batch_fn_with_wrong_shape_is_named(tmp_path):
    def bad(index, size):
        x, y = batch_fn(index, size)
        return x[:, :-1], y

    with pytest.raises(BatchFunctionError, match="returned x of shape"):
        make_cache(tmp_path / "acts.h5", fn=lambda i, s: bad(i, s) if i else batch_fn(i, s))


# --- bad files ------------------------------------------------------------------------------
def test_reading_bad_files_says_exactly_what_is_wrong(tmp_path, reference):
    missing = tmp_path / "missing.h5"
    with pytest.raises(NotACacheError, match="no such file"):
        open_cache(missing)

    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(NotACacheError, match="not an HDF5 file"):
        open_cache(text)

    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["data"] = np.arange(3)
    with pytest.raises(NotACacheError, match="not an infoprobe activation cache"):
        open_cache(foreign)

    newer = tmp_path / "newer.h5"
    shutil.copy(reference, newer)
    with h5py.File(newer, "r+") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(NewerSchemaError, match="99"):
        open_cache(newer)

    truncated = tmp_path / "truncated.h5"
    data = reference.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedCacheError, match="truncated"):
        open_cache(truncated)

    short = tmp_path / "short.h5"
    shutil.copy(reference, short)
    with h5py.File(short, "r+") as f:
        f["acts/blocks.1.hook_resid_post"].resize(N - 1, axis=0)
    with pytest.raises(TruncatedCacheError, match=f"has {N - 1} samples"):
        open_cache(short)


# --- reading API ---------------------------------------------------------------------------
def test_transformer_lens_shorthand_and_negative_layers(reference):
    with open_cache(reference) as cache:
        full = cache.acts("blocks.0.hook_resid_post")[:]
        np.testing.assert_array_equal(cache["resid_post", 0][:], full)
        np.testing.assert_array_equal(cache["resid_post", -2][:], full)
        np.testing.assert_array_equal(
            cache["pattern", -1][:], cache.acts("blocks.1.attn.hook_pattern")[:]
        )
        np.testing.assert_array_equal(cache["blocks.0.hook_resid_post"][:], full)
        assert ("resid_post", 1) in cache and ("mlp_out", 0) not in cache
        with pytest.raises(UnknownSiteError, match="holds"):
            cache["mlp_out", 0]


def test_iter_blocks_reassembles_every_dataset(reference):
    with open_cache(reference) as cache:
        names = layer_sites(2)
        blocks = list(cache.iter_blocks(names, block_size=5, start=3))
        assert [len(b["x"]) for b in blocks] == [5, 5, 5, 4]
        for key, ds in [("x", cache.x), ("y", cache.y), *((n, cache.acts(n)) for n in names)]:
            np.testing.assert_array_equal(np.concatenate([b[key] for b in blocks]), ds[3:])
        only = next(cache.iter_blocks(["blocks.0.hook_resid_pre"], include_inputs=False))
        assert (
            list(only) == ["blocks.0.hook_resid_pre"] and len(only["blocks.0.hook_resid_pre"]) == N
        )


def test_to_activation_cache_slices_samples(reference):
    model = make_model()
    with open_cache(reference) as cache:
        act = cache.to_activation_cache(model, slice(4, 9))
        assert isinstance(act, ActivationCache)
        np.testing.assert_array_equal(
            act["resid_post", -1].numpy(), cache.acts("blocks.1.hook_resid_post")[4:9]
        )
        # blocks.1.hook_resid_pre is served from blocks.0.hook_resid_post, not stored twice
        assert set(act.keys()) == {*cache.hook_names, "blocks.1.hook_resid_pre"}


def test_to_activation_cache_serves_resid_pre_and_accumulated_resid(reference):
    model = make_model()
    with open_cache(reference) as cache:
        assert "blocks.1.hook_resid_pre" not in cache.hook_names
        act = cache.to_activation_cache(model)
        assert act["resid_pre", 1] is act["resid_post", 0]
        np.testing.assert_array_equal(
            act["resid_pre", 1].numpy(), cache.acts("blocks.0.hook_resid_post")[:]
        )
        stack, labels = act.accumulated_resid(return_labels=True)
        assert labels == ["0_pre", "1_pre", "final_post"] and stack.shape == (3, N, 6, 12)
        np.testing.assert_array_equal(stack[2].numpy(), cache["resid_post", -1][:])


@pytest.mark.parametrize("layer", [-5, -3, 2])
def test_out_of_range_layers_name_the_blocks_that_exist(reference, layer):
    model = make_model()
    with open_cache(reference) as cache:
        with pytest.raises(UnknownSiteError, match=r"blocks 0\.\.1") as info:
            cache["resid_post", layer]
        assert str(reference) in str(info.value) and str(layer) in str(info.value)
        assert ("resid_post", layer) not in cache
        with pytest.raises(UnknownSiteError, match=r"blocks 0\.\.1"):
            cache.to_activation_cache(model, slice(0, 2))["resid_post", layer]


def test_metadata_round_trips(reference):
    with open_cache(reference) as cache:
        assert cache.provenance == provenance()
        assert cache.spec == provenance()["data_spec"]
        assert cache.model_config == CFG
        assert cache.checkpoint_sha256 == "ab" * 32
        assert cache.n_blocks == 2
        assert "complete" in repr(cache)


# --- corrupt metadata: a ValueError of infoprobe naming the file and the attribute ------
@pytest.mark.parametrize(
    "attr, value, words",
    [
        ("provenance_json", "{not json", ["provenance_json", "expected valid JSON"]),
        ("model_config_json", "[1, 2", ["model_config_json", "expected valid JSON"]),
        ("data_spec_json", "[1, 2]", ["data_spec_json", "JSON object"]),
        ("n_committed", 1_000_000, ["n_committed", "1000000", f"0..{N}"]),
        ("n_committed", -1, ["n_committed", "-1"]),
        ("n", "22", ["'n'", "'22'", "integer"]),
        ("batch_size", 0, ["batch_size", "0"]),
        ("n_blocks", 7, ["n_blocks", "7", "model_config_json"]),
        ("dtype", "int8", ["dtype", "int8", "float16"]),
        ("hook_names", 5, ["hook_names", "5"]),
    ],
)
def test_corrupt_header_names_the_file_and_the_attribute(tmp_path, reference, attr, value, words):
    bad = tmp_path / "bad.h5"
    shutil.copy(reference, bad)
    with h5py.File(bad, "r+") as f:
        f.attrs[attr] = value
    for opener in (open_cache, read_header):
        with pytest.raises(TruncatedCacheError) as info:
            opener(bad, allow_incomplete=True)
        message = str(info.value)
        assert isinstance(info.value, ValueError) and str(bad) in message
        for word in words:
            assert word in message, (word, message)


def test_cache_info_refuses_more_committed_than_planned(tmp_path, reference, capsys):
    from infoprobe.cli import main

    bad = tmp_path / "bad.h5"
    shutil.copy(reference, bad)
    with h5py.File(bad, "r+") as f:
        f.attrs["n_committed"] = 1_000_000
    assert main(["cache", "info", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert "1000000 of" not in out and "n_committed" in err and str(bad) in err


def test_a_batch_queued_without_a_wakeup_is_still_committed_and_close_returns():
    """A signal can interrupt ``Queue.put`` between storing a batch and waking the writer
    thread. The writer must still commit that batch, and closing must not block (it hung
    once on SIGTERM: the main thread joining a writer asleep beside a full queue)."""
    import threading
    import time

    from infoprobe.hooks.writer import _BackgroundCommits

    written = []

    class Committer:
        def write(self, start, arrays):
            written.append(start)

    commits = _BackgroundCommits(Committer(), lambda size: None, depth=1)
    commits.submit(0, {"x": np.zeros(2)})
    deadline = time.monotonic() + 10
    while written != [0] and time.monotonic() < deadline:  # the writer now waits for more
        time.sleep(0.01)
    time.sleep(0.2)
    commits.queue.queue.append((2, {"x": np.zeros(2)}))  # stored, no wake-up sent
    closer = threading.Thread(target=commits.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive(), "close() blocked"
    assert written == [0, 2]
