"""Split, controls and observed sets: properties and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from infoprobe.probes.controls import (
    check_control_compatible,
    conditional_baseline,
    control_level,
    selectivity,
    shuffled_pairing,
)
from infoprobe.probes.errors import ControlMismatchError, SplitTooSmallError
from infoprobe.probes.observed import aggregate_observed, per_sample_observed
from infoprobe.probes.split import make_split, split_indices


def test_split_is_seeded_sized_and_disjoint():
    a, b = make_split(1000, seed=3), make_split(1000, seed=3)
    np.testing.assert_array_equal(a, b)
    tr, va, te = split_indices(a)
    assert (len(tr), len(va), len(te)) == (700, 150, 150)
    assert len(np.unique(np.concatenate([tr, va, te]))) == 1000
    assert not np.array_equal(a, make_split(1000, seed=4))
    with pytest.raises(SplitTooSmallError, match="'train'"):
        make_split(9)
    with pytest.raises(SplitTooSmallError, match="fractions"):
        make_split(100, (0.5, 0.5, 0.5))


def test_shuffled_pairing_stays_within_split():
    split = make_split(500, seed=1)
    perm = shuffled_pairing(split, seed=2)
    np.testing.assert_array_equal(np.sort(perm), np.arange(500))
    np.testing.assert_array_equal(split[perm], split)
    assert (perm != np.arange(500)).mean() > 0.9


def test_selectivity_and_conditional_baseline():
    score = np.array([[0.9, 0.2], [0.8, 0.7]])
    shuffled = np.array([[0.0, 0.1], [np.nan, 0.0]])
    random = np.array([[0.5, 0.0], [0.1, 0.75]])
    np.testing.assert_allclose(selectivity(score, shuffled, random), [[0.4, 0.1], [0.7, -0.05]])
    np.testing.assert_allclose(control_level(shuffled, None), shuffled)  # NaN stays unknown
    roles = np.arange(12.0).reshape(3, 2, 2)
    cond = conditional_baseline(roles)
    np.testing.assert_array_equal(cond[2], roles[0])


def test_observed_sets_thresholds():
    r2 = np.array([[[0.9, 0.55, 0.3, np.nan]]])  # [1 layer, 1 token, 4 positions]
    ctrl = np.array([[[0.0, 0.4, 0.0, 0.0]]])
    got = aggregate_observed(r2, ctrl, tau=0.5, margin=0.2)
    np.testing.assert_array_equal(got, [[[True, False, False, False, False]]])
    # three samples of one position (d = 1) at 0, 1, 2: own-sample baselines (x - 1)^2 / (2/3)
    x = np.array([0.0, 1.0, 2.0]).reshape(3, 1, 1)
    baseline = np.array([1.5, 0.0, 1.5])
    errors = np.array([0.3, 0.2, np.nan]).reshape(1, 3, 1, 1)
    ps = per_sample_observed(errors, x, tau_sample=0.5)
    assert ps.shape == (1, 3, 1, 2)
    # 0.3 / 1.5 = 0.2 passes; a sample at the mean (baseline 0) passes nothing; NaN never
    assert 0.3 / baseline[0] < 0.5
    np.testing.assert_array_equal(ps[0, :, 0, 0], [True, False, False])
    assert not ps[..., -1].any()


def test_control_compatibility_check():
    cfg = {"d_in": 2, "n_ctx": 4, "d_model": 8, "heads": [1, 1]}
    spec = {"task": "x", "data_seed": 0, "n": 100}
    check_control_compatible(cfg, {**cfg, "heads": (1, 1)}, spec, dict(spec), "a.h5", "b.h5")
    with pytest.raises(ControlMismatchError, match=r"b\.h5.*'heads' expected \[1, 1\]"):
        check_control_compatible(cfg, {**cfg, "heads": [2]}, spec, spec, "a.h5", "b.h5")
    with pytest.raises(ControlMismatchError, match="'n' expected 100"):
        check_control_compatible(cfg, cfg, spec, {**spec, "n": 50}, "a.h5", "b.h5")
    # init_gain: a config written before the field existed had the default 1.0
    check_control_compatible(cfg, {**cfg, "init_gain": 1.0}, spec, spec, "a.h5", "b.h5")
    with pytest.raises(ControlMismatchError, match=r"'init_gain' expected 1\.0 .*got 0\.5"):
        check_control_compatible(cfg, {**cfg, "init_gain": 0.5}, spec, spec, "a.h5", "b.h5")
