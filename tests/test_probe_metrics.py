"""Metrics and targets against brute-force definitions (sklearn, explicit loops)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import r2_score

from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.metrics import (
    identification_hits,
    per_sample_error,
    pooled_r2,
    r2_from_sums,
)
from infoprobe.probes.targets import (
    AttentionRole,
    attention_rank_partners,
    gather_partner_inputs,
    role_partners,
)

RNG = np.random.default_rng(0)


def test_pooled_r2_is_sklearn_variance_weighted():
    y = RNG.normal(size=(200, 3, 4)) * np.array([1.0, 3.0, 0.2, 5.0])
    pred = y + RNG.normal(size=y.shape)
    got = pooled_r2(y, pred).numpy()
    for c in range(3):
        ref = r2_score(y[:, c], pred[:, c], multioutput="variance_weighted")
        assert got[c] == pytest.approx(ref, abs=1e-12)
    assert np.isnan(r2_from_sums(np.array([1.0]), np.array([0.0])).item())


def test_per_sample_error_averages_to_nmse():
    y = RNG.normal(size=(300, 2))
    pred = 0.5 * y + 0.1
    sst = ((y - y.mean(0)) ** 2).sum()
    err = per_sample_error(y, pred, sst / len(y)).numpy()
    assert err.shape == (300,)
    assert err.mean() == pytest.approx(
        1 - r2_score(y, pred, multioutput="variance_weighted"), rel=1e-5
    )


def test_identification_matches_a_loop():
    n, c, s, t, d = 40, 2, 3, 5, 2
    x = RNG.normal(size=(n, t, d))
    pred = RNG.normal(size=(n, c, s, d)) * 0.7 + x[:, None, :s] * 0.6
    true = RNG.integers(0, t, size=(n, c, s))
    hits = identification_hits(pred, x, true).numpy()
    for i in range(n):
        for a in range(c):
            for b in range(s):
                dist = ((x[i] - pred[i, a, b]) ** 2).sum(-1)
                assert hits[i, a, b] == (np.argmin(dist) == true[i, a, b])


def test_attention_rank_partners_match_argsort_loop():
    n, h, t = 7, 2, 5
    logits = RNG.normal(size=(n, h, t + 1, t + 1))
    pattern = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for rank in (1, 2, 3):
        got = attention_rank_partners(pattern, rank)
        for i in range(n):
            for j in range(h):
                for q in range(t + 1):
                    order = np.argsort(-pattern[i, j, q, :t], kind="stable")
                    assert got[i, j, q] == order[rank - 1]
    with pytest.raises(ProbeInputError, match="rank"):
        attention_rank_partners(pattern, t + 1)


def test_role_partners_and_gather():
    n, t, d = 6, 4, 3
    x = RNG.normal(size=(n, t, d))
    pattern = np.zeros((n, 2, t + 1, t + 1))
    pattern[..., 0] = 0.1
    pattern[:, 1, :, 2] = 0.9  # head 1 always attends to key 2 most, key 0 second
    pattern[:, 1, :, 4] = 5.0  # the CLS key is never a partner
    idx = role_partners({0: pattern}, [AttentionRole(0, 1, 1), AttentionRole(0, 1, 2)])
    assert idx.shape == (n, 2, t + 1)
    assert (idx[:, 0] == 2).all() and (idx[:, 1] == 0).all()
    picked = gather_partner_inputs(x, idx)
    np.testing.assert_array_equal(picked[:, 0, 3], x[:, 2])
    with pytest.raises(ProbeInputError, match="block 1"):
        role_partners({0: pattern}, [AttentionRole(1, 0, 1)])
    with pytest.raises(ProbeInputError, match=r"indices in 0\.\.3"):
        gather_partner_inputs(x, np.full((n, 2), 4))
