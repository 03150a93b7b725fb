"""The null rule (infoprobe.compare.null): Benjamini–Hochberg against brute force, at most
q of the cells marked when nothing flows, and exactly the true cells of the hand-set model
against its random-init control."""

from __future__ import annotations

import numpy as np
import pytest
from handset import handset_model, near_ties, true_sets
from quick_reports import blank_figures

from infoprobe.compare.instruments import flow
from infoprobe.compare.null import (
    NULL_Q,
    benjamini_hochberg,
    decodability_null,
    empirical_greater,
    flow_null,
    null_rule,
    sign_test_below,
)
from infoprobe.compare.observations import Observations
from infoprobe.influence import flow_threshold, influence
from infoprobe.pipeline.caching import random_init_model

T, D = 8, 4


def brute_bh(p: np.ndarray, q: float) -> np.ndarray:
    """BH by its definition: reject every p ≤ q·k/m for the largest such k of the sorted p."""
    flat = list(p.ravel())
    m = len(flat)
    ranked = sorted(flat)
    k = max((i + 1 for i in range(m) if ranked[i] <= q * (i + 1) / m), default=0)
    cut = ranked[k - 1] if k else -1.0
    return np.array([x <= cut for x in flat]).reshape(p.shape)


@pytest.mark.parametrize("seed", range(20))
def test_bh_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=(3, 5, 4)) ** rng.uniform(0.5, 4)
    p[rng.uniform(size=p.shape) < 0.2] = 0.01  # ties
    for q in (0.01, 0.05, 0.2):
        np.testing.assert_array_equal(benjamini_hochberg(p, q), brute_bh(p, q))


def test_empirical_and_sign_test_by_hand():
    trained = np.array([0.5, 2.0, -1.0]).reshape(1, 3, 1, 1)
    control = np.array([0.0, 1.0, 0.5, 3.0]).reshape(1, 4, 1, 1)
    # #{control >= value}: 3, 1, 4 → (1 + k) / 5
    np.testing.assert_allclose(empirical_greater(trained, control).ravel(), [0.8, 0.4, 1.0])
    ratio = np.array([0.2, 0.3, 1.0, 1.5, 0.1]).reshape(1, 5, 1, 1)  # 3 of 4 untied below
    np.testing.assert_allclose(sign_test_below(ratio).ravel(), [5 / 16])


def _flow_obs(scores, name="flow", control_of=None):
    return flow(scores, threshold=flow_threshold(T), name=name, control_of=control_of)


@pytest.mark.parametrize("n", [50, 400])
def test_no_flow_marks_at_most_q_of_the_cells(n):
    """Trained and control from one distribution: the share of marked cells, averaged over
    seeds, stays below q (BH under the complete null: P(any mark) ≤ q)."""
    aggregate, per_sample, decodable = [], [], []
    for seed in range(12):
        rng = np.random.default_rng(seed)
        shape = (3, n, T + 1, T)
        trained = rng.gamma(0.5, 0.1, size=shape)
        control = rng.gamma(0.5, 0.1, size=shape)
        found = flow_null(_flow_obs(trained), _flow_obs(control, "c", "flow"))
        aggregate.append(found.aggregate.mean())
        per_sample.append(found.per_sample.mean())
        # decodability without information: x̂ independent of x, symmetric about the mean
        x, x_hat = rng.standard_normal(shape), rng.standard_normal(shape) * 0.3
        ratio = (x_hat - x) ** 2 / x**2
        obs = Observations("decodability", sample_score=ratio)
        decodable.append(decodability_null(obs).aggregate.mean())
    for shares in (aggregate, per_sample, decodable):
        assert np.mean(shares) <= NULL_Q
        assert max(shares) <= 0.2  # no single seed marks many


def test_flow_in_every_cell_is_found():
    rng = np.random.default_rng(0)
    shape = (2, 300, T + 1, T)
    control = rng.gamma(0.5, 0.1, size=shape)
    trained = rng.gamma(0.5, 0.1, size=shape)
    trained[1, :, :, 3] += 0.5
    found = flow_null(_flow_obs(trained), _flow_obs(control, "c", "flow"))
    expected = np.zeros((2, T + 1, T), dtype=bool)
    expected[1, :, 3] = True
    np.testing.assert_array_equal(found.aggregate, expected)


@pytest.fixture(scope="module")
def handset_flow():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = handset_model(T=T, d=D)
    x = np.random.default_rng(1).standard_normal((300, T, D)).astype(np.float32)
    control = random_init_model(model.cfg, seed=0)
    trained = influence(model, x, progress=False)
    untrained = influence(control, x, progress=False)
    return x, _flow_obs(trained.scores), _flow_obs(untrained.scores, "flow (random-init)", "flow")


