"""The critic never fails in silence: every cell's fit judged, refit when it failed,
flagged when it still fails.

A planted model of known per-sample truth (tests/handset.py, T = 8, d = 2): head 0 copies
the content-selected x(p(t)) with no tag of its position, head 1 copies x((t + 3) mod T)
into data token t and x(5) into CLS. At layer 1 every data token's state holds its own
x(t), x(p(t)) and x((t + 3) mod T). The critic must find the content-selected key in every
data-token cell, for several probe seeds and learning rates, and flag nothing; a state
that holds only its own input is an empty cell, not a failure; a fit forced to fail is
flagged in the results file, by `probe`, by `compare` and in the report.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from handset import handset_model, near_ties, true_partners, true_sets

from infoprobe.hooks import capture, layer_sites
from infoprobe.probes.critic import critic_members, fit_critic_probe
from infoprobe.probes.families import family
from infoprobe.probes.refits import FAILURES
from infoprobe.probes.split import TEST, TRAIN, VAL, make_split

CRITIC_BUDGET = family("critic").default_budget()

T, D, POSITION, OFFSET, N = 8, 2, 5, 3, 4096
EMPTY = 4
"""The token whose layer-1 state is replaced by its layer-0 state in the empty variant."""

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def planted():
    """Inputs, layer-0 and layer-1 states ``[n, T+1, E]`` and the split."""
    torch.set_num_threads(1)
    model = handset_model(T=T, d=D, position=POSITION, offset=OFFSET)
    x = np.random.default_rng(0).standard_normal((N, T, D)).astype(np.float32)
    names = layer_sites(1)
    states = capture(model, torch.as_tensor(x), names)
    split = make_split(N, seed=0)
    idx = [np.flatnonzero(split == s) for s in (TRAIN, VAL, TEST)]
    return x, states[names[0]].numpy(), states[names[1]].numpy(), idx


def layer_one_scores(member: np.ndarray, test: np.ndarray):
    """(precision, recall over all cells, s != t; content-key recall per data token) of
    per-sample sets ``[n_test, T+1, T]`` at layer 1, near-tie queries left out and the
    key counted only where it is not also the position head's."""
    truth = true_sets(test, position=POSITION, offset=OFFSET)[1, ..., :T]
    clean = ~near_ties(test)
    keep = clean[:, :, None] & ~np.eye(T + 1, T, dtype=bool)[None]
    hits = (member & truth)[keep].sum()
    precision, recall = hits / max(member[keep].sum(), 1), hits / truth[keep].sum()
    partner = true_partners(test)
    key = []
    for t in range(T):
        rows = np.flatnonzero(clean[:, t] & (partner[:, t] != (t + OFFSET) % T))
        key.append(member[rows, t, partner[rows, t]].mean())
    return precision, recall, np.array(key)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lr_factor", [1, 3], ids=["lr", "3lr"])
def test_every_content_key_is_found_whatever_the_seed_and_learning_rate(planted, seed, lr_factor):
    x, _, layer1, idx = planted
    budget = dataclasses.replace(CRITIC_BUDGET, seed=seed, lr=CRITIC_BUDGET.lr * lr_factor)
    fit = fit_critic_probe(layer1, x, *idx, budget=budget, progress=False)
    precision, recall, key = layer_one_scores(critic_members(fit.p_value), x[idx[2]])
    keys = np.round(key, 3).tolist()
    print(f"\nseed {seed}, lr x{lr_factor}: P {precision:.3f} R {recall:.3f}; content-key "
          f"recall per token {keys}; starts {fit.starts.tolist()}")  # fmt: skip
    assert key.min() >= 0.95 and precision >= 0.95 and recall >= 0.95
    assert not fit.failures.any(), fit.failures


def test_a_state_that_holds_only_its_own_input_is_empty_not_failed(planted):
    x, layer0, layer1, idx = planted
    states = layer1.copy()
    states[:, EMPTY] = layer0[:, EMPTY]  # both heads' outputs zeroed for this token
    fit = fit_critic_probe(states, x, *idx, budget=CRITIC_BUDGET, progress=False)
    member = critic_members(fit.p_value)  # [n_test, T+1, T]
    others = np.delete(member[:, EMPTY], EMPTY, axis=1)
    assert others.mean() <= 0.01  # nothing marked off its own position
    assert member[:, EMPTY, EMPTY].mean() >= 0.95  # its own x(t) is found
    assert fit.failures[EMPTY] == 0 and not fit.failures.any()


def test_a_fit_cut_to_one_epoch_is_refit_then_flagged(planted):
    x, _, layer1, idx = planted
    budget = dataclasses.replace(CRITIC_BUDGET, epochs=1)
    fit = fit_critic_probe(layer1, x, *idx, budget=budget, progress=False)
    # every data token's state holds its own x(t) linearly; one epoch does not learn it
    assert all(fit.failures[:T] & 1 << FAILURES.index("below_linear"))
    assert (fit.starts[fit.failures != 0] == 3).all()  # refit twice, kept, flagged
    stats = fit.validation_statistics  # [C, 4, S]: the reference tells own x(t) apart
    assert (stats[np.arange(T), 3, np.arange(T)] >= 0.75).all()


