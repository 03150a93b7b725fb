"""The observed program: engine retrievals, per-head statistics, modes, head matching.

Expected values come from brute-force loops or from known answers (a one-hot, a uniform
and a fixed-position head), never from the code under test.
"""

import json
import math
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from infoprobe.attention.program import NO_OPERATION, observed_program
from infoprobe.attention.statistics import (
    DIFFUSE,
    GLOBAL,
    POSITIONAL,
    RETRIEVAL,
    HeadsError,
    argmax_agreement,
    classify,
    head_statistics,
)
from infoprobe.infoflow import (
    AggregateAll,
    AggregatePositions,
    Head,
    Program,
    Retrieve,
    execute,
    predict,
    retrievals,
    slot_operations,
)
from infoprobe.tasks import Comparison, ComparisonStructure, Stage, make_task
from infoprobe.tasks.scores import bilinear_key_pair, bilinear_query_key, key_projection

sys.path.insert(0, str(Path(__file__).parent))

from brute import first_argmax

T = 8


# ---- brute force ---------------------------------------------------------------------
def brute_pair_keys(x: np.ndarray, A: np.ndarray, distinct: bool):
    """Stage 1: p[i, t] = argmax_s x(t)^T A x(s); stage 2: argmax_t x(t)^T A x(p(t))."""
    n, T_, _ = x.shape
    p = np.zeros((n, T_), dtype=int)
    cls = np.zeros((n, 1), dtype=int)
    for i in range(n):
        for t in range(T_):
            vals = [
                -math.inf if distinct and s == t else float(x[i, t] @ A @ x[i, s])
                for s in range(T_)
            ]
            p[i, t] = first_argmax(vals)
        cls[i, 0] = first_argmax([float(x[i, t] @ A @ x[i, p[i, t]]) for t in range(T_)])
    return p, cls


def one_hot_rows(keys: np.ndarray, tokens: int) -> np.ndarray:
    """[n, Q] key indices -> [n, Q, tokens] one-hot rows."""
    return np.eye(tokens)[keys]


def uniform(n: int, queries: int, tokens: int) -> np.ndarray:
    return np.full((n, queries, tokens), 1.0 / tokens)


def intrinsic_case(n: int = 300, seed: int = 0, distinct: bool = False):
    task = make_task("intrinsic-dim", D=2, T=T, d=4, distinct=distinct)
    program = predict(task, (2, 2), d_model=16).program
    x, _ = task.sample(n, np.random.default_rng(seed))
    return task, program, x


# ---- engine: retrievals ---------------------------------------------------------------
@pytest.mark.parametrize("distinct", [False, True])
def test_retrievals_equal_brute_force_argmax(distinct):
    task, program, x = intrinsic_case(n=25, distinct=distinct)
    found = {(r.layer, r.slot, r.group): r for r in retrievals(program, x, chunk=7)}
    assert len(found) == 4  # 2 comparisons x 2 stages
    for c, A in enumerate(task.matrices):
        p, cls = brute_pair_keys(x.astype(np.float64), A, distinct)
        r1 = next(r for r in found.values() if r.comparison == c and r.stage == 0)
        r2 = next(r for r in found.values() if r.comparison == c and r.stage == 1)
        assert (r1.layer, r1.group, r2.layer, r2.group) == (1, "data", 2, "cls")
        assert r1.label == r2.label == f"pair-max[A_{c + 1}]"
        np.testing.assert_array_equal(r1.chosen, p)
        np.testing.assert_array_equal(r2.chosen, cls)
        np.testing.assert_array_equal(r1.queries, np.arange(T))
        np.testing.assert_array_equal(r2.queries, [T])


def test_retrievals_agree_with_execute_sets_and_chunking():
    _, program, x = intrinsic_case(n=40)
    sets = execute(program, x)
    rows = np.arange(len(x))[:, None]
    whole = retrievals(program, x)
    for r, r_small in zip(whole, retrievals(program, x, chunk=3), strict=True):
        np.testing.assert_array_equal(r.chosen, r_small.chosen)
        assert sets[r.layer][rows, r.queries[None, :], r.chosen].all()


