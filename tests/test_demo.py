"""The demo puts a (D, D) and a (D-1, D) model side by side with InfoFlow's verdicts."""

import json
import re
from dataclasses import replace
from html import unescape

import pytest

from infoprobe.infoflow import predict
from infoprobe.model import ModelConfig
from infoprobe.pipeline.demo import DemoConfig, run_demo
from infoprobe.tasks import make_task

pytestmark = pytest.mark.usefixtures("blank_report_figures")  # not the figures under test


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def test_demo_index_shows_both_models_verdicts_and_links(tmp_path):
    cfg = replace(DemoConfig(), T=5, steps=30, n_cache=1400, batch_size=64)
    assert cfg.probe == "critic"  # the demo's decodability probe, the linear one beside
    summaries, index = run_demo(tmp_path / "demo", cfg, parallel=False)
    assert [tuple(s.heads) for s in summaries] == [(2, 2), (1, 2)]
    task = make_task("intrinsic-dim", D=2, T=5)
    for s in summaries:
        expected = predict(task, ModelConfig(d_in=4, n_ctx=5, heads=tuple(s.heads))).verdict
        assert s.verdict == expected
    assert [s.verdict for s in summaries] == ["efficient", "inefficient"]
    html = index.read_text()
    links = re.findall(r"href='([^']+)'", html)
    assert links == ["heads-2-2/report/report.html", "heads-1-2/report/report.html"]
    assert all((index.parent / link).is_file() for link in links)
    assert f"{summaries[0].val_nmse:.2e}" in html and "Observed is not used" in html
    gap = summaries[1].val_nmse / summaries[0].val_nmse  # (1,2) over (2,2)
    assert f"One head fewer is {gap:.1f}× worse" in html
    # at T=5, E=32 both alphas are 1 (T d / E - 1 < 1): the page says the rates are equal
    assert "the law predicts the same rate for (2,2) and (1,2) (α = 1)" in unescape(html)
    for s in summaries:  # each layer line after the embedding leads with the flow AUROC
        assert s.layer_verdicts[0].startswith("layer 0: nothing predicted besides")
        assert all(
            line.startswith(f"layer {i}: flow AUROC")
            and "decodability (critic probe) AUROC" in line
            and "decodability (linear probe) AUROC" in line
            for i, line in enumerate(s.layer_verdicts)
            if i > 0
        )
        assert (s.out / "probes-linear.h5").is_file()
        answer = json.loads((s.out / "report" / "summary.json").read_text())["answer"]
        critic, linear = (
            answer["instruments"][k] for k in ("decodability", "decodability (linear probe)")
        )
        for layer in answer["layers"]:  # the page's decodability sentence, from the summary
            shown = (
                f"layer {layer} <b>{num(critic['auroc']['infoflow'][layer])}</b> (random-init "
                f"{num(critic['control_auroc'][layer])}, rollout "
                f"{num(critic['auroc']['rollout'][layer])}, linear probe "
                f"{num(linear['auroc']['infoflow'][layer])})"
            )
            assert shown in html
        lines = dict(zip(answer["layers"], answer["decodability_lines"], strict=True))
        for layer, text in lines.items():  # the report's opening, critic then linear
            value, beside = critic["auroc"]["infoflow"][layer], linear["auroc"]["infoflow"][layer]
            assert text.startswith(f"layer {layer}: decodability (critic probe) ranks")
            assert value is None or f"AUROC {value:.3f}" in text
            assert beside is None or f"linear probe {beside:.3f}" in text
    assert html.count("Decodability (critic probe) AUROC of InfoFlow's sets") == 2