@pytest.mark.usefixtures("one_thread")
def test_handset_null_rule_marks_exactly_the_true_cells(handset_flow):
    """Off the own position (s ≠ t), the aggregate null rule against the random-init model
    marks exactly the cells carried in every sample: x(0) into every token at layer 1. The
    content-retrieved partner p(t) (a different key in every sample) is in no aggregate
    true set and is not marked. The own position is left out: the untrained model carries
    it too (g = 1 at the embedding in both), so the rule, which asks "carried beyond the
    untrained model", does not mark it.

    Per sample the rule marks no false cell but none of the true ones either: the hand-set
    copy gives g ≈ 0.3, and the untrained model moves the same state more than that in
    3-20 % of the samples at each cell, so no empirical p-value reaches BH's cut."""
    x, trained, control = handset_flow
    found = flow_null(trained, control)
    truth = true_sets(x)[..., :T]  # [2, n, T+1, T]
    others = ~np.eye(T + 1, T, dtype=bool)
    always = truth.all(axis=1) & others
    assert always[1, 1:, 0].all() and always.sum() == T
    np.testing.assert_array_equal(found.aggregate & others, always)
    clean = ~near_ties(x)[None, :, :, None]  # near-tie queries carry their runner-up
    assert not (found.per_sample & ~truth & others & clean).any()
    assert not (found.per_sample & truth & others).any()  # documented limit (docstring)


def test_null_rule_summary_counts(handset_flow):
    x, trained, control = handset_flow
    predicted = true_sets(x)
    found, summary = null_rule({"flow": trained, "flow (random-init)": control}, predicted)
    assert set(found) == {"flow"} and summary["q"] == NULL_Q
    entry = summary["instruments"]["flow"]
    layer1 = entry["aggregate"]["null"]
    assert layer1["share_predicted_marked"][1] == 1.0
    assert layer1["marked"][1] == T and layer1["marked"][0] == 0
    assert layer1["share_others_marked"][0] == 0.0
    assert layer1["other_cells"][1] == 0  # every s ≠ t is some sample's partner
    assert set(entry["aggregate"]) == {"fixed", "null"}
    assert entry["per_sample"]["null"]["share_others_marked"][1] < 0.01


def test_q_outside_the_unit_interval_is_refused():
    for q in (0.0, 1.0, -0.1):
        with pytest.raises(Exception, match=r"false discovery rate in \(0, 1\)"):
            benjamini_hochberg(np.array([0.1]), q)


@pytest.fixture(scope="module")
def report_files(tmp_path_factory):
    from test_report import write_pipeline_files

    return write_pipeline_files(tmp_path_factory.mktemp("files"))


def test_report_shows_both_rules_with_the_counts_it_stores(report_files, tmp_path, monkeypatch):
    import json
    import re

    from test_bad_input import run_command

    files, out = report_files, tmp_path / "report"
    argv = [str(files / "pred.h5"), str(files / "probes.h5"), "--cache", str(files / "acts.h5"),
            "--null-q", "0.2", "--out", str(out)]  # fmt: skip
    assert run_command(monkeypatch, "report", argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    null = summary["null_rule"]
    assert null["q"] == 0.2 and null["instruments"]
    page = (out / "report.html").read_text()
    assert "null rule (BH)" in page and "fixed threshold" in page
    cells = dict(re.findall(r'data-key="(null_rule/[^"]+/marked/[0-9]+)"[^>]*>([^<]*)</td>', page))
    expected = {}  # every (instrument, scope, rule, layer) count, read from the JSON
    for name, entry in null["instruments"].items():
        for scope in ("aggregate", "per_sample"):
            for rule, counts in (entry.get(scope) or {}).items():
                for layer, count in enumerate(counts["marked"]):
                    expected[f"null_rule/instruments/{name}/{scope}/{rule}/marked/{layer}"] = count
    assert {"fixed", "null"} <= {key.split("/")[4] for key in expected}
    assert {key: int(text) for key, text in cells.items()} == expected


@pytest.mark.parametrize("q", ["0", "1", "1.5", "-0.1"])
def test_a_null_q_outside_0_1_is_one_line_and_writes_nothing(
    q, report_files, tmp_path, monkeypatch, capsys
):
    from test_bad_input import assert_refused

    argv = [str(report_files / "pred.h5"), str(report_files / "probes.h5"),
            "--null-q", q, "--out", str(tmp_path / "c.json")]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "compare", argv, ["--null-q"])


def test_run_applies_the_null_q_it_is_given_and_refuses_one_outside_0_1(
    tmp_path, monkeypatch, capsys
):
    import json

    from test_bad_input import TRAIN, assert_refused, run_command

    out = tmp_path / "run"
    argv = [*TRAIN, "--n-cache", "200", "--null-q", "0.2", "--out", str(out)]
    with blank_figures():  # the report's figures are not what is tested
        assert run_command(monkeypatch, "run", argv) == 0
    assert json.loads((out / "comparison.json").read_text())["null_rule"]["q"] == 0.2
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["stages"]["compare"]["key"]["null_q"] == 0.2
    bad = [*TRAIN, "--n-cache", "200", "--null-q", "1.5", "--out", str(tmp_path / "bad")]
    assert_refused(monkeypatch, capsys, tmp_path, "run", bad, ["null_q", "1.5"])
