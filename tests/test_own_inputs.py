"""Your own model on your own data: a checkpoint saved with no task, inputs from a file.

The model is tests/foreign_models.py's hand-set one-head Transformer, returning one
number per sample (y [n]), whose information sets are known exactly; its checkpoint
records no task, and every command takes its inputs from a file.
"""

from __future__ import annotations

import hashlib
import html
import json
import os

import h5py
import numpy as np
import pytest
import torch
from foreign_models import SITES, handset_flat, handset_kwargs, handset_sets
from test_bad_input import one_line_refusal, snapshot
from test_own_model import own_states

from infoprobe import load_checkpoint, save_checkpoint
from infoprobe.cli import main
from infoprobe.foreign import ForeignConfig, HookedAdapter
from infoprobe.hooks import open_cache
from infoprobe.influence import read_influence

T, D = 8, 4
CONFIG = ForeignConfig(factory="foreign_models:build_flat", kwargs=handset_kwargs(D),
                       sites=SITES, heads=(1,), d_model=2 * D + 1, n_ctx=T, d_in=D)  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The checkpoint (no task) and inputs x [600, T, d] as .npy, .h5 and .safetensors."""
    root = tmp_path_factory.mktemp("own-inputs")
    ckpt = save_checkpoint(root / "ckpt", handset_flat(D), None, config=CONFIG)
    x = np.random.default_rng(3).standard_normal((600, T, D)).astype(np.float32)
    np.save(root / "x.npy", x)
    with h5py.File(root / "x.h5", "w") as f:
        f["x"] = x
    from safetensors.numpy import save_file

    save_file({"x": x}, str(root / "x.safetensors"))
    np.save(root / "y.npy", x.sum(axis=(1, 2)))
    return root, ckpt, x


def test_a_checkpoint_with_no_task_and_a_flat_output(files):
    _, ckpt, x = files
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    assert "task" not in meta and meta["model_config"]["d_out"] == 1
    ck = load_checkpoint(ckpt, trust_code=True, allow_no_task=True)
    assert ck.task is None and isinstance(ck.model, HookedAdapter)
    xs = torch.as_tensor(x[:5])
    y = ck.model(xs)  # y [b] of the model given as [b, 1]
    assert y.shape == (5, 1)
    torch.testing.assert_close(y[:, 0], ck.model.wrapped(xs))


@pytest.mark.parametrize("name", ["x.npy", "x.h5", "x.safetensors"])
def test_cache_takes_inputs_from_a_file_and_influence_follows(files, tmp_path, name):
    root, ckpt, x = files
    acts, flow = tmp_path / "acts.h5", tmp_path / "flow.h5"
    argv = ["cache", str(ckpt), "--inputs", str(root / name), "--out", str(acts), "--quiet",
            "--trust-code", "--cache-batch", "128"]  # fmt: skip
    if name == "x.npy":
        argv += ["--targets", str(root / "y.npy")]
    assert main(argv) == 0
    with open_cache(acts) as cache:
        np.testing.assert_array_equal(cache.x[:], x)
        spec = cache.spec
        got = cache.acts("blocks.0.hook_resid_post")[:]
        y = cache.y[:]
    digest = hashlib.sha256((root / name).read_bytes()).hexdigest()
    assert spec["inputs"]["sha256"] == digest and spec["task"] is None and spec["n"] == 600
    if name == "x.npy":
        np.testing.assert_allclose(y[:, 0], x.sum(axis=(1, 2)), rtol=1e-6)
    else:
        assert spec["targets"] is None and np.isnan(y).all()
    states, _ = own_states(handset_flat(D), torch.as_tensor(x))
    np.testing.assert_allclose(got, states[1].detach().numpy(), rtol=1e-5, atol=1e-5)
    argv = ["influence", str(ckpt), "--cache", str(acts), "--out", str(flow), "--quiet",
            "--trust-code"]  # fmt: skip
    assert main(argv) == 0
    inf = read_influence(flow)
    true, tie = handset_sets(x[inf.sample_index])
    observed = np.moveaxis(inf.sets(), 0, 1)[..., :T]
    assert tie.mean() < 0.2
    assert (observed[:, 1][~tie] == true[:, 1][~tie]).all()
    # the same command again: the cache is complete and matches, nothing to do
    cache_argv = ["cache", str(ckpt), "--inputs", str(root / name), "--out", str(acts),
                  "--quiet", "--trust-code", "--cache-batch", "128"]  # fmt: skip
    extra = ["--targets", str(root / "y.npy")] if name == "x.npy" else []
    assert main([*cache_argv, *extra]) == 0


def write(path, array):
    np.save(path, array)
    return path


BAD = [
    (lambda x: x[0], ["shape [8, 4]", "expected [n, T=8, d=4]"]),
    (lambda x: x[:, :5], ["shape [600, 5, 4]", "T=8"]),
    (lambda x: x[..., :3], ["shape [600, 8, 3]", "d=4"]),
    (lambda x: (x * 10).astype(np.int64), ["dtype int64", "floating point"]),
    (lambda x: np.where(np.arange(600)[:, None, None] == 7, np.nan, x), ["nan", "[7, 0, 0]"]),
]


@pytest.mark.parametrize("make, words", BAD)
def test_a_bad_inputs_file_is_one_line_and_writes_nothing(
    monkeypatch, capsys, tmp_path, files, make, words
):
    _, ckpt, x = files
    bad = write(tmp_path / "bad.npy", make(x))
    argv = [str(ckpt), "--inputs", str(bad), "--out", str(tmp_path / "acts.h5"), "--trust-code"]
    before = snapshot(tmp_path)
    one_line_refusal(monkeypatch, capsys, "cache", argv, [str(bad), *words])
    assert snapshot(tmp_path) == before


def test_other_bad_inputs_are_one_line(monkeypatch, capsys, tmp_path, files):
    root, ckpt, _ = files
    out = ["--out", str(tmp_path / "acts.h5"), "--trust-code"]
    objects = np.empty(3, dtype=object)
    np.save(tmp_path / "pickled.npy", objects, allow_pickle=True)
    with open(tmp_path / "huge.npy", "wb") as f:  # a header claiming 10^12 rows
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 8, 4)}
        )
        f.write(bytes(64))
    os.mkfifo(tmp_path / "fifo.npy")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    cases = [
        ([str(ckpt), "--inputs", str(tmp_path / "huge.npy"), *out], ["huge.npy", "not a readable"]),
        ([str(ckpt), "--inputs", str(tmp_path / "fifo.npy"), *out], ["not a regular file"]),
        ([str(ckpt), "--inputs", str(tmp_path / "bad.safetensors"), *out], ["not a readable"]),
        ([str(ckpt), *out], ["does not say which task", "--inputs"]),
        ([str(ckpt), "--inputs", str(tmp_path / "none.npy"), *out], ["no such file"]),
        ([str(ckpt), "--inputs", str(tmp_path / "pickled.npy"), *out], ["not a readable"]),
        (
            [str(ckpt), "--inputs", str(root / "x.h5"), "--targets", str(root / "x.npy"), *out],
            ["targets y have shape [600, 8, 4]", "[n=600]"],
        ),
        ([str(ckpt), "--targets", str(root / "y.npy"), *out], ["--targets needs --inputs"]),
        (
            [str(ckpt), "--inputs", str(root / "x.npy"), "--out", str(tmp_path / "a.h5")],
            ["--trust-code"],
        ),
    ]
    for argv, words in cases:
        one_line_refusal(monkeypatch, capsys, "cache", argv, words)
    assert not (tmp_path / "acts.h5").exists() and not (tmp_path / "a.h5").exists()


def test_inputs_whose_data_lie_in_other_files_are_refused(monkeypatch, capsys, tmp_path, files):
    """An HDF5 'x' that is an external link, a soft link or a virtual dataset: its data lie
    elsewhere (missing, or changing without the inputs' hash seeing it), so it is refused
    in one line before anything is written."""
    _, ckpt, x = files
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as f:
        f["x"] = x
    linked, soft, virtual = (tmp_path / n for n in ("linked.h5", "soft.h5", "virtual.h5"))
    with h5py.File(linked, "w") as f:
        f["x"] = h5py.ExternalLink(str(source), "x")
    with h5py.File(soft, "w") as f:
        f["data"] = x
        f["x"] = h5py.SoftLink("/data")
    layout = h5py.VirtualLayout(shape=x.shape, dtype=x.dtype)
    layout[:] = h5py.VirtualSource(str(tmp_path / "gone.h5"), "x", shape=x.shape)
    with h5py.File(virtual, "w") as f:
        f.create_virtual_dataset("x", layout, fillvalue=0.0)
    out = tmp_path / "acts.h5"
    for path, words in ((linked, ["is a link", "ExternalLink"]), (soft, ["is a link"]),
                        (virtual, ["virtual dataset"])):  # fmt: skip
        argv = [str(ckpt), "--inputs", str(path), "--out", str(out), "--trust-code"]
        one_line_refusal(monkeypatch, capsys, "cache", argv, [str(path), *words])
        assert not out.exists()


def test_predict_names_why_a_cache_of_file_inputs_has_no_predicted_sets(
    monkeypatch, capsys, tmp_path, files
):
    root, ckpt, _ = files
    acts = tmp_path / "acts.h5"
    argv = ["cache", str(ckpt), "--inputs", str(root / "x.npy"), "--out", str(acts),
            "--quiet", "--trust-code", "--n", "64"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    words = ["data spec field 'task' is null", "x.npy"]
    one_line_refusal(monkeypatch, capsys, "predict", ["--cache", str(acts), "--out",
                     str(tmp_path / "pred.h5")], words)  # fmt: skip


def test_a_cache_resumed_with_another_inputs_file_is_refused(monkeypatch, capsys, tmp_path, files):
    root, ckpt, x = files
    acts = tmp_path / "acts.h5"
    argv = ["cache", str(ckpt), "--inputs", str(root / "x.npy"), "--out", str(acts),
            "--quiet", "--trust-code", "--n", "64"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    other = write(tmp_path / "other.npy", x[::-1].copy())
    before = snapshot(tmp_path)
    argv = [str(ckpt), "--inputs", str(other), "--out", str(acts), "--trust-code", "--n", "64"]
    one_line_refusal(monkeypatch, capsys, "cache", argv, ["data_spec"])
    assert snapshot(tmp_path) == before


def test_the_flow_summary_gives_medians_beside_means():
    """A few near-tie samples (a huge g) carry the mean alone; the median is the typical
    sample's value, computed here by hand."""
    from infoprobe.influence.summary import layer_summary

    rng = np.random.default_rng(0)
    n, T = 50, 4
    scores = rng.uniform(0.0, 1.0, (2, n, T + 1, T))
    scores[1, :3] = 1e4  # three outlying samples
    rows = layer_summary(scores.mean(axis=1), scores)
    own = np.eye(T, dtype=bool)
    for layer, row in enumerate(rows):
        per = scores[layer]
        assert row["own_median"] == pytest.approx(np.median(per[:, :T][:, own]))
        assert row["others_median"] == pytest.approx(np.median(per[:, :T][:, ~own]))
        assert row["cls_median"] == pytest.approx(np.median(per[:, T]))
    assert rows[1]["others"] > 500 and rows[1]["others_median"] < 1


def test_your_sets_against_flow_from_the_shell(monkeypatch, capsys, files, tmp_path):
    """The whole path of a model with no task: cache --inputs, influence, sets (the model's
    known truth), compare; every step rc 0; flow's AUROC against the truth at the
    retrieving layer >= 0.98; report rc 0. Without --trust-code the first step is refused."""
    root, ckpt, x = files
    acts, flow, pred = tmp_path / "acts.h5", tmp_path / "flow.h5", tmp_path / "pred.h5"
    cache = ["cache", str(ckpt), "--inputs", str(root / "x.npy"), "--out", str(acts), "--quiet"]
    one_line_refusal(monkeypatch, capsys, "cache", cache[1:], ["--trust-code"])
    monkeypatch.undo()  # every command again
    assert main([*cache, "--trust-code"]) == 0
    argv = ["influence", str(ckpt), "--cache", str(acts), "--out", str(flow), "--quiet",
            "--trust-code"]  # fmt: skip
    assert main(argv) == 0
    true, _ = handset_sets(x)  # [n, 2, T+1, T]
    np.save(tmp_path / "truth.npy", np.moveaxis(true, 1, 0))  # [L+1, n, T+1, T]
    assert main(["sets", str(tmp_path / "truth.npy"), "--cache", str(acts), "--out",
                 str(pred)]) == 0  # fmt: skip
    out = tmp_path / "comparison.json"
    capsys.readouterr()
    assert main(["compare", str(pred), "--influence", str(flow), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    # the sets are the user's: so says the console and the file's key, never "infoflow"
    assert document["predictor"] == "your_sets" and "your sets vs flow:" in printed
    assert "infoflow" not in printed.lower() and "infoflow" not in document["comparisons"]["flow"]
    comparison = document["comparisons"]["flow"]["your_sets"]
    auroc = comparison["per_sample"]["others"]["auroc_per_layer"]
    assert auroc[1] >= 0.98, (auroc, printed)
    assert "AUROC" in printed
    # the probes read such a cache too, and compare sets them beside flow
    control, probes = tmp_path / "control.h5", tmp_path / "probes.h5"
    assert main([*cache, "--trust-code", "--random-init", "1", "--out", str(control)]) == 0
    assert main(["probe", str(acts), "--control", str(control), "--out", str(probes)]) == 0
    capsys.readouterr()
    assert main(["compare", str(pred), str(probes), "--influence", str(flow)]) == 0
    assert "decodability (linear probe) AUROC" in capsys.readouterr().out
    # the report takes the task-less sets; its heads are named from attention alone
    rep = tmp_path / "rep"
    assert main(["report", str(pred), str(probes), "--influence", str(flow), "--cache",
                 str(acts), "--out", str(rep)]) == 0  # fmt: skip
    summary = json.loads((rep / "summary.json").read_text())
    assert "truth.npy" in summary["notes"]["sets compared with"]
    assert summary["notes"]["task"] == "none: inputs from a file"
    heads = summary["heads"]
    assert heads["predicted"] is False
    (head,) = heads["heads"]  # one retrieval head: data and CLS queries read by content
    assert head["data"]["mode"] == head["cls"]["mode"] == "content-dependent retrieval"
    assert head["data"]["reads"].startswith("retrieves by content")
    assert head["data"]["operation"] == "no predicted program"
    page = html.unescape((rep / "report.html").read_text())
    assert "not InfoFlow's" in page and "reads (from attention alone)" in page
    # every figure's title and caption names your sets, none InfoFlow's
    words = json.dumps(summary["figures"])
    assert summary["figures"] and "InfoFlow" not in words and "your sets" in words
    assert summary["answer"]["predictor"] == "your_sets"
    # other samples are refused: the sets file names the cache's inputs file
    other = tmp_path / "other.npy"
    np.save(other, x[::-1].copy())
    acts2, flow2 = tmp_path / "acts2.h5", tmp_path / "flow2.h5"
    assert main(["cache", str(ckpt), "--inputs", str(other), "--out", str(acts2), "--quiet",
                 "--trust-code"]) == 0  # fmt: skip
    assert main(["influence", str(ckpt), "--cache", str(acts2), "--out", str(flow2),
                 "--quiet", "--trust-code"]) == 0  # fmt: skip
    capsys.readouterr()
    one_line_refusal(monkeypatch, capsys, "compare", [str(pred), "--influence", str(flow2)],
                     ["inputs_file"])  # fmt: skip


def test_sets_of_the_wrong_shape_are_one_line(monkeypatch, capsys, files, tmp_path):
    root, ckpt, _ = files
    acts = tmp_path / "acts.h5"
    assert main(["cache", str(ckpt), "--inputs", str(root / "x.npy"), "--out", str(acts),
                 "--quiet", "--trust-code", "--n", "64"]) == 0  # fmt: skip
    capsys.readouterr()
    np.save(tmp_path / "short.npy", np.zeros((2, 63, T + 1, T), dtype=bool))
    np.save(tmp_path / "floats.npy", np.full((2, 64, T + 1, T), 0.5))
    for name, words in (("short.npy", ["[2, 63, 9, 8]", "n=64"]),
                        ("floats.npy", ["float64", "expected bool"])):  # fmt: skip
        argv = [str(tmp_path / name), "--cache", str(acts), "--out", str(tmp_path / "p.h5")]
        one_line_refusal(monkeypatch, capsys, "sets", argv, words)
    assert not (tmp_path / "p.h5").exists()


def test_probe_checkpoint_takes_the_inputs_and_your_sets(monkeypatch, capsys, files, tmp_path):
    """probe-checkpoint --inputs --sets on a checkpoint with no task: every stage runs, the
    summary names the sets as the user's, and flow's AUROC against the model's truth at its
    retrieving layer is >= 0.98; without --sets, or --targets without --inputs, one line."""
    root, ckpt, x = files
    true, _ = handset_sets(x)
    np.save(tmp_path / "truth.npy", np.moveaxis(true, 1, 0))
    out = tmp_path / "run"
    base = [str(ckpt), "--inputs", str(root / "x.npy"), "--trust-code", "--out", str(out),
            "--quiet"]  # fmt: skip
    one_line_refusal(monkeypatch, capsys, "probe-checkpoint", base, ["no task", "--sets"])
    one_line_refusal(monkeypatch, capsys, "probe-checkpoint",
                     [str(ckpt), "--targets", str(root / "y.npy"), "--out", str(out)],
                     ["--targets needs --inputs"])  # fmt: skip
    monkeypatch.undo()
    assert not out.exists()
    capsys.readouterr()
    assert main(["probe-checkpoint", *base, "--sets", str(tmp_path / "truth.npy")]) == 0
    printed = capsys.readouterr().out
    assert "no task" in printed and "sets given by the user" in printed
    comparison = json.loads((out / "comparison.json").read_text())["comparisons"]["flow"]
    assert comparison["your_sets"]["per_sample"]["others"]["auroc_per_layer"][1] >= 0.98
    with h5py.File(out / "pred.h5") as f:  # the user's sets, over the file's rows
        np.testing.assert_array_equal(f["sets"][:, :, :, :T], np.moveaxis(true, 1, 0))
    run = json.loads((out / "run.json").read_text())
    assert (
        run["stages"]["cache"]["key"]["inputs"]
        == hashlib.sha256((root / "x.npy").read_bytes()).hexdigest()
    )


def test_file_inputs_on_a_task_checkpoint_without_sets_are_refused_before_any_output(
    monkeypatch, capsys, tmp_path
):
    """InfoFlow predicts sets from a task's samples; inputs from a file have none, so
    probe-checkpoint refuses at once, not at its predict stage after five outputs."""
    ckpt = tmp_path / "ck"
    argv = ["train", "--task", "intrinsic-dim", "--D", "2", "--T", "4", "--E", "8", "--steps",
            "5", "--quiet", "--threads", "1", "--out", str(ckpt)]  # fmt: skip
    assert main(argv) == 0
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((300, 4, 4), np.float32))
    before = snapshot(tmp_path)
    argv = [str(ckpt), "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "pc")]
    one_line_refusal(monkeypatch, capsys, "probe-checkpoint", argv, ["x.npy", "no task", "--sets"])
    assert snapshot(tmp_path) == before