def test_a_failed_fit_is_flagged_in_the_file_by_probe_compare_and_the_report(
    planted, tmp_path, capsys
):
    from infoprobe.cli import main
    from infoprobe.hooks import write_cache
    from infoprobe.pipeline.given_sets import sets_for_cache
    from infoprobe.probes.results import ProbeResults

    x = planted[0][:2100]
    model = handset_model(T=T, d=D, position=POSITION, offset=OFFSET)
    spec = {"n": len(x), "task": None, "inputs": {"file": "x.npy", "sha256": "0" * 64}}
    acts = tmp_path / "acts.h5"
    write_cache(acts, model, lambda b, size: (x[b * 700 : b * 700 + size], np.zeros((size, 1))),
                n=len(x), batch_size=700, sites="residual", progress=False,
                provenance={"model_config": model.cfg.to_dict(), "data_spec": spec})  # fmt: skip
    np.save(tmp_path / "true.npy", true_sets(x, position=POSITION, offset=OFFSET)[..., :T])
    sets_for_cache(tmp_path / "true.npy", acts, tmp_path / "pred.h5")
    probes = tmp_path / "probes.h5"
    argv = ["probe", str(acts), "--probe", "critic", "--epochs", "1", "--quiet", "--threads",
            "1", "--out", str(probes)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    codes = ProbeResults.read(probes).scores[("positions", "critic", "none", "fit_failure")]
    flagged = np.argwhere((codes != 0).any(axis=-1))  # [[layer, token], ...]
    assert len(flagged) and [1, 0] in flagged.tolist()  # layer 1's data tokens among them
    assert f"{len(flagged)} still failed (flagged: layer" in printed
    out = tmp_path / "comparison.json"
    assert main(["compare", str(tmp_path / "pred.h5"), str(probes), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"decodability: {len(flagged)} cell fit(s) failed after restarts" in printed
    assert "AUROC without them" in printed
    written = json.loads(out.read_text())["flagged_fits"]["decodability"]
    assert written["cells"] == flagged.tolist()
    report = tmp_path / "report"
    assert main(["report", str(tmp_path / "pred.h5"), str(probes), "--out", str(report)]) == 0
    summary = json.loads((report / "summary.json").read_text())
    assert summary["flagged_fits"]["decodability"]["cells"] == flagged.tolist()
    page = (report / "report.html").read_text()
    assert "Probe fits that failed" in page and "below_linear" in page


@pytest.mark.parametrize("family", ["mlp", "query"])
def test_an_mlp_or_query_fit_below_the_linear_reference_is_refit_then_flagged(family):
    from infoprobe.probes import TrainingBudget
    from infoprobe.probes.mlp import fit_mlp_probes
    from infoprobe.probes.query import fit_query_probe

    rng = np.random.default_rng(5)
    n, C, E, k = 1200, 3, 6, 2
    X = rng.normal(size=(n, C, E)).astype(np.float32)
    Y = np.stack([X[:, 0, :k], X[:, 1, 2 : 2 + k]], axis=1)  # cells 0 and 1 hold a target
    Y = (Y + 0.1 * rng.normal(size=Y.shape)).astype(np.float32)  # cell 2 holds neither
    order = rng.permutation(n)
    splits = np.sort(order[:800]), np.sort(order[800:1000]), np.sort(order[1000:])
    fit_fn = fit_mlp_probes if family == "mlp" else fit_query_probe
    short = TrainingBudget(epochs=1, lr=1e-4)
    cut = fit_fn(X, Y, *splits, hidden=16, budget=short, progress=False)
    failed = cut.engine.failures.reshape(C, -1).any(axis=1)
    assert failed[:2].all() and not failed[2]  # an empty cell is a result, not a failure
    assert (cut.engine.starts == [3, 3, 1]).all()
    good = fit_fn(X, Y, *splits, hidden=16, budget=TrainingBudget(lr=1e-2), progress=False)
    assert not good.engine.failures.any() and (good.engine.starts == 1).all()


@pytest.mark.parametrize("family", ["mlp", "query"])
def test_an_mlp_or_query_probe_of_an_empty_state_is_a_result_not_a_failure(family):
    """A state that holds nothing of its targets (here a constant one) can be read no
    better than the training mean: a probe that starts there and stays is not flagged,
    while the probes of an informative state beside it train as usual."""
    from infoprobe.probes.mlp import fit_mlp_probes
    from infoprobe.probes.query import fit_query_probe

    rng = np.random.default_rng(3)
    n, S, k = 900, 16, 2
    Y = rng.normal(size=(n, S, k)).astype(np.float32)
    X = np.zeros((n, 2, 6), dtype=np.float32)  # cell 0: constant (the CLS token at layer 0)
    X[:, 1] = np.tanh(Y[:, :3].reshape(n, -1)) + 0.1 * rng.normal(size=(n, 6))
    order = rng.permutation(n)
    splits = np.sort(order[:600]), np.sort(order[600:750]), np.sort(order[750:])
    # validation means off the training means, as sampling makes them: from some starts
    # every step towards the training mean moves away from the validation mean
    Y[splits[1]] += 0.15
    fit_fn = fit_mlp_probes if family == "mlp" else fit_query_probe
    fit = fit_fn(X, Y, *splits, hidden=16, progress=False)
    engine = fit.engine
    assert (engine.failures[0] == 0).all(), engine.failures
    assert (engine.starts[0] == 1) and fit.r2[1].max() > 0.3
    # the mean predictor's loss is what the empty cell's probes reach, to within the margin
    assert (engine.best_val_loss[0] <= engine.mean_val_loss[0] * 1.01).all()
