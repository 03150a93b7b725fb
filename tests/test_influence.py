"""The flow instrument (infoprobe.influence): scores against closed forms and brute force.

Every expected value here is computed independently of the code under test: the hand-set
model's true sets by brute-force argmax (tests/handset.py), state variances with numpy,
perturbed states with one ``run_with_cache`` per (sample, position, draw), Jacobians with
reverse-mode autograd, closed forms of linear maps.

Near-tie tolerance: on the hand-set model a query whose two best head-0 scores differ by
less than ``NEAR_TIE`` = 0.1 (raw x^T M x units; beta = 100 makes the runner-up's weight at
most e^-10 beyond it) is not hard attention, so its true set is not well defined; such
queries are left out of precision and recall (about 8 % of queries at T = 8, d = 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from handset import NEAR_TIE, handset_model, near_ties, true_partners, true_sets
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.base.atomic import OutputExistsError
from infoprobe.checkpoint import load_checkpoint, save_checkpoint
from infoprobe.cli import main
from infoprobe.influence import (
    DEFAULT_FLOW_FRACTION,
    IncompleteInfluenceError,
    InfluenceError,
    InfluenceFileError,
    InfluenceMismatchError,
    InfluenceSettings,
    InfluenceSettingsError,
    flow_sets,
    flow_threshold,
    influence,
    influence_for_cache,
    read_influence,
    write_influence,
)
from infoprobe.influence.sensitivity import capture_tangents
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.tasks import make_task

T, D = 8, 4


pytestmark = pytest.mark.usefixtures("one_thread")


def gaussian(n: int, T: int = T, d: int = D, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, T, d)).astype(np.float32)


def whitened(n: int, T: int, d: int, seed: int = 0) -> np.ndarray:
    """x [n, T, d] whose T·d columns have mean 0 and covariance exactly I (1/n)."""
    z = np.random.default_rng(seed).normal(size=(n, T * d))
    q, _ = np.linalg.qr(z - z.mean(axis=0))
    return (np.sqrt(n) * q).reshape(n, T, d)


def scale(x: np.ndarray) -> float:
    """σ written out: RMS of x minus its per-(position, coordinate) mean."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(((x - x.mean(axis=0)) ** 2).mean()))


def random_model(T: int = 5, d: int = 3, seed: int = 3, **kw) -> InfoFlowTransformer:
    cfg = ModelConfig(
        d_in=d, n_ctx=T, d_model=12, heads=(2, 3), d_mlp=16, pos_encoding="learned", **kw
    )
    return InfoFlowTransformer(cfg, seed=seed).eval()


def precision_recall(observed: np.ndarray, truth: np.ndarray, keep: np.ndarray):
    """Over data positions of kept (sample, token) queries; arrays [L+1, n, T+1, T]."""
    keep = np.broadcast_to(keep[None, :, :, None], truth.shape)
    hit = (observed & truth & keep).sum()
    return hit / (observed & keep).sum(), hit / (truth & keep).sum()


# --- thresholds and settings ---------------------------------------------------------------


def test_threshold_is_a_quarter_of_the_uniform_share():
    assert DEFAULT_FLOW_FRACTION == 0.25
    assert flow_threshold(16) == 0.25 / 16
    assert flow_threshold(8, 0.5) == 0.5 / 8
    scores = np.zeros((2, 3, 5, 4), dtype=np.float32)
    scores[1, 0, 2, 1] = 0.25 / 4  # exactly at the threshold: member
    scores[1, 0, 2, 3] = 0.25 / 4 - 1e-6
    scores[0, 2, 4, 0] = 1.0
    sets = flow_sets(scores)
    assert sets.shape == (2, 3, 5, 5) and sets.dtype == bool
    assert not sets[..., 4].any()  # the CLS column is never measured
    assert {tuple(i) for i in np.argwhere(sets)} == {(1, 0, 2, 1), (0, 2, 4, 0)}


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("directions", 0, ">= 1"),
        ("directions", -3, ">= 1"),
        ("epsilon", 0.0, "(0, 1]"),
        ("epsilon", -0.1, "(0, 1]"),
        ("epsilon", 1e30, "(0, 1]"),  # a jump, not a nudge: fd scores were NaN
        ("epsilon", float("nan"), "finite"),
        ("epsilon", float("inf"), "finite"),
        ("resamples", 0, ">= 1"),
        ("method", "ablate", "one of"),
        ("estimator", "adjoint", "one of"),
        ("block_size", 0, ">= 1"),
    ],
)
def test_settings_refuse_bad_values(field, value, expected):
    with pytest.raises(InfluenceSettingsError) as err:
        InfluenceSettings(**{field: value})
    message = str(err.value)
    assert f"InfluenceSettings.{field}" in message and expected in message
    assert repr(value) in message


