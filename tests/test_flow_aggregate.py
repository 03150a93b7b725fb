"""The aggregate flow score: the membership share, not the mean of g (docs/influence.md).

On the hand-set model (tests/handset.py: head 0 retrieves the argmax key p(t) by content,
head 1 copies x(0) into every token) with d = 2, near ties of head 0 occur on a few queries
and give g ~ 1e3 … 1e5 there: the mean of g over samples is decided by those samples and
ranks rarely carried positions above always carried ones; the share of samples in which s
is in the flow set does not.
"""

from __future__ import annotations

import numpy as np
import pytest
from handset import handset_model, near_ties, true_sets

from infoprobe.compare.instruments import FLOW_SHARE_NAME, flow
from infoprobe.influence import (
    AGGREGATE_SHARE_LEVEL,
    InfluenceError,
    flow_threshold,
    influence,
    membership_share,
    read_influence,
    write_influence,
)
from infoprobe.report.figures import score_label

T, D, N = 8, 2, 384


@pytest.fixture(scope="module")
def handset_flow():
    x = np.random.default_rng(0).standard_normal((N, T, D)).astype(np.float32)
    return x, influence(handset_model(T, D), x, progress=False)


def test_share_ranks_always_carried_above_rarely_carried_and_the_mean_does_not(handset_flow):
    x, result = handset_flow
    assert near_ties(x, 0.021).any()  # the inputs do produce near ties
    truth = true_sets(x)[..., :T].mean(axis=1)  # [L+1, T+1, T]: share of samples carried
    always, rare = truth == 1.0, truth < 0.5
    share, mean = result.membership_share(), result.aggregate
    for layer in range(2):
        a, r = always[layer], rare[layer]
        assert a.any() and r.any()
        # the share: every always-carried cell above every cell carried in < half the samples
        assert share[layer][a].min() > share[layer][r].max(), layer
    # layer 1 (after head 0's retrieval): the mean ranks them the wrong way round
    a, r = always[1], rare[1]
    assert mean[1][a].min() < mean[1][r].max()
    assert result.scores[1].max() > 1e3  # a handful of near-tie samples decide the mean
    # the share is right in every cell within sampling of the per-sample sets
    assert np.abs(share - truth).max() < 0.05
    assert (share[1][a] == 1.0).all()
    # the same ordering through the instrument the comparison and report use
    obs = flow(result.scores, threshold=flow_threshold(T))
    np.testing.assert_array_equal(obs.score, share)
    np.testing.assert_array_equal(obs.aggregate, share >= AGGREGATE_SHARE_LEVEL)
    assert obs.aggregate[always].all() and not obs.aggregate[rare].any()
    assert obs.score_name == FLOW_SHARE_NAME and obs.tau == AGGREGATE_SHARE_LEVEL


def test_the_file_serves_the_same_share(handset_flow, tmp_path):
    x, _ = handset_flow
    path = tmp_path / "influence.h5"
    write_influence(path, handset_model(T, D), x[:64], progress=False)
    inf = read_influence(path)
    expected = influence(handset_model(T, D), x[:64], progress=False).membership_share()
    np.testing.assert_array_equal(inf.membership_share(), expected)
    np.testing.assert_allclose(inf.aggregate, inf.scores.mean(axis=1, dtype=np.float64))


def test_share_matches_a_brute_force_count():
    rng = np.random.default_rng(1)
    layers, n, t = 3, 17, 5
    scores = rng.gamma(0.5, 0.1, size=(layers, n, t + 1, t)).astype(np.float32)
    scores[0, :4, 1, 2] = flow_threshold(t)  # exactly at the threshold: a member
    scores[1, 0, 0, 0] = 1e6  # one huge value moves a mean, not a share
    for fraction in (0.25, 1.0):
        tau = fraction / t
        brute = np.zeros((layers, t + 1, t))
        for layer in range(layers):
            for token in range(t + 1):
                for s in range(t):
                    count = sum(scores[layer, i, token, s] >= tau for i in range(n))
                    brute[layer, token, s] = count / n
        share = membership_share(scores, fraction)
        assert share.dtype == np.float64
        np.testing.assert_array_equal(share, brute)
        assert ((share >= 0) & (share <= 1)).all()
    # invariant to the scale of g above the threshold
    lifted = np.where(scores >= flow_threshold(t), scores * 1e4, scores)
    np.testing.assert_array_equal(membership_share(lifted), membership_share(scores))
    assert np.isnan(membership_share(scores[:, :0])).all()
    with pytest.raises(InfluenceError, match="membership_share"):
        membership_share(scores[0])


def test_the_grid_colour_bar_says_what_the_share_is():
    label = score_label("flow", FLOW_SHARE_NAME)
    assert "share of samples in which x(s) is in the flow set of h(t, l)" in label
    assert "redrawn" in score_label("flow (resample)", FLOW_SHARE_NAME)
