"""The InfoFlow engine reproduces the theory's claims (the paper's claims 1-6, docs/infoflow.md)."""

import math

import numpy as np
import pytest

from infoprobe.infoflow import EFFICIENT, INEFFICIENT, predict
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task

E = 60  # divisible by 1..6 heads


def exponents_over_T(name, heads, Ts, **kw):
    arch = kw.pop("arch", {})
    return [predict(make_task(name, T=T, **kw), heads, d_model=E, **arch).exponent(T) for T in Ts]


# ---- claim 1: depth separation -------------------------------------------------------
def test_pairwise_min_one_layer_exponent_grows_linearly_in_T():
    Ts = [16, 128, 256, 512, 1024]
    alphas = exponents_over_T("pairwise-min", (1,), Ts)
    steps = np.diff(alphas) / np.diff(Ts)
    assert alphas[-1] > alphas[0] and np.all(steps[1:] > 0)
    np.testing.assert_allclose(steps[1:], steps[-1])  # linear once past the constant floor
    p = predict(make_task("pairwise-min", T=64), (1,), d_model=E)
    assert p.verdict == INEFFICIENT and p.exponent.grows and p.min_heads is None


def test_pairwise_min_two_layers_one_head_each_is_constant():
    alphas = exponents_over_T("pairwise-min", (1, 1), [8, 64, 512])
    assert alphas == [alphas[0]] * 3 == [1.0] * 3
    p = predict(make_task("pairwise-min", T=64), (1, 1), d_model=E)
    assert p.verdict == EFFICIENT and p.min_heads == (1, 1)
    # layer 1: local minimisation by data tokens; layer 2: the global one by CLS
    (l1,), (l2,) = p.program.layers
    assert l1.data is not None and l1.cls is None and l2.cls is not None and l2.data is None


# ---- claim 2: intrinsic dimension ----------------------------------------------------
@pytest.mark.parametrize("D", [2, 3, 4, 5, 6])
def test_intrinsic_dim_needs_D_heads_in_both_layers(D):
    task = make_task("intrinsic-dim", D=D, T=64)
    assert predict(task, (D, D), d_model=E).verdict == EFFICIENT
    assert predict(task, (D - 1, D), d_model=E, search_min_heads=False).verdict == INEFFICIENT
    assert predict(task, (D, D - 1), d_model=E, search_min_heads=False).verdict == INEFFICIENT
    assert predict(task, (D - 1, D - 1), d_model=E).min_heads == (D, D)


def test_intrinsic_dim_accepts_a_model_config():
    cfg = ModelConfig(d_in=4, n_ctx=64, d_model=48, heads=(3, 3))
    p = predict(make_task("intrinsic-dim", D=3, T=64), cfg)
    assert p.verdict == EFFICIENT and p.arch.heads == (3, 3) and p.arch.d_heads == (16, 16)


# ---- claim 3: triangle ---------------------------------------------------------------
@pytest.mark.parametrize(("heads", "width"), [((2, 2), 24), ((4, 4), 24), ((4, 4), 48)])
def test_triangle_inefficient_for_every_fixed_architecture(heads, width):
    alphas = []
    for T in (8, 16, 32, 64, 128):
        p = predict(make_task("triangle", T=T), heads, d_model=width, search_min_heads=False)
        assert p.verdict == INEFFICIENT and p.comparison_order == 3
        assert p.comparison_number == math.comb(T, 3)
        alphas.append(p.exponent_at_T)
    assert alphas[-1] > alphas[-2] > alphas[-3]
    assert predict(make_task("triangle", T=16), heads, d_model=width).min_heads is None


def test_triangle_comparison_number_is_cubic():
    numbers = [predict(make_task("triangle", T=T), (2, 2), d_model=24).comparison_number
               for T in (100, 200)]  # fmt: skip
    assert 7.5 < numbers[1] / numbers[0] < 8.2


# ---- claim 4: position-specific aggregation ------------------------------------------
def test_fixed_positions_one_head_with_positional_encoding_is_efficient():
    task = make_task("fixed-positions", T=10, d=2)
    p = predict(task, (1,), d_model=8, pos_encoding="learned")
    assert p.verdict == EFFICIENT and p.min_heads == (1,)
    assert p.program.layers[0][0].cls.positions == (0, 1, 2)
    sizes = exponents_over_T(
        "fixed-positions", (1,), [10, 100, 1000], arch={"pos_encoding": "learned"}
    )
    assert sizes[0] == sizes[1] == sizes[2]


