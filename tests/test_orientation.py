"""Mirrored comparisons: the other orientation of a pairwise chain, and choosing it from
attention. Expected keys come from plain loops over x(s)^T A x(t), never from the engine."""

import math

import h5py
import numpy as np
import pytest
import torch
from brute import first_argmax

from infoprobe.attention.orientation import choose_orientation
from infoprobe.checkpoint import save_checkpoint
from infoprobe.cli import main
from infoprobe.compare.sources import predicted_program
from infoprobe.infoflow import InfoFlowError, predict, read_sets, retrievals
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.pipeline.predicting import predict_for_cache
from infoprobe.tasks import TaskError, make_task

pytestmark = pytest.mark.usefixtures("one_thread")
T = 8


def pair_value(x, A, s, t) -> float:
    """x(s)^T A x(t) for one sample x [T, d]."""
    return float(sum(x[s, a] * A[a, b] * x[t, b] for a in range(len(A)) for b in range(len(A))))


def loop_keys(x, A, mirrored: bool):
    """Stage 1 partner of every token and the token CLS retrieves, by plain loops.

    declared: p(t) = argmax_s x(t)^T A x(s); mirrored: p(t) = argmax_s x(s)^T A x(t).
    CLS: argmax_t of the pair value of (t, p(t)) in the same orientation."""
    n = len(x)
    p = np.zeros((n, T), dtype=int)
    cls = np.zeros((n, 1), dtype=int)
    for i in range(n):

        def value(t, s, xi=x[i]):
            return pair_value(xi, A, s, t) if mirrored else pair_value(xi, A, t, s)

        for t in range(T):
            p[i, t] = first_argmax([value(t, s) for s in range(T)])
        cls[i, 0] = first_argmax([value(t, p[i, t]) for t in range(T)])
    return p, cls


@pytest.fixture(scope="module")
def case():
    task = make_task("intrinsic-dim", D=2, T=T, d=4)
    x, y = task.sample(60, np.random.default_rng(3))
    return task, x, y


@pytest.mark.parametrize("orientation", [("declared", "mirrored"), ("mirrored", "mirrored")])
def test_each_orientation_retrieves_its_brute_force_keys(case, orientation):
    task, x, _ = case
    program = predict(task, (2, 2), d_model=16, orientation=orientation).program
    found = {(r.comparison, r.stage): r.chosen for r in retrievals(program, x)}
    for i, o in enumerate(orientation):
        p, cls = loop_keys(x, task.matrices[i], mirrored=o == "mirrored")
        np.testing.assert_array_equal(found[i, 0], p)
        np.testing.assert_array_equal(found[i, 1], cls)


def test_both_orientations_reach_the_same_maximum(case):
    """The pair CLS ends on has the task's maximum in either orientation: summed over the
    comparisons it is the target F(X)."""
    task, x, y = case
    for orientation in (None, ("mirrored", "mirrored")):
        program = predict(task, (2, 2), d_model=16, orientation=orientation).program
        found = {(r.comparison, r.stage): r.chosen for r in retrievals(program, x)}
        total = np.zeros(len(x))
        for c in range(2):
            A = task.matrices[c]
            for i in range(len(x)):
                t = found[c, 1][i, 0]
                s = found[c, 0][i, t]
                pair = (s, t) if orientation else (t, s)
                total[i] += pair_value(x[i], A, *pair)
        np.testing.assert_allclose(total, y[:, 0], rtol=1e-5, atol=1e-5)


def test_orientation_changes_sets_but_not_cost_or_verdict(case):
    task, x, _ = case
    a = predict(task, (2, 2), d_model=16)
    b = predict(task, (2, 2), d_model=16, orientation=("mirrored", "mirrored"))
    assert a.exponent == b.exponent and a.verdict == b.verdict and a.min_heads == b.min_heads
    assert a.orientation == ("declared", "declared")
    assert b.to_dict()["orientation"] == {"pair-max[A_1]": "mirrored", "pair-max[A_2]": "mirrored"}
    sa, sb = a.sets(x), b.sets(x)
    np.testing.assert_array_equal(sa[0], sb[0])
    assert (sa[1] != sb[1]).any()


def test_bad_orientations_are_refused_by_name():
    task = make_task("intrinsic-dim", D=2, T=T, d=4)
    with pytest.raises(InfoFlowError, match="one entry per comparison"):
        predict(task, (2, 2), d_model=16, orientation=("mirrored",))
    with pytest.raises(InfoFlowError, match=r"pair-max\[A_2\].*'sideways'"):
        predict(task, (2, 2), d_model=16, orientation=("declared", "sideways"))
    # <x(t), x(s)> is symmetric: pairwise-min declares no mirror
    pmin = make_task("pairwise-min", T=T)
    assert pmin.structure().mirrorable == (False,)
    with pytest.raises(InfoFlowError, match="has no mirror"):
        predict(pmin, (2, 2), d_model=16, orientation=("mirrored",))


def test_a_mirror_must_keep_the_comparison_shape():
    comparison = make_task("intrinsic-dim", D=1, T=T, d=4).structure().comparisons[0]
    import dataclasses

    with pytest.raises(TaskError, match="mirror must have the same label"):
        dataclasses.replace(comparison, mirror=dataclasses.replace(comparison, label="other"))


def one_hot_patterns(keys_by_head, n, h=2):
    """Block-0 patterns [n, h, T+1, T+1]: head j's data rows one-hot on keys_by_head[j]
    [n, T] (None: uniform), CLS row uniform."""
    pattern = np.full((n, h, T + 1, T + 1), 1.0 / (T + 1))
    for j, keys in enumerate(keys_by_head):
        if keys is not None:
            pattern[:, j, :T] = np.eye(T + 1)[keys]
    return pattern