def test_slot_operations_describe_aggregations():
    fixed = predict(make_task("fixed-positions", T=T), (1,), d_model=8, pos_encoding="learned")
    (op,) = slot_operations(fixed.program)
    assert isinstance(op.op, AggregatePositions)
    assert (op.layer, op.slot, op.group, op.positions) == (1, 0, "cls", (0, 1, 2))
    assert op.kind == "position-specific aggregation" and not op.is_retrieval
    triangle = predict(make_task("triangle", T=T), (1,), d_model=8)
    (op,) = slot_operations(triangle.program)
    assert isinstance(op.op, AggregateAll) and op.positions is None
    assert op.kind == "global aggregation"
    assert (
        retrievals(
            triangle.program, make_task("triangle", T=T).sample(3, np.random.default_rng(0))[0]
        )
        == []
    )


# ---- statistics ------------------------------------------------------------------------
def brute_statistics(pattern: np.ndarray, queries):
    n, h, tokens, _ = pattern.shape
    out = {k: np.zeros(h) for k in ("top1", "specificity", "entropy", "content")}
    for j in range(h):
        for q in queries:
            rows = [list(pattern[i, j, q]) for i in range(n)]
            mean = [sum(r[k] for r in rows) / n for k in range(tokens)]
            amax = [first_argmax(r) for r in rows]
            most = max(amax.count(k) for k in range(tokens))
            out["specificity"][j] += most / n / len(queries)
            for r in rows:
                out["top1"][j] += max(r) / (n * len(queries))
                ent = -sum(v * math.log(v) for v in r if v > 0) / math.log(tokens)
                out["entropy"][j] += ent / (n * len(queries))
                tv = 0.5 * sum(abs(r[k] - mean[k]) for k in range(tokens))
                out["content"][j] += tv / (n * len(queries))
    return out


def test_statistics_equal_brute_force_across_chunks():
    rng = np.random.default_rng(1)
    n, h, tokens = 600, 2, 4  # 600 samples cross a chunk boundary
    pattern = rng.dirichlet(np.full(tokens, 0.3), size=(n, h, tokens))
    pattern[:, 1, :, 2] += 3.0  # head 1 leans to key 2: a different specificity
    pattern /= pattern.sum(-1, keepdims=True)
    for queries in ([0, 1, 2, 3], [3], [1, 2]):
        got = head_statistics(pattern, queries)
        want = brute_statistics(pattern, queries)
        for key, value in want.items():
            np.testing.assert_allclose(getattr(got, key), value, rtol=1e-9, atol=1e-12)


