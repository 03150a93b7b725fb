"""The report's opening: ROC curves, where violations come from, what the threshold passes,
rollout beside InfoFlow, figure titles that name their instrument, the demo's index."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html import escape
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from test_report import T, make_inputs
from test_rollout import random_patterns

from infoprobe.compare.core import compare
from infoprobe.compare.observations import Observations
from infoprobe.pipeline.demo import DemoConfig, index_page
from infoprobe.pipeline.summary import RunSummary
from infoprobe.report.answer import (
    roc_curve,
    threshold_check,
    violation_lines,
    violation_sources,
)
from infoprobe.report.build import write_report
from infoprobe.report.figure_set import build_figures
from infoprobe.report.inputs import ReportInputs
from infoprobe.report.sections import ROLLOUT_MEANING

pytestmark = pytest.mark.usefixtures("blank_report_figures")  # the page, not its figures


def test_violation_sources_match_a_brute_force_count():
    rng = np.random.default_rng(3)
    layers, n, t_len, heads = 3, 7, 4, (2, 3)
    tokens = t_len + 1
    predicted = rng.random((layers, n, tokens, tokens)) < 0.4
    observed = rng.random((layers, n, tokens, t_len)) < 0.5
    patterns = random_patterns(rng, n, heads, tokens)
    found = violation_sources(predicted, observed, patterns)
    per_token = np.zeros((layers, tokens), int)
    new = np.zeros((layers, tokens), int)
    by_head = np.zeros((layers, tokens, max(heads)), int)

    def violation(layer, i, t, s):
        return observed[layer, i, t, s] and not predicted[layer, i, t, s] and s != t

    for layer in range(layers):
        for i in range(n):
            for t in range(tokens):
                for s in range(t_len):
                    if not violation(layer, i, t, s):
                        continue
                    per_token[layer, t] += 1
                    if layer > 0 and violation(layer - 1, i, t, s):
                        continue
                    new[layer, t] += 1
                    if layer == 0:
                        continue
                    p = patterns[layer - 1][i]
                    mass = [
                        sum(
                            p[j, t, k]
                            for k in range(tokens)
                            if k == s or observed[layer - 1, i, k, s]
                        )
                        for j in range(p.shape[0])
                    ]
                    by_head[layer, t, int(np.argmax(mass))] += 1
    assert found.per_token.tolist() == per_token.tolist()
    assert found.new.tolist() == new.tolist()
    assert found.by_head.tolist() == by_head.tolist()
    assert found.total.tolist() == per_token.sum(axis=1).tolist()
    assert found.by_head[1:].sum() == found.new[1:].sum()  # every new violation has a head


def test_violation_lines_name_the_token_group_block_and_head():
    per_token = np.array([[0, 0, 0], [1, 2, 9], [0, 0, 0]])  # layer 1: 9 at CLS, 3 at data
    new = per_token.copy()
    by_head = np.zeros((3, 3, 2), int)
    by_head[1, 2] = [2, 7]
    by_head[1, 0] = [1, 0]
    by_head[1, 1] = [2, 0]
    from infoprobe.report.answer import ViolationSources

    heads = {
        "heads": [
            {"block": 0, "head": h, "data": {"mode": "dm", "operation": f"op{h}"},
             "cls": {"mode": "global aggregation", "operation": "idle"}}
            for h in (0, 1)
        ]
    }  # fmt: skip
    (line,) = violation_lines(ViolationSources(per_token, new, by_head), heads, "carried")
    assert line.startswith("layer 1: 12 violations (carried where InfoFlow predicts nothing): ")
    split = line.index("3 (25%) at data tokens")
    cls_part, data_part = line[:split], line[split:]
    assert "9 (75%) at CLS" in cls_part and "9 of them new in block 0" in cls_part
    assert "7 moved by head 1" in cls_part
    assert "CLS queries: global aggregation, where InfoFlow's program has: idle" in line
    assert "3 (25%) at data tokens (most at token 1: 2)" in data_part
    assert "3 moved by head 0" in data_part and "op0" in data_part


def test_roc_curve_area_is_the_tie_aware_auroc():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, 300).astype(float)  # many ties
    labels = rng.random(300) < scores / 8
    fpr, tpr = roc_curve(scores, labels)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert fpr.size == np.unique(scores).size + 1
    assert np.trapezoid(tpr, fpr) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    with pytest.raises(ValueError, match="positives and negatives"):
        roc_curve(scores, np.zeros(300, bool))


def test_threshold_check_counts_what_the_fixed_threshold_passes():
    inputs = make_inputs()
    obs = inputs.instruments()["decodability"]
    check = threshold_check(obs, inputs.predicted)
    own = np.eye(T + 1, T, dtype=bool)
    for layer in range(3):
        pred = inputs.predicted[layer, :, :, :T]
        errors = obs.sample_score[layer]
        passed = errors < 0.5
        for value, mask in ((check.pass_predicted, pred & ~own), (check.pass_other, ~pred & ~own)):
            if mask.any():
                assert value[layer] == pytest.approx(passed[mask].mean())
            else:
                assert np.isnan(value[layer])
        if (pred & ~own).any():
            assert check.median_predicted[layer] == pytest.approx(np.median(errors[pred & ~own]))
        assert check.median_other[layer] == pytest.approx(np.median(errors[~pred & ~own]))


def figure_texts(fig):
    main = fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()
    texts = [main]
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_ylabel(), ax.get_xlabel()]
    return texts


def test_every_figure_title_names_its_instrument_and_metric():
    inputs = make_inputs()
    built = build_figures(inputs)
    for name, (fig, title, caption) in built.items():
        texts = figure_texts(fig)
        whole = " ".join(texts)
        if name.startswith(("flow", "answer_flow", "tau_sweep_flow")):
            assert "flow (local sensitivity)" in texts[0], (name, texts[0])
            assert "ecod" not in whole, (name, whole)  # no "decoding"/"Decodability" label
        if name.startswith(("decodability", "answer_decodability", "tau_sweep_decodability")):
            assert texts[0].startswith("decodability"), (name, texts[0])
        if name.startswith("sample_"):
            assert "observed by flow (local sensitivity)" in texts[0]
            assert "flow vs InfoFlow" in texts
        if name.startswith("answer_"):
            assert any("AUROC" in t.get_text() for ax in fig.axes if ax.get_legend()
                       for t in ax.get_legend().get_texts())  # fmt: skip
        assert title and caption
    grid = figure_texts(built["flow_grid"][0])
    assert inputs.instruments()["flow"].score_name in grid[0]
    colorbar = [ax.get_ylabel() for ax in built["flow_grid"][0].axes if ax.get_ylabel()]
    assert any("x(s) nudged" in label for label in colorbar), colorbar
    sweeps = [built[k][0]._suptitle.get_text() for k in built if k.startswith("tau_sweep")]
    assert len(set(sweeps)) == len(sweeps) == 2


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    inputs = make_inputs()
    out = tmp_path_factory.mktemp("answer") / "run"
    html = write_report(out, inputs, dpi=40).read_text(encoding="utf-8")
    return inputs, out, html, json.loads((out / "summary.json").read_text())


def test_the_page_opens_with_the_answer_and_the_rollout_comparison(page):
    inputs, _, html, summary = page
    assert html.index("InfoFlow's sets against flow (local sensitivity)") < html.index("Caveat")
    first_img = html.index("<img")
    assert first_img < html.index("Caveat")  # the answer figure comes first
    flow = inputs.instruments()["flow"]
    own = np.eye(T + 1, T, dtype=bool)
    layers = [layer for layer in range(3) if (inputs.predicted[layer, :, :, :T] & ~own).any()]
    assert summary["answer"]["layers"] == layers and layers
    for layer in layers:  # recomputed from the arrays, not from the comparison
        keep = np.broadcast_to(~own, flow.sample_score.shape[1:])
        score = flow.sample_score[layer][keep]
        for sets in (inputs.predicted, inputs.rollout_sets):
            labels = sets[layer, :, :, :T][keep]
            assert f"{roc_auc_score(labels, score):.3f}" in html
            observed = flow.per_sample[layer][keep]
            rate = (observed & ~labels).sum() / (~labels).sum()
            assert f"{100 * rate:.1f}%" in html
    assert escape(ROLLOUT_MEANING) in html
    assert "InfoFlow against attention rollout" in html


def test_violation_attribution_on_the_page_counts_the_arrays(page):
    inputs, _, html, summary = page
    flow = inputs.instruments()["flow"]
    own = np.eye(T + 1, T, dtype=bool)
    violation = flow.per_sample & ~inputs.predicted[..., :T] & ~own
    for layer in range(3):
        total = int(violation[layer].sum())
        if total:
            assert f"layer {layer}: {total} violations" in html
            cls = int(violation[layer, :, T].sum())
            if cls:
                assert f"{cls} ({100 * cls / total:.0f}%) at CLS" in html
    assert summary["answer"]["violations"]["total"] == violation.sum(axis=(1, 2, 3)).tolist()


def test_sample_captions_say_why_cells_are_red():
    base = make_inputs()
    flow = base.instruments()["flow"]
    flow = replace(flow, per_sample=flow.sample_score >= 0.01)  # more observed: violations
    inputs = ReportInputs(
        {"flow": {"infoflow": compare(base.predicted, flow)}},
        base.predicted,
        patterns=base.patterns,
        pattern_samples=base.pattern_samples,
        n_sample_views=2,
    )
    own = np.eye(T + 1, T, dtype=bool)
    built = build_figures(inputs)
    every = (flow.per_sample & ~inputs.predicted[..., :T] & ~own).sum((1, 2, 3))
    for sample in inputs.sample_indices():
        red = (flow.per_sample[:, sample] & ~inputs.predicted[:, sample, :, :T] & ~own).sum((1, 2))
        assert red.sum() > 0
        caption = built[f"sample_{sample}"][2]
        for layer in range(3):
            if red[layer]:
                assert f"layer {layer} {int(red[layer])} of {int((~own).sum())} cells" in caption
        worst = int(np.argmax(red))
        assert f"Why, over all samples: layer {worst}: {int(every[worst])} violations" in caption


def test_threshold_lines_explain_a_zero_share_beside_a_high_auroc():
    inputs = make_inputs()
    obs = inputs.instruments()["decodability"]
    # every error above the threshold, but lower at predicted positions: share 0, AUROC high
    noise = np.random.default_rng(0).random(obs.sample_score.shape)
    errors = np.where(inputs.predicted[..., :T], 0.7, 0.9) + 0.01 * noise
    strict = Observations(
        "decodability", per_sample=errors < 0.5, sample_score=errors, tau_sample=0.5,
        sample_score_name="error / own-sample baseline", word="decodable",
    )  # fmt: skip
    from infoprobe.report.answer import threshold_line

    check = threshold_check(strict, inputs.predicted)
    line = threshold_line(check, 1, 0.9, "decodable")
    assert "0.0% of predicted positions and 0.0% of the others are decodable" in line
    assert "almost none clear the threshold" in line and "AUROC 0.900" in line
    at_predicted = inputs.predicted[1, :, :, :T] & ~np.eye(T + 1, T, dtype=bool)
    assert f"is {np.median(errors[1][at_predicted]):.3g} at predicted positions" in line
    with_interval = threshold_line(check, 1, 0.9, "decodable", (0.8812, 0.9234))
    assert "AUROC 0.900 [0.881, 0.923] compares" in with_interval


def test_demo_index_leads_with_the_headline_and_each_models_figure(page, tmp_path):
    _, out, _, summary = page
    demo = Path(out).parent
    runs = [
        RunSummary(
            out=demo, task={"name": "intrinsic-dim", "params": {}}, heads=list(heads),
            val_nmse=nmse, test_nmse=nmse, verdict=verdict, exponent="1", layer_verdicts=[],
            report=Path(out) / "report.html",
        )
        for heads, nmse, verdict in (((2, 2), 1e-3, "efficient"), ((1, 2), 2e-2, "inefficient"))
    ]  # fmt: skip
    html = index_page(demo, runs, DemoConfig())
    head = html[: html.index("<table>")]
    assert "One head fewer is 20.0× worse" in head
    entry = summary["answer"]["instruments"]["flow"]
    for layer in summary["answer"]["layers"]:
        assert f"layer {layer} <b>{entry['auroc']['infoflow'][layer]:.2f}</b>" in head
        assert f"rollout {entry['auroc']['rollout'][layer]:.2f}" in head
    images = re.findall(r"<img src='([^']+)'", head)
    assert images == ["run/answer_flow.png", "run/answer_flow.png"]
    assert all((demo / src).is_file() for src in images)
    assert re.findall(r"href='([^']+)'", html) == ["run/report.html", "run/report.html"]
