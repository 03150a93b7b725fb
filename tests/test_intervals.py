"""Bootstrap intervals over samples (infoprobe.compare.intervals)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm

from infoprobe.compare import Observations, compare
from infoprobe.compare.auroc import auroc
from infoprobe.compare.intervals import (
    IntervalSettings,
    aggregate_scope_intervals,
    bootstrap_auroc,
    bootstrap_ratio,
    multiplicities,
    percentile_interval,
    resample_index,
)


def _small(seed: int = 0, n: int = 7, cells: int = 5, groups: int = 3):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=(groups, n, cells)), 1)  # ties across and within samples
    labels = rng.random((groups, n, cells)) < 0.4
    valid = rng.random((groups, n, cells)) < 0.85
    return scores, labels, valid


def test_bootstrap_auroc_equals_a_loop_over_the_same_resamples():
    scores, labels, valid = _small()
    n = scores.shape[1]
    index = resample_index(n, IntervalSettings(n_resamples=60, seed=3))
    fast = bootstrap_auroc(scores, labels, valid, multiplicities(index, n))
    brute = np.array(
        [
            auroc(
                scores[:, idx].reshape(3, -1),
                labels[:, idx].reshape(3, -1),
                valid[:, idx].reshape(3, -1),
            )
            for idx in index
        ]
    )
    np.testing.assert_allclose(fast, brute, rtol=0, atol=1e-12, equal_nan=True)
    lo, hi = np.nanpercentile(brute, [2.5, 97.5], axis=0)
    np.testing.assert_allclose(percentile_interval(fast, 0.95), np.stack([lo, hi], -1))
    # every count 1 is the plain AUROC
    ones = np.ones((1, n), dtype=np.int32)
    plain = auroc(scores.reshape(3, -1), labels.reshape(3, -1), valid.reshape(3, -1))
    np.testing.assert_allclose(bootstrap_auroc(scores, labels, valid, ones)[0], plain)


def test_bootstrap_ratio_equals_a_loop():
    rng = np.random.default_rng(1)
    num = rng.integers(0, 5, size=(9, 3))
    den = num + rng.integers(0, 5, size=(9, 3))
    index = resample_index(9, IntervalSettings(n_resamples=40))
    fast = bootstrap_ratio(num, den, multiplicities(index, 9))
    brute = np.array([num[i].sum(0) / den[i].sum(0) for i in index])
    np.testing.assert_allclose(fast, brute)


def test_aggregate_interval_recomputes_membership_and_score_per_resample():
    rng = np.random.default_rng(2)
    layers, n, T = 2, 8, 3
    pred = rng.random((layers, n, T + 1, T)) < 0.7
    source = rng.random((layers, n, T + 1, T))
    mask = ~np.eye(T + 1, T, dtype=bool)
    settings = IntervalSettings(n_resamples=30, seed=5)
    index = resample_index(n, settings)
    found = aggregate_scope_intervals(pred, source, mask, multiplicities(index, n), 0.95)
    brute = []
    for idx in index:
        share = pred[:, idx].mean(axis=1)
        always, definite = share == 1, ((share == 1) | (share == 0)) & mask
        flat = (layers, -1)
        brute.append(
            auroc(
                source[:, idx].mean(axis=1).reshape(flat),
                always.reshape(flat),
                definite.reshape(flat),
            )
        )
    expected = percentile_interval(np.array(brute), 0.95)
    np.testing.assert_allclose(found["auroc_per_layer_interval"], expected, equal_nan=True)
    none = aggregate_scope_intervals(pred, None, mask, multiplicities(index, n), 0.95)
    assert none["auroc_per_layer_interval"] is None


def test_aggregate_set_rates_are_recomputed_per_resample():
    """With tau, the aggregate set (share >= tau) is redrawn per resample: the intervals of
    its recall and violation rate equal a loop over the same resamples."""
    rng = np.random.default_rng(4)
    layers, n, T = 2, 10, 4
    pred = rng.random((layers, n, T + 1, T)) < 0.6
    pred[:, :, :, 0] = True  # a position predicted in every sample: "always" cells exist
    member = rng.random((layers, n, T + 1, T)) < 0.5
    mask = ~np.eye(T + 1, T, dtype=bool)
    index = resample_index(n, IntervalSettings(n_resamples=40, seed=6))
    found = aggregate_scope_intervals(
        pred, member.astype(float), mask, multiplicities(index, n), 0.9, tau=0.5
    )
    recall, violation = [], []
    for idx in index:
        share_pred, share_obs = pred[:, idx].mean(axis=1), member[:, idx].mean(axis=1)
        always, never = (share_pred == 1) & mask, (share_pred == 0) & mask
        observed = share_obs >= 0.5
        with np.errstate(invalid="ignore"):
            recall.append((always & observed).sum((1, 2)) / always.sum((1, 2)))
            violation.append((never & observed).sum((1, 2)) / never.sum((1, 2)))
    for name, values in (("recall_interval", recall), ("violation_rate_interval", violation)):
        expected = percentile_interval(np.array(values, dtype=float), 0.9)
        np.testing.assert_allclose(found[name], expected, equal_nan=True)
    assert np.isfinite(found["recall_interval"]).all()
    plain = aggregate_scope_intervals(pred, member.astype(float), mask, multiplicities(index, n),
                                      0.9)  # fmt: skip
    assert plain["recall_interval"] is None and plain["violation_rate_interval"] is None


def test_flow_aggregate_scope_carries_rate_intervals_and_probes_do_not():
    """compare(): the flow instrument's aggregate set is its share's threshold, so its
    rates get intervals; an aggregate that cannot be recomputed gets none."""
    rng = np.random.default_rng(7)
    layers, n, T = 2, 12, 3
    predicted = rng.random((layers, n, T + 1, T + 1)) < 0.5
    predicted[:, :, :, 0] = True
    g = rng.random((layers, n, T + 1, T))
    from infoprobe.compare.instruments import flow

    found = compare(predicted, flow(g, threshold=0.5))
    agg = found.aggregate["others"]
    assert agg.recall_interval is not None and agg.recall_interval.shape == (layers, 2)
    lo, hi = agg.recall_interval[1]
    assert lo <= agg.per_layer.recall[1] <= hi
    pooled = Observations(
        instrument="probe",
        aggregate=g.mean(axis=1) > 0.5,
        score=g.mean(axis=1) + 0.01,  # not the mean of any per-sample array
        member_when="above",
        tau=0.5,
    )
    assert compare(predicted, pooled).aggregate["others"].recall_interval is None


def test_coverage_is_near_nominal_for_a_known_auroc():
    """Gaussian scores, positives shifted by d: AUROC = Φ(d / √2). 200 draws × 200
    resamples; the coverage must lie within 3 binomial standard errors of 0.95."""
    rng = np.random.default_rng(11)
    d, n, per = 1.0, 40, 4  # 40 samples of 2 positive and 2 negative cells
    truth = norm.cdf(d / np.sqrt(2))
    labels = np.tile(np.array([True, True, False, False]), (n, 1))
    settings = IntervalSettings(n_resamples=200, seed=0)
    counts = multiplicities(resample_index(n, settings), n)
    draws, hits = 200, 0
    for _ in range(draws):
        scores = rng.normal(size=(n, per)) + d * labels
        lo, hi = percentile_interval(bootstrap_auroc(scores, labels, None, counts), 0.95)
        hits += lo <= truth <= hi
    se = np.sqrt(0.95 * 0.05 / draws)
    assert 0.95 - 3 * se <= hits / draws <= min(1.0, 0.95 + 3 * se)


def test_resampling_samples_widens_the_interval_when_cells_are_dependent():
    """All cells of a sample share its score: the sample bootstrap sees n independent
    units, a per-cell bootstrap wrongly sees n·c."""
    rng = np.random.default_rng(4)
    n, c = 60, 10
    positive = rng.random(n) < 0.5
    z = rng.normal(size=n) + 0.8 * positive
    scores = np.repeat(z[:, None], c, axis=1)
    labels = np.repeat(positive[:, None], c, axis=1)
    settings = IntervalSettings(n_resamples=400)
    by_sample = percentile_interval(
        bootstrap_auroc(scores, labels, None, multiplicities(resample_index(n, settings), n)),
        0.95,
    )
    cells = scores.reshape(-1, 1), labels.reshape(-1, 1)
    by_cell = percentile_interval(
        bootstrap_auroc(*cells, None, multiplicities(resample_index(n * c, settings), n * c)),
        0.95,
    )
    assert by_sample[1] - by_sample[0] > 2 * (by_cell[1] - by_cell[0])


def test_compare_stores_intervals_and_their_settings():
    rng = np.random.default_rng(6)
    layers, n, T = 2, 12, 4
    pred = rng.random((layers, n, T + 1, T + 1)) < 0.5
    score = rng.random((layers, n, T + 1, T)) + 0.5 * pred[..., :T]
    member = score > 0.8
    share = member.mean(axis=1)
    obs = Observations("flow", sample_score=score, per_sample=member, member_when="above",
                       score=share, aggregate=share > 0.5)  # fmt: skip
    result = compare(pred, obs)
    scope = result.per_sample["others"]
    assert scope.auroc_per_layer_interval.shape == (layers, 2)
    assert scope.auroc_per_token_interval.shape == (layers, T + 1, 2)
    assert scope.recall_interval.shape == scope.violation_rate_interval.shape == (layers, 2)
    lo, hi = scope.auroc_per_layer_interval.T
    assert np.all(lo <= scope.auroc_per_layer) and np.all(scope.auroc_per_layer <= hi)
    assert result.aggregate["others"].auroc_per_layer_interval.shape == (layers, 2)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["interval"] == {"level": 0.95, "n_resamples": 1000, "seed": 0,
                                "method": "bootstrap over samples, percentile"}  # fmt: skip
    assert len(data["per_sample"]["others"]["auroc_per_layer_interval"]) == layers
    assert f"[{lo[1]:.3f}, {hi[1]:.3f}]" in result.verdicts[1]
    again = compare(pred, obs)  # fixed seed: the same intervals
    np.testing.assert_array_equal(
        again.per_sample["others"].auroc_per_layer_interval, scope.auroc_per_layer_interval
    )
    # an aggregate that is not a mean of per-sample values has no interval
    pooled = Observations("decodability", sample_score=score, score=rng.random((layers, T + 1, T)))
    assert compare(pred, pooled).aggregate["others"].auroc_per_layer_interval is None
    assert compare(pred, obs, interval=None).per_sample["others"].auroc_per_layer_interval is None


def test_settings_are_checked():
    with pytest.raises(Exception, match="level"):
        IntervalSettings(level=1.5)


def test_comparison_files_of_schema_3_are_still_read(tmp_path):
    from infoprobe.compare import read_comparisons, write_comparisons

    rng = np.random.default_rng(7)
    pred = rng.random((2, 6, 4, 4)) < 0.5
    result = compare(pred, Observations("decodability", sample_score=rng.random((2, 6, 4, 3))))
    path = write_comparisons(tmp_path / "c.json", {"decodability": {"infoflow": result}},
                             extra={"headline": []})  # fmt: skip
    document = json.loads(path.read_text())
    assert document["schema_version"] == 4
    assert document["comparisons"]["decodability"]["infoflow"]["interval"]["n_resamples"] == 1000
    document["schema_version"] = 3  # an older file: no intervals
    del document["comparisons"]["decodability"]["infoflow"]["interval"]
    (tmp_path / "old.json").write_text(json.dumps(document))
    assert read_comparisons(tmp_path / "old.json")["schema_version"] == 3