# --- the hand-set model: flow sets against the true sets ----------------------------------


@pytest.mark.parametrize("value_rank, position", [(None, 0), (1, 0), (None, 5)])
def test_local_sensitivity_recovers_the_true_sets(value_rank, position):
    """Default settings (exact Jacobian): precision = recall = 1 without near ties.

    With value_rank = 1 head 0 copies only a 1-d projection a^T x(p(t)): flow still marks
    p(t) (a probe of x(p(t)) from the state would fail, flow does not need to decode it).
    """
    x = gaussian(128)
    model = handset_model(T, D, value_rank=value_rank, position=position)
    result = influence(model, x, progress=False)
    assert result.scores.shape == (2, 128, T + 1, T)
    truth, keep = true_sets(x, position=position)[..., :T], ~near_ties(x, NEAR_TIE)
    assert keep.mean() > 0.85  # the tolerance leaves most queries in
    precision, recall = precision_recall(result.sets()[..., :T], truth, keep)
    assert precision == 1.0 and recall == 1.0
    partners = true_partners(x)
    i, t = np.nonzero(keep)
    assert (result.sets()[1, i, t, partners[i, t]]).all()


def test_resample_ablation_marks_a_superset():
    """Resample ablation also marks keys that only took part in head 0's selection.

    Exact superset on the routes without selection (own position, head 1's position); on
    the retrieved key p(t) a redrawn x(p(t)) that loses the argmax hands slot A to the
    runner-up, and when the runner-up's vector is close to x(p(t)) the state barely moves:
    the ablation's own misses, a small share (recall on p(t) >= 0.97 with R = 8).
    """
    x = gaussian(128)
    result = influence(
        handset_model(T, D), x, InfluenceSettings(method="resample", resamples=8), progress=False
    )
    observed, truth = result.sets()[..., :T], true_sets(x)[..., :T]
    keep = ~near_ties(x, NEAR_TIE)
    fixed = np.zeros_like(truth)
    fixed[:, :, np.arange(T), np.arange(T)] = True  # own position
    fixed[1, :, :, 0] = True  # head 1 reads position 0
    assert observed[fixed].all()
    partners = true_partners(x)
    i, t = np.nonzero(keep)
    assert observed[1, i, t, partners[i, t]].mean() >= 0.97
    extra = (observed & ~truth)[1] & keep[:, :, None]
    assert extra.any(axis=(1, 2)).mean() >= 0.5  # strictly larger on most samples
    assert not extra[:, :, :].all()  # ... but not everything
    local = influence(handset_model(T, D), x, progress=False).sets()[..., :T]
    assert (observed | ~local)[1][keep].mean() > 0.99  # resample ⊇ local, up to its misses


# --- batched computation against brute force ----------------------------------------------


def brute_states(model, x: np.ndarray) -> list[np.ndarray]:
    """States [L+1][T+1, E] of one sample x [T, d] from run_with_cache."""
    L = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{k}.hook_resid_post" for k in range(L)]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor(x[None], dtype=torch.float32))
    return [cache[name][0].double().numpy() for name in names]


def brute_variance(model, x: np.ndarray) -> np.ndarray:
    states = np.stack([np.stack(brute_states(model, xi)) for xi in x], axis=1)
    return states.var(axis=1).sum(axis=-1)  # [L+1, T+1]


