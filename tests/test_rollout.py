"""Attention rollout against a brute-force loop and closed-form cases."""

from __future__ import annotations

import numpy as np
import pytest

from infoprobe.attention.rollout import (
    RolloutConfig,
    RolloutError,
    attention_rollout,
    predict_rollout,
    rollout_sets,
)


def random_patterns(rng, n, heads, tokens):
    out = []
    for h in heads:
        logits = rng.normal(size=(n, h, tokens, tokens)) * 2.0
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        out.append(e / e.sum(axis=-1, keepdims=True))
    return out


def brute_force_rollout(patterns, a, fusion):
    """Plain loops over samples, queries, keys and heads; no numpy broadcasting."""
    fuse = {"mean": lambda v: sum(v) / len(v), "max": max, "min": min}[fusion]
    n, tokens = patterns[0].shape[0], patterns[0].shape[-1]
    out = np.zeros((len(patterns) + 1, n, tokens, tokens))
    for i in range(n):
        current = [[1.0 if q == k else 0.0 for k in range(tokens)] for q in range(tokens)]
        out[0, i] = current
        for b, pattern in enumerate(patterns):
            mixed = []
            for q in range(tokens):
                row = [
                    a * fuse([pattern[i, h, q, k] for h in range(pattern.shape[1])])
                    + (1 - a) * (q == k)
                    for k in range(tokens)
                ]
                total = sum(row)
                mixed.append([v / total for v in row])
            current = [
                [sum(mixed[q][m] * current[m][k] for m in range(tokens)) for k in range(tokens)]
                for q in range(tokens)
            ]
            out[b + 1, i] = current
    return out


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("a", [0.5, 0.2, 1.0])
def test_rollout_matches_brute_force(fusion, a):
    rng = np.random.default_rng(0)
    patterns = random_patterns(rng, n=3, heads=(2, 3), tokens=5)
    ours = attention_rollout(patterns, attention_weight=a, head_fusion=fusion)
    np.testing.assert_allclose(ours, brute_force_rollout(patterns, a, fusion), atol=1e-12)
    np.testing.assert_allclose(ours.sum(axis=-1), 1.0, atol=1e-12)  # rows stay distributions


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_identity_attention_gives_own_position(fusion):
    tokens = 6
    eye = np.broadcast_to(np.eye(tokens), (4, 2, tokens, tokens))
    result = predict_rollout([eye, eye, eye], RolloutConfig(head_fusion=fusion))
    expected = np.broadcast_to(np.eye(tokens, dtype=bool), result.sets.shape)
    np.testing.assert_array_equal(result.sets, expected)


@pytest.mark.parametrize("a", [0.5, 0.3, 0.9])
def test_uniform_attention_gives_every_position_with_closed_form_weights(a):
    tokens = 7
    uniform = np.full((2, 3, tokens, tokens), 1.0 / tokens)
    weights = attention_rollout([uniform] * 3, attention_weight=a)
    for layer in range(1, 4):
        # (a U + (1-a) I)^l = (1-a)^l I + (1 - (1-a)^l) U, U the uniform matrix
        keep = (1 - a) ** layer
        expected = keep * np.eye(tokens) + (1 - keep) / tokens
        np.testing.assert_allclose(weights[layer], np.broadcast_to(expected, weights[layer].shape))
    sets = rollout_sets(weights, threshold_ratio=0.25)
    assert sets[1:].all()
    np.testing.assert_array_equal(
        sets[0], np.broadcast_to(np.eye(tokens, dtype=bool), sets[0].shape)
    )


def test_one_hot_attention_reproduces_union_of_retrieved_sets():
    """Hard attention: I(t, l+1) = I(t, l) ∪ ⋃_heads I(partner_h(t), l), built with sets."""
    rng = np.random.default_rng(1)
    n, tokens, heads, blocks = 5, 6, 2, 2
    partners = rng.integers(0, tokens, size=(blocks, n, heads, tokens))
    patterns = []
    for b in range(blocks):
        p = np.zeros((n, heads, tokens, tokens))
        for i in range(n):
            for h in range(heads):
                p[i, h, np.arange(tokens), partners[b, i, h]] = 1.0
        patterns.append(p)
    result = predict_rollout(patterns, RolloutConfig(attention_weight=0.5, threshold_ratio=0.25))
    for i in range(n):
        current = [{t} for t in range(tokens)]
        for b in range(blocks):
            current = [
                current[t].union(*(current[partners[b, i, h, t]] for h in range(heads)))
                for t in range(tokens)
            ]
            for t in range(tokens):
                assert set(np.flatnonzero(result.sets[b + 1, i, t])) == current[t]


def test_bad_inputs_are_refused():
    rng = np.random.default_rng(2)
    patterns = random_patterns(rng, n=2, heads=(2,), tokens=4)
    with pytest.raises(RolloutError, match="hook_attn_scores"):
        attention_rollout([patterns[0] * 3.0])
    with pytest.raises(RolloutError, match=r"patterns\[1\].*disagrees"):
        attention_rollout([patterns[0], random_patterns(rng, 3, (2,), 4)[0]])
    with pytest.raises(RolloutError, match="head_fusion"):
        RolloutConfig(head_fusion="median")
    with pytest.raises(RolloutError, match="attention_weight"):
        RolloutConfig(attention_weight=1.5)
    with pytest.raises(RolloutError, match="expected \\[n, h, T\\+1, T\\+1\\]"):
        attention_rollout([patterns[0][0]])
