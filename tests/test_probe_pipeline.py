"""End to end on caches: planted mechanisms (exact ground truth), controls, bad input.

The planted model has hand-set weights implementing a known program: one head attends by
position to t-1 (token 0 to CLS, CLS to T-1) and copies x into its own subspace, so the
information sets are exactly I(t,0) = {t}, I(t,1) = {t-1, t} (t ≥ 1), I(0,1) = {0},
I(CLS,1) = {T-1}.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from infoprobe.hooks import open_cache, write_cache
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.probing import ProbeSettings, probe_cache, run_probe
from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.errors import (
    ControlMismatchError,
    MissingSiteError,
    NonFiniteActivationError,
    SplitTooSmallError,
)
from infoprobe.probes.observed import Thresholds
from infoprobe.probes.results import ProbeResults

T, D, E, N = 6, 2, 16, 1200
SETTINGS = ProbeSettings(block_size=256)


def planted_config() -> ModelConfig:
    return ModelConfig(
        d_in=D, n_ctx=T, d_model=E, heads=(1,), pos_encoding="learned", d_mlp=0, d_readout=4
    )


def planted_model(beta: float = 80.0) -> InfoFlowTransformer:
    """Head 0 of block 0 attends from t to t-1 (mod T+1) and writes x into dims 9..10."""
    model = InfoFlowTransformer(planted_config(), seed=0)
    out_dims = D + T + 1
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.W_E[:, :D] = torch.eye(D)
        for p in range(T + 1):
            model.pos_embed.W_pos[p, D + p] = 1.0
        attn = model.blocks[0].attn
        for p in range(T + 1):
            attn.W_Q[0, D + p, p] = beta
            attn.W_K[0, D + p, (p + 1) % (T + 1)] = 1.0
        for j in range(D):
            attn.W_V[0, j, j] = 1.0
            attn.W_O[0, j, out_dims + j] = 1.0
    return model.eval()


def expected_sets() -> np.ndarray:
    """bool [L+1, T+1, T+1] of the planted program."""
    sets = np.zeros((2, T + 1, T + 1), dtype=bool)
    for t in range(T):
        sets[0, t, t] = sets[1, t, t] = True
        if t >= 1:
            sets[1, t, t - 1] = True
    sets[1, T, T - 1] = True
    return sets


def make_cache(
    path, model, *, seed=0, n=N, x_fn=None, sites="residual,attention", random_init_seed=None
):
    def batch_fn(b, size):
        rng = np.random.default_rng([seed, b])
        x = rng.normal(size=(size, T, D)).astype(np.float32)
        if x_fn is not None:
            x = x_fn(b, x)
        return x, x.sum(axis=(1, 2))[:, None].astype(np.float32)

    provenance = {
        "checkpoint_sha256": None,
        "model_config": model.cfg.to_dict(),
        "data_spec": {"task": "gaussian-test", "n": n, "data_seed": seed, "batch_size": 200},
        "random_init_seed": random_init_seed,
    }
    write_cache(
        path,
        model,
        batch_fn,
        n=n,
        batch_size=200,
        sites=sites,
        provenance=provenance,
        progress=False,
    )
    return path


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    trained = make_cache(root / "planted.h5", planted_model())
    control = make_cache(
        root / "random.h5", InfoFlowTransformer(planted_config(), seed=3), random_init_seed=3
    )
    return trained, control


@pytest.fixture(scope="module")
def planted_results(caches):
    trained, control = caches
    return probe_cache(trained, control_path=control, settings=SETTINGS, progress=False)


def test_planted_mechanism_recovered_with_precision_and_recall_one(planted_results):
    observed = planted_results.observed[("positions", "aggregate")]
    np.testing.assert_array_equal(observed, expected_sets())


def test_residual_token_decodable_and_others_not(planted_results):
    r2 = planted_results.score("r2")
    own = r2[0, np.arange(T), np.arange(T)]
    assert own.min() > 0.999
    off = r2[0, :T][~np.eye(T, dtype=bool)]
    assert np.abs(off).max() < 0.05
    ident = planted_results.score("identification")
    assert ident[0, np.arange(T), np.arange(T)].min() == 1.0


def test_controls_behave(planted_results):
    shuffled = planted_results.score("r2", control="shuffled")
    assert np.abs(shuffled).max() < 0.05
    random = planted_results.score("r2", control="random_init")
    # a random network keeps x(t) in the residual stream: the baseline is high there
    assert random[0, np.arange(T), np.arange(T)].min() > 0.99
    sel = planted_results.score("r2", control="selectivity")
    np.testing.assert_allclose(
        sel, planted_results.score("r2") - np.fmax(shuffled, random), atol=1e-12
    )


def test_per_sample_sets_follow_the_planted_program(planted_results, caches):
    per_sample = planted_results.observed[("positions", "per_sample")][..., :T]
    truth = np.broadcast_to(expected_sets()[:, None, :, :T], per_sample.shape)
    assert per_sample[truth].mean() > 0.999  # recall
    # The one per-sample rule: the error over the sample's own baseline (the error of
    # predicting the mean on that sample) below tau_sample, computed here by hand.
    errors = planted_results.per_sample[("positions", "linear", "none")]
    with open_cache(caches[0]) as cache:
        x = cache.x[:][planted_results.test_index].astype(np.float64)
    deviation = ((x - x.mean(axis=0)) ** 2).sum(axis=-1)  # [n, T]
    baseline = deviation / deviation.mean(axis=0)
    tau = planted_results.thresholds["tau_sample"]
    np.testing.assert_array_equal(per_sample, errors / baseline[None, :, None, :] < tau)
    # A non-member is predicted by about the mean: its ratio is near 1 on every sample,
    # wherever x(s) lies, so it rarely passes; its raw error (chi2_d / d, Exp(1) at d = 2)
    # passed the former raw rule e < 0.1 in about 1 - exp(-0.1) = 9.5 % of samples.
    false_pass = per_sample[~truth].mean()
    raw_pass = (errors < 0.1)[~truth].mean()
    assert raw_pass == pytest.approx(1 - np.exp(-0.1), abs=0.02)
    assert false_pass < 0.05 and false_pass < raw_pass / 3
    # mean per-sample error equals the aggregate NMSE (definition)
    np.testing.assert_allclose(errors.mean(1), planted_results.score("nmse"), atol=1e-4)


def test_role_targets_follow_the_attended_key(caches):
    trained, control = caches
    res = probe_cache(
        trained,
        control_path=control,
        settings=ProbeSettings(targets="roles", block_size=256),
        progress=False,
    )
    assert res.role_names == ["b0.h0.rank1", "b0.h0.rank2"]
    r2 = res.score("r2", targets="roles")
    data = np.arange(1, T)  # tokens 1..T-1 attend to t-1, a data key
    assert r2[1, data, 0].min() > 0.99  # most attended key is decodable after the head
    assert r2[0, data, 0].max() < 0.05  # ... and not before it (conditional baseline)
    cond = res.score("r2", targets="roles", control="conditional")
    np.testing.assert_allclose(cond[1], r2[0])
    partners = res.role_partners
    np.testing.assert_array_equal(
        partners[:, 0, data], np.broadcast_to(data - 1, (len(partners), T - 1))
    )


def test_results_file_round_trip_and_dataframe(caches, tmp_path):
    trained, control = caches
    out = tmp_path / "probes.h5"
    res = run_probe(trained, out, control_path=control, settings=SETTINGS, progress=False)
    back = ProbeResults.read(out)
    assert set(back.scores) == set(res.scores)
    for key, arr in res.scores.items():
        np.testing.assert_array_equal(back.scores[key], arr)
    np.testing.assert_array_equal(
        back.observed[("positions", "aggregate")], res.observed[("positions", "aggregate")]
    )
    assert back.provenance == res.provenance
    with h5py.File(out) as f:  # readable without infoprobe
        assert list(f["scores/positions/linear/none/r2"].attrs["axes"]) == [
            "layer",
            "token",
            "position",
        ]
    df = back.to_dataframe()
    row = df[
        (df.layer == 1) & (df.t == 3) & (df.s == 2) & (df.metric == "r2") & (df.control == "none")
    ]
    assert row.value.item() == pytest.approx(res.score("r2")[1, 3, 2])
    assert not list(tmp_path.glob("*.tmp-*"))
    with pytest.raises(FileExistsError):
        run_probe(trained, out, settings=SETTINGS, progress=False)


def test_missing_site_lists_present_sites(tmp_path):
    path = make_cache(tmp_path / "attn.h5", planted_model(), n=200, sites="attention")
    with pytest.raises(MissingSiteError, match=r"blocks\.0\.hook_resid_pre.*hook_pattern"):
        probe_cache(path, settings=SETTINGS, progress=False)


def test_control_of_other_architecture_or_data_refused(caches, tmp_path):
    trained, _ = caches
    other = ModelConfig(
        d_in=D, n_ctx=T, d_model=8, heads=(1,), pos_encoding="learned", d_mlp=0, d_readout=4
    )
    wrong_arch = make_cache(
        tmp_path / "arch.h5", InfoFlowTransformer(other, seed=1), random_init_seed=1
    )
    with pytest.raises(ControlMismatchError, match="d_model"):
        probe_cache(trained, control_path=wrong_arch, settings=SETTINGS, progress=False)
    wrong_data = make_cache(
        tmp_path / "data.h5", InfoFlowTransformer(planted_config(), 1), seed=9, random_init_seed=1
    )
    with pytest.raises(ControlMismatchError, match="data_seed"):
        probe_cache(trained, control_path=wrong_data, settings=SETTINGS, progress=False)
    out = tmp_path / "never.h5"
    with pytest.raises(ControlMismatchError):
        run_probe(trained, out, control_path=wrong_arch, settings=SETTINGS, progress=False)
    assert not out.exists() and not list(tmp_path.glob("never.h5*"))


def test_too_few_samples_and_nonfinite_inputs(tmp_path):
    small = make_cache(tmp_path / "small.h5", planted_model(), n=10)
    with pytest.raises(SplitTooSmallError, match="at least"):
        probe_cache(small, settings=SETTINGS, progress=False)

    def poison(b, x):
        if b == 1:
            x[3, 2, 1] = np.inf
        return x

    bad = make_cache(tmp_path / "bad.h5", planted_model(), n=400, x_fn=poison)
    with pytest.raises(NonFiniteActivationError, match=r"inputs/x.*\(203, 2, 1\)"):
        probe_cache(bad, settings=SETTINGS, progress=False)


def test_gate_on_random_init_removes_residual_positions(caches):
    trained, control = caches
    gated = ProbeSettings(block_size=256, thresholds=Thresholds(gate=("shuffled", "random_init")))
    res = probe_cache(trained, control_path=control, settings=gated, progress=False)
    observed = res.observed[("positions", "aggregate")]
    assert not observed[0].any()  # the random net also carries x(t) at layer 0
    assert observed[1, 3, 2]  # the copied neighbour is not in the random net


def test_cli_probe_writes_results_and_prints_summary(caches, tmp_path, capsys):
    from infoprobe.cli import main

    trained, control = caches
    out = tmp_path / "cli.h5"
    code = main(
        [
            "probe",
            str(trained),
            "--control",
            str(control),
            "--out",
            str(out),
            "--block-size",
            "256",
            "--quiet",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "layer 1 (blocks.0.hook_resid_post)" in text and "CLS 1" in text
    res = ProbeResults.read(out)
    np.testing.assert_array_equal(res.observed[("positions", "aggregate")], expected_sets())
    assert main(["probe", str(trained), "--out", str(out), "--quiet"]) == 2  # exists
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("probe", ["mlp", "query"])
def test_mlp_and_query_probes_recover_the_planted_sets(caches, probe):
    trained, _ = caches
    budget = TrainingBudget(epochs=20, batch_size=64, lr=1e-2)
    settings = ProbeSettings(probe=probe, block_size=256, mlp_hidden=16, budget=budget)
    res = probe_cache(trained, settings=settings, progress=False)
    r2 = res.score("r2", probe=probe)
    truth = expected_sets()[..., :T]
    assert r2[truth].min() > 0.9
    assert r2[~truth].max() < 0.3
    assert res.score("r2", probe=probe, control="shuffled").max() < 0.3
    np.testing.assert_array_equal(res.observed[("positions", "aggregate")], expected_sets())
    if probe == "query":
        per_sample = res.observed[("positions", "per_sample")][..., :T]
        assert per_sample[np.broadcast_to(truth[:, None], per_sample.shape)].mean() > 0.9
    # the comparison's view of them: per-sample sets, or one line saying there are none
    from infoprobe.base.errors import CompareInputError
    from infoprobe.compare.instruments import decodability

    with open_cache(trained) as cache:
        x_test = cache.x[:][np.asarray(res.test_index)]
    obs = decodability(res, x_test)
    if probe == "query":
        assert obs.sample_sets().shape == (len(res.layers), len(x_test), T + 1, T)
    else:
        with pytest.raises(CompareInputError, match="probe 'mlp' gives aggregate scores only"):
            obs.sample_sets()
