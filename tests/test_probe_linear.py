"""Streamed linear probes on plain arrays: brute-force agreement, role targets, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score

from infoprobe.probes.errors import NonFiniteActivationError, ProbeInputError, ResultsFileError
from infoprobe.probes.linear import ProbeTargets, fit_linear_probes
from infoprobe.probes.results import ProbeResults
from infoprobe.probes.split import TEST, TRAIN, make_split
from infoprobe.probes.targets import gather_partner_inputs

N, T, D, E = 1500, 5, 2, 12


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, T, D)).astype(np.float32)
    partner = rng.integers(0, T, size=(N, T))  # content-free random partner per (i, t)
    mix = rng.normal(size=(2, D, E))
    # cell t holds x(t) and x(partner[t]) in mixed coordinates, plus noise
    states = np.einsum("ntd,de->nte", x, mix[0])
    states += np.einsum("ntd,de->nte", gather_partner_inputs(x, partner), mix[1])
    states += 0.05 * rng.normal(size=states.shape)
    return x, partner, states.astype(np.float32), make_split(N, seed=seed)


def _source(states, block=211):
    return lambda: ((i, states[i : i + block]) for i in range(0, len(states), block))


def test_position_probes_agree_with_sklearn_at_the_chosen_alpha():
    x, _, states, split = _data(1)
    fit = fit_linear_probes(
        _source(states),
        ProbeTargets(x, x, np.arange(T)),
        split,
        alphas=(0.01, 1.0, 100.0),
        progress=False,
    )
    for c in (0, 3):
        for s in (0, 3, 4):
            alpha = fit.alpha[c, s]
            model = Ridge(alpha=alpha).fit(states[split == TRAIN, c], x[split == TRAIN, s])
            pred = model.predict(states[split == TEST, c])
            ref = r2_score(x[split == TEST, s], pred, multioutput="variance_weighted")
            assert fit.r2[c, s] == pytest.approx(ref, abs=1e-5)
    assert fit.r2[np.arange(T), np.arange(T)].min() > 0.95  # own position
    np.testing.assert_allclose(fit.per_sample_error.mean(0), fit.nmse, atol=1e-4)
    assert np.abs(fit.shuffled_r2).max() < 0.05


def test_role_targets_per_cell_recover_the_partner():
    x, partner, states, split = _data(2)
    values = gather_partner_inputs(x, partner)[:, :, None, :]  # [n, P=T, G=1, d]
    targets = ProbeTargets(values, x, partner[:, :, None], cell_row=np.arange(T))
    fit = fit_linear_probes(_source(states), targets, split, progress=False)
    assert fit.r2.shape == (T, 1)
    # the partner is linearly present, but mixed with x(t) when partner == t: R² high
    assert fit.r2.min() > 0.7
    assert fit.identification.min() > 0.6  # chance is 1/T = 0.2
    # the fixed-position probe for a content-free partner stays low (it moves per sample)
    pos = fit_linear_probes(
        _source(states), ProbeTargets(x, x, np.arange(T)), split, second_pass=False, progress=False
    )
    off = pos.r2[~np.eye(T, dtype=bool)]
    assert off.max() < 0.3


def test_bad_blocks_are_refused():
    x, _, states, split = _data(3)
    targets = ProbeTargets(x, x, np.arange(T))
    bad = states.copy()
    bad[700, 2, 5] = np.nan
    with pytest.raises(NonFiniteActivationError, match=r"\(700, 2, 5\)"):
        fit_linear_probes(_source(bad), targets, split, progress=False)
    shuffled_blocks = lambda: iter([(211, states[211:422]), (0, states[:211])])  # noqa: E731
    with pytest.raises(ProbeInputError, match="in order"):
        fit_linear_probes(shuffled_blocks, targets, split, progress=False)
    with pytest.raises(ProbeInputError, match="expected 1500 samples"):
        fit_linear_probes(lambda: iter([(0, states[:500])]), targets, split, progress=False)


def test_results_reader_refuses_foreign_files(tmp_path):
    with pytest.raises(ResultsFileError, match="no such"):
        ProbeResults.read(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("hello")
    with pytest.raises(ResultsFileError, match="not an HDF5"):
        ProbeResults.read(tmp_path / "text.h5")
    import h5py

    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["data"] = [1, 2]
    with pytest.raises(ResultsFileError, match="schema_version"):
        ProbeResults.read(tmp_path / "other.h5")
    res = ProbeResults(T=2, d=1, layers=[0], sites=["s"])
    res.scores[("positions", "linear", "none", "r2")] = np.zeros((1, 3, 2))
    res.write(tmp_path / "new.h5")
    with h5py.File(tmp_path / "new.h5", "a") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(ResultsFileError, match="is 99"):
        ProbeResults.read(tmp_path / "new.h5")