def test_choice_follows_the_heads_argmax(case):
    """Head 0 looks at the mirrored partner of A_1, head 1 at the declared partner of A_2:
    the rule picks mirrored for A_1 and declared for A_2, with agreement 1 for them."""
    task, x, _ = case
    arch = predict(task, (2, 2), d_model=16).arch
    p1_m, _ = loop_keys(x, task.matrices[0], mirrored=True)
    p2_d, _ = loop_keys(x, task.matrices[1], mirrored=False)
    patterns = [one_hot_patterns([p1_m, p2_d], len(x)), one_hot_patterns([None, None], len(x))]
    choices = choose_orientation(task, arch, x, patterns)
    assert [c.chosen for c in choices] == ["mirrored", "declared"]
    assert [c.block for c in choices] == [0, 0]
    assert choices[0].mirrored == 1.0 and choices[1].declared == 1.0
    p1_d, _ = loop_keys(x, task.matrices[0], mirrored=False)
    # the declared score of A_1 is its best head's share of argmax hits on the declared keys
    expected = max((p1_m == p1_d).mean(), (p2_d == p1_d).mean())
    assert math.isclose(choices[0].declared, expected)
    # a tie (one head follows each orientation of A_2 exactly) keeps the declared chain
    p2_m, _ = loop_keys(x, task.matrices[1], mirrored=True)
    both = [one_hot_patterns([p2_d, p2_m], len(x)), patterns[1]]
    tied = choose_orientation(task, arch, x, both)[1]
    assert tied.declared == tied.mirrored == 1.0 and tied.chosen == "declared"


def test_choice_is_declared_without_a_retrieval_or_a_mirror(case):
    task, x, _ = case
    arch = predict(task, (1, 1), d_model=16).arch  # too few heads: comparisons aggregated
    patterns = [one_hot_patterns([None], len(x), h=1)] * 2
    program = predict(task, arch).program
    retrieved = {r.comparison for r in retrievals(program, x) if r.stage == 0}
    for i, c in enumerate(choose_orientation(task, arch, x, patterns)):
        assert (c.block is None) == (i not in retrieved)
    pmin = make_task("pairwise-min", T=T)
    xm, _ = pmin.sample(20, np.random.default_rng(0))
    (c,) = choose_orientation(pmin, predict(pmin, (2, 2), d_model=16).arch, xm,
                              [one_hot_patterns([None, None], 20)] * 2)  # fmt: skip
    assert c.chosen == "declared" and c.block is None


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("orientation")
    task = make_task("intrinsic-dim", D=2, T=T, d=4)
    cfg = ModelConfig(d_in=task.d, n_ctx=T, d_model=16, heads=(2, 2), d_mlp=16,
                      d_readout=8, d_out=task.d_out)  # fmt: skip
    save_checkpoint(root / "ckpt", InfoFlowTransformer(cfg, seed=1), task)
    cache_checkpoint(root / "ckpt", root / "acts.h5", n=40, batch_size=20, progress=False)
    cache_checkpoint(root / "ckpt", root / "resid.h5", n=40, batch_size=20, progress=False,
                     sites="residual")  # fmt: skip
    return root, task


def read_inputs(path):
    with h5py.File(path, "r") as f:
        x = f["inputs/x"][:]
        patterns = [f[f"acts/blocks.{b}.attn.hook_pattern"][:] for b in range(2)]
    return x, patterns


def test_predict_for_cache_records_and_applies_the_choice(cached, tmp_path):
    root, task = cached
    out = predict_for_cache(root / "acts.h5", tmp_path / "pred.h5")
    sets = read_sets(out)
    x, patterns = read_inputs(root / "acts.h5")
    arch = predict(task, (2, 2), d_model=16).arch
    expected = choose_orientation(task, arch, x, patterns)
    assert sets.provenance["orientation"] == [c.to_dict() for c in expected]
    chosen = [c.chosen for c in expected]
    np.testing.assert_array_equal(
        sets.sets, predict(task, arch, orientation=chosen).sets(x.astype(np.float64))
    )
    # the comparison re-derives the recorded program
    assert predicted_program(sets) == predict(task, arch, orientation=chosen).program


def test_predict_cli_orientation_options(cached, tmp_path, capsys):
    root, task = cached
    out = tmp_path / "m.h5"
    assert main(["predict", "--cache", str(root / "acts.h5"), "--out", str(out),
                 "--orientation", "mirrored,declared"]) == 0  # fmt: skip
    x, _ = read_inputs(root / "acts.h5")
    arch = predict(task, (2, 2), d_model=16).arch
    expected = predict(task, arch, orientation=("mirrored", "declared")).sets(x)
    np.testing.assert_array_equal(read_sets(out).sets, expected)
    assert "orientation: given: mirrored, declared" in capsys.readouterr().out
    # no attention patterns in the cache: auto falls back to declared and says so
    out2 = tmp_path / "r.h5"
    assert main(["predict", "--cache", str(root / "resid.h5"), "--out", str(out2)]) == 0
    assert "no attention patterns" in capsys.readouterr().out
    np.testing.assert_array_equal(read_sets(out2).sets, predict(task, arch).sets(x))
    bad = str(tmp_path / "b.h5")
    with pytest.raises(SystemExit) as refused:  # refused as the line is parsed
        main(["predict", "--cache", str(root / "acts.h5"), "--out", bad,
              "--orientation", "sideways"])  # fmt: skip
    assert refused.value.code == 2
    assert "--orientation: expected auto" in capsys.readouterr().err
    assert not (tmp_path / "b.h5").exists()
    assert main(["predict", "--task", "intrinsic-dim", "--D", "2", "--T", "8", "--heads", "2,2",
                 "--orientation", "auto"]) == 2  # fmt: skip
    assert "needs --cache" in capsys.readouterr().err