@pytest.mark.parametrize("method", ["fd", "resample"])
def test_batched_pass_equals_a_brute_force_loop(method):
    """One forward per (sample, position, draw), draws from default_rng([seed, block])."""
    model, n, Tm, d = random_model(), 6, 5, 3
    x = gaussian(n, Tm, d, seed=1)
    settings = InfluenceSettings(
        method="resample" if method == "resample" else "local",
        estimator="fd",
        directions=2,
        epsilon=0.1,
        resamples=2,
        seed=5,
        block_size=4,
    )
    result = influence(model, x, settings, progress=False)
    v, sigma = brute_variance(model, x), scale(x)
    np.testing.assert_allclose(result.state_variance, v, rtol=1e-5)
    expected = np.zeros(result.scores.shape)
    for block, (lo, hi) in enumerate([(0, 4), (4, 6)]):
        rng = np.random.default_rng([5, block])
        if method == "fd":
            draws = rng.standard_normal((hi - lo, Tm, 2, d))
        else:
            draws = rng.integers(0, n - 1, size=(hi - lo, Tm, 2))
        for i in range(lo, hi):
            base = brute_states(model, x[i])
            for s in range(Tm):
                for k in range(2):
                    moved = x[i].copy()
                    if method == "fd":
                        moved[s] = x[i, s] + (0.1 * sigma * draws[i - lo, s, k]).astype(np.float32)
                    else:
                        j = draws[i - lo, s, k]
                        j = j + (j >= i)
                        assert j != i
                        moved[s] = x[j, s]
                    for layer, h in enumerate(brute_states(model, moved)):
                        sq = ((h - base[layer]) ** 2).sum(axis=-1)  # [T+1]
                        expected[layer, i, :, s] += sq / 2
    norm = 0.01 * sigma**2 if method == "fd" else 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = expected / (norm * v[:, None, :, None])
    expected[0, :, Tm] = 0  # CLS at layer 0 is constant: v = 0 → 0
    np.testing.assert_allclose(result.scores, expected, rtol=2e-3, atol=1e-6)


def test_jacobian_equals_reverse_mode_autograd():
    model, n, Tm, d = random_model(), 3, 5, 3
    x = gaussian(n, Tm, d, seed=2)
    result = influence(model, x, InfluenceSettings(block_size=2), progress=False)
    v, sigma = brute_variance(model, x), scale(x)
    for layer in range(3):
        for i in range(n):

            def state(xi, layer=layer):
                return model(xi[None], stop_at_layer=layer)[0]

            jac = torch.autograd.functional.jacobian(state, torch.tensor(x[i]))  # [T+1,E,T,d]
            frob = jac.double().pow(2).sum(dim=(1, 3)).numpy()  # [T+1, T]
            with np.errstate(divide="ignore", invalid="ignore"):
                want = np.where(v[layer][:, None] > 0, sigma**2 * frob / v[layer][:, None], 0)
            np.testing.assert_allclose(result.scores[layer, i], want, rtol=1e-4, atol=1e-7)


def test_fd_agrees_with_forward_mode_and_converges_to_the_jacobian():
    model = random_model(T=6, d=3).double()
    x = torch.tensor(gaussian(4, 6, 3, seed=4), dtype=torch.float64)
    u = torch.tensor(gaussian(4, 6, 3, seed=5), dtype=torch.float64)
    names = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    jvp = capture_tangents(model, x, u, names)
    eps = 1e-5
    for name in names:
        with torch.no_grad():
            _, up = model.run_with_cache(x + eps * u, names_filter=name)
            _, down = model.run_with_cache(x - eps * u, names_filter=name)
        fd = (up[name] - down[name]) / (2 * eps)
        torch.testing.assert_close(jvp[name], fd, rtol=1e-6, atol=1e-8)
    model = random_model(T=6, d=3).float()
    xs = gaussian(24, 6, 3, seed=6)
    exact = influence(model, xs, progress=False).scores
    errors = []
    for K in (2, 64):
        fd = influence(
            model, xs, InfluenceSettings(estimator="fd", directions=K, epsilon=1e-3), progress=False
        ).scores
        big = exact > 0.01
        errors.append(np.abs(fd[big] - exact[big]).mean() / exact[big].mean())
    assert errors[1] < 0.1 and errors[1] < errors[0] / 3  # ~ 1/sqrt(K) convergence


# --- closed forms ------------------------------------------------------------------------


def test_layer0_closed_form():
    """Layer 0 is x(t) W_E + pos(t): g(t, t) = σ² ‖W_E‖_F² / tr(W_Eᵀ Cov_t W_E), others 0.

    With whitened inputs (Cov_t = σ² I) that is exactly 1: own position 1, others 0.
    """
    model, Tm, d = random_model(T=6, d=3), 6, 3
    W = model.embed.W_E.detach().double().numpy()
    for x in (whitened(64, Tm, d), gaussian(64, Tm, d) * np.array([1.0, 2.0, 0.5])):
        g = influence(model, x, progress=False).scores[0]  # [n, T+1, T]
        x64 = np.asarray(x, dtype=np.float64)
        for t in range(Tm):
            cov = np.cov(x64[:, t].T, bias=True)
            want = scale(x) ** 2 * (W**2).sum() / np.trace(W.T @ cov @ W)
            np.testing.assert_allclose(g[:, t, t], want, rtol=1e-5)
        off = ~np.eye(Tm, dtype=bool)
        assert (g[:, :Tm][:, off] == 0).all() and (g[:, Tm] == 0).all()
    np.testing.assert_allclose(influence(model, whitened(64, Tm, d), progress=False).scores[0][
        :, np.arange(Tm), np.arange(Tm)], 1.0, rtol=1e-5)  # fmt: skip