def test_known_heads_get_known_statistics_and_modes():
    n, tokens = 200, T + 1
    rng = np.random.default_rng(2)
    fixed = one_hot_rows(np.zeros((n, tokens), dtype=int), tokens)  # all mass on key 0
    flat = uniform(n, tokens, tokens)
    content = one_hot_rows(rng.integers(0, T, size=(n, tokens)), tokens)
    peak = rng.integers(0, T, size=(n, tokens))  # 0.4 on a random key, the rest spread
    diffuse = np.full((n, tokens, tokens), 0.6 / T)
    np.put_along_axis(diffuse, peak[..., None], 0.4, axis=2)
    pattern = np.stack([fixed, flat, content, diffuse], axis=1)
    s = head_statistics(pattern)
    np.testing.assert_allclose(s.top1[:2], [1.0, 1.0 / tokens])
    np.testing.assert_allclose(s.entropy[:2], [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(s.content[:2], [0.0, 0.0], atol=1e-12)
    assert s.specificity[0] == 1.0
    assert s.top1[2] == 1.0 and s.specificity[2] < 0.5 and s.content[2] > 0.5
    assert s.modes == (POSITIONAL, GLOBAL, RETRIEVAL, DIFFUSE)


def test_classify_follows_the_principles():
    tokens = 65
    # uniform over all keys but one: near-uniform, whatever its argmax does
    assert classify(1 / 64, 1.0, math.log(64) / math.log(tokens), 0.0) == GLOBAL
    # uniform over 3 fixed keys: the same pattern in every sample
    assert classify(1 / 3, 1.0, math.log(3) / math.log(tokens), 0.0) == POSITIONAL
    # argmax flips between samples but rows barely move: still a fixed pattern
    assert classify(0.3, 0.5, 0.5, 0.02) == POSITIONAL
    # a one-hot content head
    assert classify(1.0, 1 / 64, 0.0, 1 - 1 / 64) == RETRIEVAL
    assert classify(0.2, 0.1, 0.6, 0.7) == DIFFUSE


def test_heads_error_on_one_sample_or_bad_queries():
    with pytest.raises(HeadsError, match="at least 2 samples"):
        head_statistics(uniform(1, T + 1, T + 1)[:, None])
    with pytest.raises(HeadsError, match="queries"):
        head_statistics(uniform(3, T + 1, T + 1)[:, None], [T + 1])


# ---- matching ----------------------------------------------------------------------------
def engine_keys(program, x):
    return {(r.layer, r.slot, r.group): r.chosen for r in retrievals(program, x)}


def test_permuted_one_hot_heads_match_their_slots():
    _, program, x = intrinsic_case()
    n, tokens = len(x), T + 1
    keys = engine_keys(program, x)

    def retrieval_head(layer, slot):
        if layer == 1:  # data queries retrieve, CLS idle (uniform)
            return np.concatenate(
                [one_hot_rows(keys[1, slot, "data"], tokens), uniform(n, 1, tokens)], axis=1
            )
        return np.concatenate(
            [uniform(n, T, tokens), one_hot_rows(keys[2, slot, "cls"], tokens)], axis=1
        )

    position_0 = one_hot_rows(np.zeros((n, tokens), dtype=int), tokens)
    block0 = np.stack([retrieval_head(1, 1), position_0, retrieval_head(1, 0)], axis=1)
    block1 = np.stack([retrieval_head(2, 1), retrieval_head(2, 0)], axis=1)
    obs = observed_program([block0, block1], program, x)
    assert [(r.block, r.head, r.slot) for r in obs.rows] == [
        (0, 0, 1),
        (0, 1, None),
        (0, 2, 0),
        (1, 0, 1),
        (1, 1, 0),
    ]
    for block, head, group, label in [
        (0, 0, "data", "pair-max[A_2]"),
        (0, 2, "data", "pair-max[A_1]"),
        (1, 0, "cls", "pair-max[A_2]"),
        (1, 1, "cls", "pair-max[A_1]"),
    ]:
        row = obs.row(block, head)
        assert row.agreement == 1.0 and row.group(group).agreement == 1.0
        assert row.group(group).comparison == label
        assert row.group(group).mode == RETRIEVAL
        assert row.group("cls" if group == "data" else "data").operation == "idle"
        assert row.chance == pytest.approx(1 / T)
    extra = obs.row(0, 1)
    assert extra.data.operation == extra.cls.operation == NO_OPERATION
    assert extra.data.mode == POSITIONAL and extra.agreement is None
    assert obs.unmatched_slots == ()
    text = "\n".join(obs.lines())
    assert NO_OPERATION in text and RETRIEVAL in text and "1/T" in text
    assert len(obs.lines()) > 2 * len(obs.rows)
    d = obs.to_dict()
    json.dumps(d, allow_nan=False)
    assert [h["slot"] for h in d["heads"]] == [1, None, 0, 1, 0]
    assert d["heads"][1]["data"]["agreement"] is None


def test_noisy_patterns_agreement_equals_brute_force_share():
    task, program, x = intrinsic_case(n=120, seed=3)
    rng = np.random.default_rng(4)
    n, tokens = len(x), T + 1
    p = {c: brute_pair_keys(x.astype(np.float64), A, False)[0] for c, A in enumerate(task.matrices)}
    slot_of = {0: 1, 1: 0}  # observed head j plays comparison slot_of[j]
    pattern = np.empty((n, 2, tokens, tokens))
    for j, c in slot_of.items():
        target = np.concatenate([p[c], rng.integers(0, tokens, size=(n, 1))], axis=1)
        noisy = rng.random((n, tokens)) < 0.3
        target = np.where(noisy, rng.integers(0, tokens, size=(n, tokens)), target)
        logits = rng.normal(size=(n, tokens, tokens)) + 3.0 * one_hot_rows(target, tokens)
        pattern[:, j] = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    block1 = np.full((n, 2, tokens, tokens), 1.0 / tokens)
    obs = observed_program([pattern, block1], program, x)
    for j, c in slot_of.items():
        hits = sum(
            first_argmax(list(pattern[i, j, t, :T])) == p[c][i, t]
            for i in range(n)
            for t in range(T)
        )
        row = obs.row(0, j)
        assert row.slot == c
        assert row.data.agreement == pytest.approx(hits / (n * T), abs=1e-12)
        assert row.agreement == pytest.approx(hits / (n * T), abs=1e-12)
        fixed = np.mean([np.bincount(p[c][:, t]).max() / n for t in range(T)])
        assert row.data.fixed_key == pytest.approx(fixed)
        assert 0.5 < row.data.agreement < 1.0


def test_aggregation_slots_report_mode_and_mass_on_positions():
    task = make_task("fixed-positions", T=T)
    program = predict(task, (2,), d_model=8, pos_encoding="learned").program
    x, _ = task.sample(150, np.random.default_rng(5))
    n, tokens = len(x), T + 1
    rng = np.random.default_rng(6)
    content = one_hot_rows(rng.integers(0, T, size=(n, tokens)), tokens)
    on_p = np.zeros((n, tokens, tokens))
    on_p[..., [0, 1, 2]] = 1 / 3
    obs = observed_program([np.stack([content, on_p], axis=1)], program, x)
    row = obs.row(0, 1)
    assert row.slot == 0 and row.agreement is None
    assert row.cls.kind == "position-specific aggregation"
    assert row.cls.mass_on_positions == pytest.approx(1.0)
    assert row.cls.mode == POSITIONAL
    assert obs.row(0, 0).slot is None and obs.row(0, 0).cls.mode == RETRIEVAL
    assert obs.row(0, 0).cls.mass_on_positions is None

    triangle = make_task("triangle", T=T)
    program = predict(triangle, (2,), d_model=8).program
    x, _ = triangle.sample(150, np.random.default_rng(7))
    obs = observed_program([np.stack([content, uniform(n, tokens, tokens)], 1)], program, x)
    assert obs.row(0, 1).slot == 0 and obs.row(0, 1).cls.mode == GLOBAL
    assert obs.row(0, 1).cls.kind == "global aggregation"
    assert obs.row(0, 0).cls.operation == NO_OPERATION


def test_more_program_slots_than_heads_lists_unmatched_slots():
    _, program, x = intrinsic_case(n=60)
    keys = engine_keys(program, x)
    n, tokens = len(x), T + 1
    head = np.concatenate([one_hot_rows(keys[1, 1, "data"], tokens), uniform(n, 1, tokens)], axis=1)
    obs = observed_program([head[:, None], uniform(n, tokens, tokens)[:, None]], program, x)
    assert obs.row(0, 0).slot == 1
    assert {(s.layer, s.slot) for s in obs.unmatched_slots} == {(1, 0), (2, 0), (2, 1)} - {
        (2, obs.row(1, 0).slot)
    }
    assert any("unmatched program slot" in line for line in obs.lines())


def test_sample_index_aligns_patterns_with_x():
    _, program, x_all = intrinsic_case(n=80)
    idx = np.random.default_rng(8).permutation(80)[:50]
    x = x_all[idx]
    keys = engine_keys(program, x)
    n, tokens = len(x), T + 1
    block0 = np.stack(
        [
            np.concatenate([one_hot_rows(keys[1, s, "data"], tokens), uniform(n, 1, tokens)], 1)
            for s in (0, 1)
        ],
        axis=1,
    )
    block1 = np.full((n, 2, tokens, tokens), 1.0 / tokens)
    indexed = observed_program([block0, block1], program, x_all, sample_index=idx)
    assert indexed.to_dict() == observed_program([block0, block1], program, x).to_dict()
    assert indexed.row(0, 0).agreement == 1.0
    assert observed_program([block0, block1], program, x_all[:50]).row(0, 0).agreement < 0.5


def test_bad_inputs_raise_heads_error():
    _, program, x = intrinsic_case(n=20)
    good = np.full((20, 2, T + 1, T + 1), 1.0 / (T + 1))
    with pytest.raises(HeadsError, match="one array per block"):
        observed_program([good], program, x)
    with pytest.raises(HeadsError, match=r"T\+1"):
        observed_program([good[..., :T, :T], good], program, x)
    with pytest.raises(HeadsError, match="hook_pattern, not hook_attn_scores"):
        observed_program([good * 3.0, good], program, x)
    with pytest.raises(HeadsError, match="n=20"):
        observed_program([good[:10], good[:10]], program, x)


# ---- a real forward: the hand-set model ----------------------------------------------
def handset_program(d: int) -> Program:
    """Slot 0: position-specific aggregation over {0} (data and CLS); slot 1: head 0's
    hard max retrieval argmax_{s != t} x(t)^T x(s) at data tokens, c^T x(s) at CLS."""
    from handset import cls_content

    M = np.eye(d)
    structure = ComparisonStructure(
        comparisons=(
            Comparison(
                label="partner",
                order=2,
                stages=(
                    Stage(
                        "data",
                        partial(bilinear_query_key, matrix=M),
                        reads_query=1,
                        exclude_self=True,
                        description="t retrieves argmax_{s != t} x(t)^T x(s)",
                    ),
                    Stage("cls", partial(bilinear_key_pair, matrix=M), reads_key=2),
                ),
            ),
            Comparison(
                label="cls-max",
                order=1,
                stages=(
                    Stage(
                        "cls",
                        partial(key_projection, direction=cls_content(d)),
                        description="CLS retrieves argmax_s c^T x(s)",
                    ),
                ),
            ),
        )
    )
    heads = (
        Head(AggregatePositions((0,)), AggregatePositions((0,))),
        Head(Retrieve(0, 0), Retrieve(1, 0)),
    )
    return Program(layers=(heads,), decodes=(), aggregated=(), structure=structure)


def test_handset_forward_modes_and_matching():
    import handset

    d = 4
    model = handset.handset_model(T=T, d=d)
    x = np.random.default_rng(9).standard_normal((400, T, d)).astype(np.float32)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.from_numpy(x))
    pattern = cache["blocks.0.attn.hook_pattern"].numpy()
    obs = observed_program([pattern], handset_program(d), x)
    retrieval, positional = obs.row(0, 0), obs.row(0, 1)
    assert retrieval.data.mode == retrieval.cls.mode == RETRIEVAL
    assert positional.data.mode == positional.cls.mode == POSITIONAL
    assert (retrieval.slot, positional.slot) == (1, 0)
    ties = handset.near_ties(x).mean()  # only near ties may soften the argmax
    assert retrieval.agreement >= 1.0 - ties - 1e-9
    assert retrieval.data.comparison == "partner" and retrieval.cls.comparison == "cls-max"
    assert positional.data.mass_on_positions == pytest.approx(1.0, abs=1e-3)


def test_agreement_is_taken_over_the_data_keys_a_retrieval_chooses_from():
    """A head parking most of its mass on the CLS key (a sink) still agrees when the
    chosen data key is its largest data key; over all T+1 keys it would not."""
    rng = np.random.default_rng(5)
    n, T = 40, 6
    chosen = rng.integers(0, T, size=(n, T))
    pattern = np.full((n, 1, T + 1, T + 1), 0.01)
    rows, queries = np.meshgrid(np.arange(n), np.arange(T), indexing="ij")
    pattern[rows, 0, queries, chosen] = 0.2
    pattern[:, 0, :, T] = 0.7  # the CLS key holds the overall argmax everywhere
    assert argmax_agreement(pattern, chosen, np.arange(T), T)[0] == 1.0
    assert argmax_agreement(pattern, chosen, np.arange(T))[0] == 0.0


def test_the_reported_chance_is_the_rows_chance():
    _, program, x = intrinsic_case(n=20, seed=6)
    tokens = T + 1
    uniform = np.full((len(x), 2, tokens, tokens), 1.0 / tokens)
    obs = observed_program([uniform, uniform], program, x)
    assert obs.chance == obs.to_dict()["chance"] == pytest.approx(1 / T)
    assert all(r.chance == obs.chance for r in obs.rows)


# ---- what a head reads, from attention alone -------------------------------------------
def planted_block(n: int = 200, offset: int = 3, cls_keys=(3,), seed: int = 11):
    """One block of four heads [n, 4, T+1, T+1], each with a known reading: 0 a position
    head (data query q reads (q + offset) mod T, CLS reads ``cls_keys`` evenly), 1 a
    content retrieval (a random data key per sample and query), 2 uniform rows, 3 a head
    whose every query reads keys {1, 4} evenly."""
    rng = np.random.default_rng(seed)
    tokens = T + 1
    position = np.zeros((n, tokens, tokens))
    position[:, np.arange(T), (np.arange(T) + offset) % T] = 1.0
    position[:, T, list(cls_keys)] = 1.0 / len(cls_keys)
    content = one_hot_rows(rng.integers(0, T, size=(n, tokens)), tokens)
    pair = np.zeros((n, tokens, tokens))
    pair[..., [1, 4]] = 0.5
    return np.stack([position, content, uniform(n, tokens, tokens), pair], axis=1)


@pytest.mark.parametrize("offset", [3, -1, 1])
def test_without_a_program_heads_are_named_from_attention_alone(offset):
    obs = observed_program([planted_block(offset=offset)], None)
    assert not obs.predicted and obs.unmatched_slots == ()
    position, content, flat, pair = (obs.row(0, j) for j in range(4))
    assert position.slot is None and position.data.operation == "no predicted program"
    assert position.data.mode == position.cls.mode == POSITIONAL
    assert position.data.offset == offset and position.data.keys is None
    assert f"offset {offset:+d}" in position.data.reads
    assert position.cls.keys == (3,) and position.cls.reads == "reads keys [3]"
    assert content.data.mode == RETRIEVAL and content.data.keys is None
    assert content.data.reads == "retrieves by content from keys [0-7]"
    assert flat.cls.mode == GLOBAL and flat.cls.reads == GLOBAL
    assert pair.data.keys == pair.cls.keys == (1, 4) and pair.data.offset is None
    text = str(obs)
    assert "no predicted program" in text and "agree" not in text  # no matching columns
    json.dumps(obs.to_dict(), allow_nan=False)
    assert obs.to_dict()["heads"][0]["cls"]["keys"] == [3]


def test_a_head_reading_a_strict_subset_of_the_predicted_keys_is_named_so():
    """fixed-positions at T = 8: CLS aggregates positions {0, 1, 2}; a head whose CLS row
    reads only key 0 is matched to that slot and named a strict subset, one reading all
    three is not."""
    task = make_task("fixed-positions", T=T)
    program = predict(task, (1,), d_model=8, pos_encoding="learned").program
    x, _ = task.sample(120, np.random.default_rng(4))
    for keys, subset in (((0,), True), ((0, 1, 2), False), ((1, 2), True)):
        obs = observed_program([planted_block(n=len(x), cls_keys=keys)[:, :1]], program, x)
        cls = obs.row(0, 0).cls
        assert cls.kind == "position-specific aggregation" and cls.keys == keys
        named = "a strict subset of the program's [0-2]" in cls.reads
        assert named == subset, cls.reads
        assert cls.mass_on_positions == pytest.approx(1.0)