def test_fixed_positions_without_positional_encoding_is_inefficient_for_large_T():
    alphas = [predict(make_task("fixed-positions", T=T), (1,), d_model=8).exponent(T)
              for T in (10, 100, 1000)]  # fmt: skip
    assert alphas[0] < alphas[1] < alphas[2]
    p = predict(make_task("fixed-positions", T=100), (1,), d_model=8)
    assert p.verdict == INEFFICIENT and "no positional encoding" in p.explanation


# ---- claim 5: d-retrieval head count -------------------------------------------------
@pytest.mark.parametrize("D", [1, 2, 3, 4, 5])
def test_d_retrieval_single_layer_efficient_iff_h_at_least_D(D):
    task = make_task("d-retrieval", D=D, T=16)
    for h in range(1, 7):
        verdict = predict(task, (h,), d_model=E, search_min_heads=False).verdict
        assert (verdict == EFFICIENT) == (h >= D), (D, h)


@pytest.mark.parametrize(("heads", "D"), [((2, 2), 4), ((1, 3), 4), ((2, 2), 5), ((3, 2), 5)])
def test_d_retrieval_two_layers_need_total_heads_at_least_D(heads, D):
    verdict = predict(make_task("d-retrieval", D=D, T=16), heads, d_model=E).verdict
    assert (verdict == EFFICIENT) == (sum(heads) >= D)


def test_kth_largest_laws():
    task = make_task("kth-largest", T=32, k=3)
    assert predict(make_task("kth-largest", T=32, k=1), (1,), d_model=E).verdict == EFFICIENT
    tail = predict(task, (1,), d_model=E)
    assert tail.verdict == INEFFICIENT and "k-th retrieval" in tail.exponent.dominant(32)
    n = E  # one head: n = E
    assert tail.exponent(32) == pytest.approx((32 - 3 - 1) / (n + 1))
    rank = predict(task, (1,), d_model=E, kth_law="rank")
    assert rank.verdict == EFFICIENT and rank.exponent(32) == pytest.approx((3 - 1) / n)


def test_aggregate_decode_cost_is_the_coupled_set():
    task = make_task("aggregate-decode", T=16, T0=12, d=10)
    with_pe = predict(task, (1,), d_model=20, pos_encoding="learned")
    assert with_pe.verdict == EFFICIENT
    assert with_pe.exponent(16) == pytest.approx(12 * 10 / 20 - 1)  # T0 d / E - 1
    without = predict(task, (1,), d_model=20)
    assert without.verdict == INEFFICIENT
    assert without.exponent(16) == pytest.approx(16 * 10 / 20 - 1)  # couples all T


# ---- claim 6: predicted sets on real samples -----------------------------------------
def brute_force_intrinsic_dim_sets(task, x):
    """Independent per-sample computation of the (D, D) program's sets, Python loops."""
    n, T, D = x.shape[0], task.T, task.D
    out = np.zeros((3, n, T + 1, T + 1), dtype=bool)
    for i in range(n):
        layer0 = [{t} for t in range(T + 1)]
        partner = [[0] * T for _ in range(D)]
        layer1 = [set(s) for s in layer0]
        for c, a in enumerate(task.matrices):
            for t in range(T):
                vals = [
                    -np.inf if task.distinct and s == t else float(x[i, t] @ a @ x[i, s])
                    for s in range(T)
                ]
                partner[c][t] = vals.index(max(vals))
                layer1[t] |= layer0[partner[c][t]]
        layer2 = [set(s) for s in layer1]
        for c, a in enumerate(task.matrices):
            pair_values = [float(x[i, t] @ a @ x[i, partner[c][t]]) for t in range(T)]
            best = pair_values.index(max(pair_values))
            layer2[T] |= layer1[best]
        for layer, sets in enumerate((layer0, layer1, layer2)):
            for t, members in enumerate(sets):
                out[layer, i, t, sorted(members)] = True
    return out


@pytest.mark.parametrize("distinct", [False, True])
def test_intrinsic_dim_sets_match_brute_force(distinct):
    task = make_task("intrinsic-dim", D=2, T=8, seed=3, distinct=distinct)
    p = predict(task, (2, 2))
    x, _ = task.sample(40, np.random.default_rng(0))
    got = p.sets(x)
    assert got.shape == (3, 40, 9, 9) and got.dtype == bool
    np.testing.assert_array_equal(got, brute_force_intrinsic_dim_sets(task, x.astype(np.float64)))
    assert np.all(got[:-1] <= got[1:])  # sets only grow with l
    assert got[:, :, np.arange(9), np.arange(9)].all()  # every set contains its own token
    assert (got[2, :, 8].sum(axis=1) > 2).any()  # CLS really gathered partners
    if distinct:  # every data token gained a partner other than itself
        assert (got[1, :, :8, :8].sum(axis=-1) >= 2).all()