class LinearToy(HookedRootModule):
    """h(t, 1) = Σ_s x(s) W[t, s] (no attention): a HookedRootModule without stop_at_layer."""

    def __init__(self, T: int, d: int, E: int, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.W_E = nn.Parameter(torch.randn(d, E, generator=gen))
        self.W = nn.Parameter(torch.randn(T + 1, T, d, E, generator=gen))
        self.blocks = nn.ModuleList([nn.Module()])
        self.blocks[0].hook_resid_pre = HookPoint()
        self.blocks[0].hook_resid_post = HookPoint()
        self.setup()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.zeros(x.shape[0], 1, self.W_E.shape[1])
        self.blocks[0].hook_resid_pre(torch.cat([x @ self.W_E, pad], dim=1))
        return self.blocks[0].hook_resid_post(torch.einsum("bsd,tsde->bte", x, self.W))


def test_linear_toy_scores_sum_to_one():
    """For h = Σ_s W_s x(s) on whitened inputs, Σ_s g(t, s) = 1 (every token, CLS too)."""
    Tm, d = 5, 3
    model, x = LinearToy(Tm, d, 7), whitened(96, Tm, d)
    exact = influence(model, x, progress=False).scores
    np.testing.assert_allclose(exact[1].sum(axis=-1), 1.0, rtol=1e-5)
    W = model.W.detach().double().numpy()
    share = (W**2).sum(axis=(2, 3)) / (W**2).sum(axis=(1, 2, 3))[:, None]  # [T+1, T]
    np.testing.assert_allclose(exact[1], np.broadcast_to(share, exact[1].shape), rtol=1e-4)
    fd = influence(
        model, x, InfluenceSettings(estimator="fd", directions=16), progress=False
    ).scores
    assert abs(fd[1].sum(axis=-1).mean() - 1) < 0.05
    resampled = influence(
        model, x, InfluenceSettings(method="resample", resamples=16), progress=False
    ).scores
    assert abs(resampled[1].sum(axis=-1).mean() - 1) < 0.05  # the factor 2: same scale


# --- the file: resume, refusals -------------------------------------------------------------


class Stop(Exception):
    pass


def stop_after(blocks: int):
    seen = []

    def on_block(n_committed: int) -> None:
        seen.append(n_committed)
        if len(seen) == blocks:
            raise Stop

    return on_block


def dataset_bytes(path: Path) -> dict[str, bytes]:
    with h5py.File(path, "r") as f:
        out = {name: f[name][()].tobytes() for name in f}
        out.update({f"@{k}": repr(v).encode() for k, v in f.attrs.items() if k != "created"})
    return out


FD = InfluenceSettings(estimator="fd", directions=3, block_size=8, seed=2)


def test_interrupted_run_resumes_to_identical_bytes(tmp_path):
    model, x = random_model(), gaussian(36, 5, 3, seed=7)
    whole = write_influence(tmp_path / "whole.h5", model, x, FD, {"run": 1}, progress=False)
    part = tmp_path / "part.h5"
    with pytest.raises(Stop):
        write_influence(part, model, x, FD, {"run": 1}, progress=False, on_block=stop_after(2))
    with pytest.raises(IncompleteInfluenceError, match="n_committed=16 of n=36"):
        read_influence(part)
    partial = read_influence(part, allow_incomplete=True)
    assert partial.n_committed == 16 and partial.scores.shape[1] == 16
    assert partial.aggregate is None
    resumed = write_influence(part, model, x, FD, {"run": 1}, progress=False)
    assert dataset_bytes(part) == dataset_bytes(tmp_path / "whole.h5")
    np.testing.assert_array_equal(resumed.scores, whole.scores)
    np.testing.assert_allclose(whole.aggregate, whole.scores.mean(axis=1, dtype=np.float64))
    with h5py.File(part, "r") as f:
        assert list(f.attrs["axes"]) == ["layer", "sample", "token", "position"]
        assert [dim.label for dim in f["scores"].dims] == ["layer", "sample", "token", "position"]
        assert f["scores"].chunks[1] <= 8 and f["scores"].dtype == np.float32
        assert f["sample_index"][()].tolist() == list(range(36))
        assert f.attrs["format"] == "infoprobe.influence" and f.attrs["schema_version"] == 2
        assert json.loads(f.attrs["settings"])["block_size"] == 8
        assert json.loads(f.attrs["provenance"])["run"] == 1
        assert f.attrs["input_scale"] == pytest.approx(scale(x))
    # an uninterrupted file of the same run is not silently redone
    with pytest.raises(OutputExistsError, match="already exists"):
        write_influence(part, model, x, FD, {"run": 1}, progress=False)


def test_resume_refuses_other_settings_or_provenance(tmp_path):
    model, x = random_model(), gaussian(20, 5, 3, seed=8)
    out = tmp_path / "flow.h5"
    with pytest.raises(Stop):
        write_influence(out, model, x, FD, {"run": 1}, progress=False, on_block=stop_after(1))
    before = dataset_bytes(out)
    other = InfluenceSettings(estimator="fd", directions=4, block_size=8, seed=2)
    with pytest.raises(
        InfluenceMismatchError, match=r"settings\.directions: file has 3, this run has 4"
    ):
        write_influence(out, model, x, other, {"run": 1}, progress=False)
    with pytest.raises(
        InfluenceMismatchError, match=r"provenance\.run: file has 1, this run has 2"
    ):
        write_influence(out, model, x, FD, {"run": 2}, progress=False)
    with pytest.raises(InfluenceMismatchError, match=r"provenance\.inputs_sha256"):
        write_influence(out, model, x[::-1].copy(), FD, {"run": 1}, progress=False)
    assert dataset_bytes(out) == before


def test_refusals_leave_nothing_under_the_output_name(tmp_path):
    model, x = random_model(), gaussian(10, 5, 3)
    out = tmp_path / "flow.h5"
    bare = nn.Linear(3, 3)
    with pytest.raises(InfluenceError, match="hook_resid_pre"):
        write_influence(out, LinearToyWithoutSites(), x, progress=False)
    with pytest.raises(InfluenceError, match="HookedRootModule"):
        write_influence(out, bare, x, progress=False)
    broken = random_model()
    with torch.no_grad():
        broken.blocks[0].attn.W_O[0, 0, 0] = float("nan")
    with pytest.raises(InfluenceError, match=r"layer 1 \(blocks\.0\.hook_resid_post\), sample 0, "):
        write_influence(out, broken, x, progress=False)
    bad_x = x.copy()
    bad_x[3, 2, 1] = np.inf
    with pytest.raises(InfluenceError, match="sample 3, position 2, coordinate 1"):
        write_influence(out, model, bad_x, progress=False)
    assert not out.exists() and not list(tmp_path.iterdir())
    foreign = tmp_path / "notes.h5"
    with h5py.File(foreign, "w") as f:
        f.attrs["format"] = "infoprobe.activation-cache"
    before = foreign.read_bytes()
    for overwrite in (False, True):
        with pytest.raises(InfluenceFileError, match="not an influence file"):
            write_influence(foreign, model, x, overwrite=overwrite, progress=False)
    assert foreign.read_bytes() == before
    with pytest.raises(InfluenceFileError, match="not an influence file"):
        read_influence(foreign)


class LinearToyWithoutSites(HookedRootModule):
    def __init__(self):
        super().__init__()
        self.hook_x = HookPoint()
        self.setup()

    def forward(self, x):
        return self.hook_x(x)


# --- checkpoint + cache, and the CLI ---------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A saved random-init checkpoint, its cache, a control cache and a foreign cache."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("flow")
    task = make_task("intrinsic-dim", T=6, D=2, seed=0)
    cfg = ModelConfig(
        d_in=task.d, n_ctx=task.T, d_model=12, heads=(2, 2), d_mlp=16, d_readout=8,
        d_out=task.d_out,
    )  # fmt: skip
    for name, seed in (("ckpt", 7), ("other", 8)):
        save_checkpoint(root / name, InfoFlowTransformer(cfg, seed=seed), task)
    options = dict(n=24, sites="layers", batch_size=12, progress=False)
    cache_checkpoint(root / "ckpt", root / "acts.h5", **options)
    cache_checkpoint(root / "ckpt", root / "random.h5", random_init_seed=1, **options)
    cache_checkpoint(root / "other", root / "other.h5", **options)
    return root


def test_cli_end_to_end(run_dir, tmp_path, capsys):
    out = tmp_path / "influence.h5"
    rc = main(["influence", str(run_dir / "ckpt"), "--cache", str(run_dir / "acts.h5"),
               "--out", str(out), "--n", "20", "--block-size", "8", "--quiet"])  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out
    assert "own position" in printed and "other positions" in printed
    assert printed.count("\n") >= 6  # header, 3 layer rows, results
    ck = load_checkpoint(run_dir / "ckpt")
    flow = read_influence(out)
    assert flow.complete and flow.scores.shape == (3, 20, 7, 6) and flow.n == 20
    with h5py.File(run_dir / "acts.h5", "r") as f:
        x = f["inputs/x"][:20]
    expected = influence(ck.model, x, InfluenceSettings(block_size=8), progress=False)
    np.testing.assert_array_equal(flow.scores, expected.scores)
    prov = flow.provenance
    assert prov["cache_path"] == str((run_dir / "acts.h5").resolve())
    assert prov["cache"]["checkpoint_sha256"] == ck.weights_sha256
    assert prov["cache"]["data_spec"]["n"] == 24
    assert prov["checkpoint_sha256"] == ck.weights_sha256 and prov["random_init_seed"] is None
    assert len(prov["inputs_sha256"]) == 64 and len(prov["model_state_sha256"]) == 64
    # random-init control on the control cache of the same checkpoint
    control = influence_for_cache(
        run_dir / "ckpt", run_dir / "random.h5", tmp_path / "control.h5",
        random_init_seed=1, n=12, progress=False,
        settings=InfluenceSettings(method="resample"),
    )  # fmt: skip
    assert control.provenance["random_init_seed"] == 1
    assert control.provenance["model_state_sha256"] != prov["model_state_sha256"]
    assert control.provenance["inputs_sha256"] != prov["inputs_sha256"]  # n differs


def test_cli_help_teaches_both_questions(capsys):
    with pytest.raises(SystemExit):
        main(["influence", "--help"])
    text = capsys.readouterr().out
    for phrase in ("local sensitivity", "resample ablation", "examples:", "--random-init"):
        assert phrase in text


def cli(run_dir, out, *extra: str, cache: str = "acts.h5") -> int:
    argv = ["influence", str(run_dir / "ckpt"), "--cache", str(run_dir / cache),
            "--out", str(out), "--n", "8", "--quiet", *extra]  # fmt: skip
    try:
        return main(argv)
    except SystemExit as exit_info:  # argparse refuses a bad option value itself
        return exit_info.code


@pytest.mark.parametrize(
    "extra, cache, message",
    [
        ((), "other.h5", "checkpoint_sha256"),
        (("--directions", "0", "--estimator", "fd"), "acts.h5", "--directions"),
        (("--epsilon", "0", "--estimator", "fd"), "acts.h5", "--epsilon"),
        (("--epsilon=-1e-3",), "acts.h5", "--epsilon"),
        (("--epsilon", "nan"), "acts.h5", "--epsilon"),
        (("--epsilon", "1e30", "--estimator", "fd"), "acts.h5", "epsilon"),
        (("--resamples", "0", "--method", "resample"), "acts.h5", "--resamples"),
        (("--n", "99"), "acts.h5", "between 1 and the 24 samples"),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(run_dir, tmp_path, capsys, extra, cache, message):
    out = tmp_path / "flow.h5"
    assert cli(run_dir, out, *extra, cache=cache) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_refuses_existing_and_foreign_outputs(run_dir, tmp_path, capsys):
    out = tmp_path / "flow.h5"
    assert cli(run_dir, out) == 0
    before = out.read_bytes()
    assert cli(run_dir, out) == 2
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == before
    assert cli(run_dir, out, "--overwrite", "--method", "resample") == 0
    assert read_influence(out).settings.method == "resample"
    foreign = tmp_path / "acts-copy.h5"
    foreign.write_bytes((run_dir / "acts.h5").read_bytes())
    assert cli(run_dir, foreign, "--overwrite") == 2
    assert "not an influence file" in capsys.readouterr().err
    assert foreign.read_bytes() == (run_dir / "acts.h5").read_bytes()
