"""Report folder: files, self-contained HTML, images that decode, numbers that match."""

from __future__ import annotations

import base64
import io
import json
import os
from html.parser import HTMLParser

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from infoprobe.attention.rollout import predict_rollout
from infoprobe.base.atomic import OutputExistsError
from infoprobe.compare.core import compare
from infoprobe.compare.crosstab import crosstab
from infoprobe.compare.observations import Observations
from infoprobe.compare.scopes import CAVEAT
from infoprobe.compare.verdicts import headline
from infoprobe.report import build as report_build
from infoprobe.report.browser_check import check_report, find_chromium
from infoprobe.report.build import write_report
from infoprobe.report.curves import training_curve
from infoprobe.report.figures import decodability_grid
from infoprobe.report.inputs import ReportInputError, ReportInputs
from infoprobe.report.sample_figure import set_agreement_codes

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T, N, HEADS = 5, 12, (2, 1)


def make_inputs(seed: int = 0) -> ReportInputs:
    rng = np.random.default_rng(seed)
    tokens = T + 1
    patterns = []
    for h in HEADS:
        logits = rng.normal(size=(N, h, tokens, tokens)) * 3.0
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        patterns.append(e / e.sum(axis=-1, keepdims=True))
    hard = [np.eye(tokens)[p.argmax(axis=-1)] for p in patterns]  # one-hot argmax attention
    predicted = predict_rollout(hard).sets  # union semantics of max retrieval
    errors = np.where(predicted[..., :T], 0.1, 0.9) + rng.gamma(2.0, 0.1, (3, N, tokens, T))
    score = predicted[..., :T].mean(axis=1) + rng.normal(0.0, 0.05, (3, tokens, T))
    prov = {"task": {"name": "intrinsic-dim", "params": {"T": T}}, "data_seed": 1, "n": N}
    obs = Observations(
        per_sample=errors < 0.5,
        sample_score=errors,
        aggregate=score >= 0.5,
        score=score,
        tau_sample=0.5,
        tau=0.5,
        word="decodable",
        provenance=prov,
    )
    flow_scores = np.where(predicted[..., :T], 0.3, 0.01) * rng.gamma(2.0, 0.5, errors.shape)
    flow = Observations(
        "flow",
        per_sample=flow_scores >= 0.05,
        sample_score=flow_scores,
        aggregate=flow_scores.mean(1) >= 0.05,
        score=flow_scores.mean(1),
        member_when="above",
        tau_sample=0.05,
        tau=0.05,
        word="carried",
    )
    rollout = predict_rollout(patterns)
    comparisons = {
        o.instrument: {
            "infoflow": compare(predicted, o, provenance=prov),
            "rollout": compare(rollout.sets, o, name="rollout"),
        }
        for o in (flow, obs)
    }
    return ReportInputs(
        comparisons=comparisons,
        predicted=predicted,
        rollout_sets=rollout.sets,
        table=crosstab(flow, obs),
        headline=headline(comparisons),
        patterns=[p[[3, 7]] for p in patterns],
        pattern_samples=[3, 7],
        n_sample_views=2,
        history=[{"step": s, "train_loss": 1.0, "val_nmse": 1.0 / (1 + s)} for s in range(5)],
        provenance={"predicted sets": prov, "probe results": prov},
        title="test report",
        notes={"task": "intrinsic-dim", "architecture": "heads (2, 1)"},
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    inputs = make_inputs()
    out = tmp_path_factory.mktemp("report") / "run"
    html_path = write_report(out, inputs, dpi=50)
    summary = json.loads((out / "summary.json").read_text())
    return inputs, out, html_path.read_text(encoding="utf-8"), summary


class PageParser(HTMLParser):
    """Collects every tag's attributes, and the data-key cells with their text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.cells: list[tuple[str, str, str]] = []
        self._open: tuple[str, str] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if "data-key" in attributes:
            self._open = (attributes["data-key"], attributes["data-value"])
            self._text = []

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._open is not None:
            self.cells.append((*self._open, "".join(self._text)))
            self._open = None


def parse(html: str) -> PageParser:
    parser = PageParser()
    parser.feed(html)
    return parser


def lookup(tree, key):
    for part in key.split("/"):
        tree = tree[int(part)] if isinstance(tree, list) else tree[part]
    return tree


def test_report_folder_holds_summary_html_and_every_png(report):
    _, out, _, summary = report
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    names = set(summary["figures"])
    assert {
        "answer_flow",
        "answer_decodability",
        "flow_grid",
        "flow_cls_across_layers",
        "decodability_grid",
        "decodability_cls_across_layers",
        "sample_3",
        "sample_7",
        "tau_sweep_flow",
        "tau_sweep_decodability",
        "training_curve",
    } == names
    for meta in summary["figures"].values():
        assert (out / meta["file"]).read_bytes().startswith(PNG_SIGNATURE)
    assert not [p for p in out.parent.iterdir() if ".tmp-" in p.name]


def test_html_is_self_contained(report):
    _, _, html, _ = report
    page = parse(html)
    for tag, attrs in page.tags:
        for name in ("src", "href", "srcset", "poster", "data"):
            if name in attrs:
                assert attrs[name].startswith(("data:", "#")), (tag, name, attrs[name][:60])
        assert tag not in {"link", "iframe", "object", "embed"}
    assert "url(" not in html and "@import" not in html
    assert "http://" not in html and "https://" not in html


def test_every_img_decodes_as_the_png_on_disk(report):
    _, out, html, summary = report
    images = [attrs for tag, attrs in parse(html).tags if tag == "img"]
    assert len(images) == len(summary["figures"])
    on_disk = {(out / m["file"]).read_bytes() for m in summary["figures"].values()}
    for attrs in images:
        prefix = "data:image/png;base64,"
        assert attrs["src"].startswith(prefix)
        data = base64.b64decode(attrs["src"][len(prefix) :], validate=True)
        assert data.startswith(PNG_SIGNATURE) and data in on_disk
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
            assert image.format == "PNG" and min(image.size) > 50


def test_numbers_in_html_match_summary_json(report):
    _, _, html, summary = report
    cells = parse(html).cells
    assert len(cells) > 50
    for key, raw, text in cells:
        value = lookup(summary, key)
        assert json.loads(raw) == value, key
        text = text.split(" [")[0]  # the bootstrap interval beside the number
        if value is None:
            assert text == "n/a", key
        elif text.endswith("%"):
            assert float(text[:-1]) == pytest.approx(100 * value, abs=0.051), key
        elif isinstance(value, int):
            assert int(text) == value, key
        elif isinstance(value, float):
            assert float(text) == pytest.approx(value, rel=5e-3, abs=5e-4), key
        else:
            assert text == str(value), key
    shown = {key for key, _, _ in cells}
    for layer in range(3):
        for inst in ("flow", "decodability"):
            for name in ("agree", "violations", "omissions", "recall", "violation_rate"):
                for scope in ("others", "own"):
                    key = f"comparisons/{inst}/infoflow/per_sample/{scope}/per_layer/{name}/{layer}"
                    assert key in shown
        for part in ("both", "first_only", "second_only", "neither"):
            assert f"crosstab/{part}/{layer}" in shown


def test_summary_holds_the_comparisons_numbers_verdicts_caveat_and_provenance(report):
    inputs, _, html, summary = report
    for inst in ("flow", "decodability"):
        infoflow = summary["comparisons"][inst]["infoflow"]
        layer = inputs.comparisons[inst]["infoflow"].per_sample["others"].per_layer
        others = infoflow["per_sample"]["others"]["per_layer"]
        assert others["violations"] == layer.violations.tolist()
        assert others["omissions"] == layer.omissions.tolist()
        for verdict in infoflow["verdicts"] + summary["comparisons"][inst]["rollout"]["verdicts"]:
            assert verdict in html
    assert summary["caveat"] == CAVEAT and "Observed is not used" in html
    assert summary["headline"] == list(inputs.headline) and summary["headline"][1] in html
    assert summary["crosstab"]["both"] == inputs.table.both.tolist()
    assert set(summary["provenance"]) == {"predicted sets", "probe results", "report"}
    assert len(summary["provenance"]["report"]["inputs_sha256"]) == 64
    assert summary["training"]["best_val_nmse"] == pytest.approx(0.2)


def test_existing_folder_is_refused_and_a_crash_leaves_nothing(tmp_path, monkeypatch):
    inputs = make_inputs(seed=1)
    inputs.n_sample_views = 0
    target = tmp_path / "run"
    target.mkdir()
    with pytest.raises(OutputExistsError):
        write_report(target, inputs)

    def broken(_inputs):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(report_build, "build_figures", broken)
    with pytest.raises(RuntimeError):
        write_report(tmp_path / "other", inputs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_decodability_grid_marks_always_predicted_cells_and_violations():
    membership = np.zeros((2, 4, 3))
    membership[:, [0, 1, 2], [0, 1, 2]] = 1.0  # 3 always cells per layer
    membership[1, 3, 0] = 0.5  # one sometimes cell
    observed = np.zeros((2, 4, 3), bool)
    observed[1, 0, 2] = observed[1, 3, 1] = True  # two never-predicted decodable cells
    observed[1, 3, 0] = True  # sometimes cell: not a violation
    fig = decodability_grid(np.full((2, 4, 3), 0.5), membership, observed)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("layer")]
    assert len(panels) == 2
    for ax in panels:
        assert sum(isinstance(p, Rectangle) for p in ax.patches) == 3
    crosses = [c for c in panels[1].collections if c.get_offsets().shape[0] == 2]
    assert len(crosses) == 1
    assert sorted(map(tuple, crosses[0].get_offsets().tolist())) == [(1.0, 3.0), (2.0, 0.0)]


def test_set_agreement_codes_and_training_curve_input_check():
    predicted = np.array([True, True, False, False])
    observed = np.array([True, False, True, False])
    assert set_agreement_codes(predicted, observed).tolist() == [1, 2, 3, 0]
    with pytest.raises(ValueError, match="val_nmse"):
        training_curve([{"step": 1, "train_loss": 0.3}])


def test_report_inputs_are_validated():
    inputs = make_inputs(seed=2)
    with pytest.raises(ReportInputError, match="pattern_samples"):
        ReportInputs(
            inputs.comparisons,
            inputs.predicted,
            patterns=inputs.patterns,
            pattern_samples=[3, 99],
        )
    with pytest.raises(ReportInputError, match="one array per block"):
        ReportInputs(
            inputs.comparisons,
            inputs.predicted,
            patterns=inputs.patterns[:1],
            pattern_samples=[3, 7],
        )
    with pytest.raises(ReportInputError, match="'infoflow'"):
        ReportInputs({"flow": {"rollout": inputs.comparisons["flow"]["rollout"]}}, inputs.predicted)


@pytest.mark.skipif(
    find_chromium() is None, reason="Chromium not installed (Debian: apt-get install -y chromium)"
)
def test_report_renders_in_headless_chromium(report, tmp_path):
    _, out, _, summary = report
    shot = tmp_path / "screenshot.png"
    result = check_report(out, shot)
    assert result.n_images == result.n_rendered == len(summary["figures"])
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size[0] == 1280
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


# ----------------------------------------------------------------------------- CLI on files


def write_pipeline_files(root, *, data_seed=5, pred_seed=None, model_seed=0, n=400):
    """Checkpoint (untrained model, fake history), its cache (residual + attention sites),
    linear probe results and predicted sets (of the cache's inputs, or of other samples
    drawn with ``pred_seed``)."""
    from infoprobe.checkpoint import read_checkpoint_meta, save_checkpoint
    from infoprobe.hooks import open_cache, write_cache
    from infoprobe.infoflow import predict, write_sets
    from infoprobe.model import InfoFlowTransformer, ModelConfig
    from infoprobe.pipeline.probing import ProbeSettings, run_probe
    from infoprobe.tasks import make_task

    task = make_task("intrinsic-dim", T=T, D=2, seed=0)
    cfg = ModelConfig(
        d_in=task.d,
        n_ctx=T,
        d_model=16,
        heads=HEADS,
        pos_encoding="none",
        residual=True,
        layer_norm=False,
        d_mlp=32,
        d_readout=8,
        d_out=task.d_out,
    )
    model = InfoFlowTransformer(cfg, seed=model_seed).eval()
    history = [{"step": s, "train_loss": 1.0, "val_nmse": 0.5**s} for s in range(4)]
    checkpoint = save_checkpoint(root / "model", model, task, history=history)
    provenance = {
        "checkpoint_sha256": read_checkpoint_meta(checkpoint)["weights_sha256"],
        "model_config": cfg.to_dict(),
        "data_spec": {"task": task.to_dict(), "n": n, "data_seed": data_seed, "batch_size": 200},
    }
    write_cache(
        root / "acts.h5",
        model,
        lambda b, size: task.sample(size, np.random.default_rng([data_seed, b])),
        n=n,
        batch_size=200,
        sites="residual,attention",
        provenance=provenance,
        progress=False,
    )
    run_probe(
        root / "acts.h5", root / "probes.h5", settings=ProbeSettings(block_size=256), progress=False
    )
    with open_cache(root / "acts.h5") as cache:
        x = np.asarray(cache.x[()])
    if pred_seed is not None:
        x = task.sample(n, np.random.default_rng(pred_seed))[0]
    seed = data_seed if pred_seed is None else pred_seed
    write_sets(
        root / "pred.h5", predict(task, cfg), x, {"data_seed": seed, "samples": n}, progress=False
    )
    return root


def cli(*args) -> int:
    from infoprobe.cli import main

    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def pipeline_files(tmp_path_factory):
    return write_pipeline_files(tmp_path_factory.mktemp("pipeline"))


def test_compare_cli_matches_the_array_api(pipeline_files, capsys):
    from infoprobe.infoflow import read_sets
    from infoprobe.probes.results import ProbeResults

    root = pipeline_files
    code = cli(
        "compare",
        root / "pred.h5",
        root / "probes.h5",
        "--cache",
        root / "acts.h5",
        "--rollout",
        "--out",
        root / "cmp.json",
    )
    printed = capsys.readouterr().out
    assert code == 0 and "rollout vs decodability:" in printed and "Observed is not used" in printed
    saved = json.loads((root / "cmp.json").read_text())
    assert set(saved["comparisons"]) == {"decodability"}
    assert set(saved["comparisons"]["decodability"]) == {"infoflow", "rollout"}
    assert saved["heads"]["heads"] and saved["headline"]
    # independent path: read the files by hand, align the test samples, correct each
    # sample's error by its own mean-predictor error, threshold at 0.5, leave own cells out
    results = ProbeResults.read(root / "probes.h5")
    pred_file = read_sets(root / "pred.h5")
    sets = pred_file.sets[:, results.test_index, :, :T]
    x = pred_file.x[results.test_index].astype(np.float64)
    dev = ((x - x.mean(0)) ** 2).sum(-1)
    errors = results.per_sample[("positions", "linear", "none")]
    observed = errors / (dev / dev.mean(0))[None, :, None, :] < 0.5
    own = np.eye(T + 1, T, dtype=bool)
    infoflow = saved["comparisons"]["decodability"]["infoflow"]["per_sample"]["others"]
    assert infoflow["per_layer"]["violations"] == [
        int((observed[l] & ~sets[l] & ~own).sum()) for l in range(len(sets))
    ]
    assert infoflow["per_layer"]["omissions"] == [
        int((~observed[l] & sets[l] & ~own).sum()) for l in range(len(sets))
    ]


def test_report_cli_writes_a_report_whose_numbers_match_compare(pipeline_files, capsys):
    root = pipeline_files
    out = root / "report"
    code = cli(
        "report",
        root / "pred.h5",
        root / "probes.h5",
        "--cache",
        root / "acts.h5",
        "--rollout",
        "--samples",
        1,
        "--checkpoint",
        root / "model",
        "--out",
        out,
    )
    assert code == 0 and "report:" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["figures"]) == {
        "answer_decodability",
        "decodability_grid",
        "decodability_cls_across_layers",
        "sample_0",
        "tau_sweep_decodability",
        "training_curve",
    }
    assert summary["training"]["final_val_nmse"] == 0.125
    # InfoFlow's exponent at the run's T and E, recomputed with the engine
    from infoprobe.infoflow import predict
    from infoprobe.tasks import make_task

    prediction = predict(make_task("intrinsic-dim", T=T, D=2, seed=0), HEADS, d_model=16)
    exponent = summary["answer"]["exponent"]
    assert (exponent["T"], exponent["E"]) == (T, 16)
    assert exponent["at_T"] == pytest.approx(prediction.exponent(T))
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"{prediction.verdict}: α = {prediction.exponent(T):.3g} at T={T}, E=16" in page
    assert cli("compare", root / "pred.h5", root / "probes.h5", "--out", root / "plain.json") == 0
    plain = json.loads((root / "plain.json").read_text())["comparisons"]["decodability"]
    ours = summary["comparisons"]["decodability"]["infoflow"]
    assert ours["per_sample"] == plain["infoflow"]["per_sample"]
    assert ours["verdicts"] == plain["infoflow"]["verdicts"]


def test_cli_refuses_mismatched_inputs(tmp_path, pipeline_files, capsys):
    other = write_pipeline_files(tmp_path, pred_seed=6, model_seed=1)
    assert cli("compare", other / "pred.h5", other / "probes.h5") == 2
    err = capsys.readouterr().err
    assert "data_seed" in err and "pred.h5 has 6" in err
    root = pipeline_files
    assert cli("compare", root / "pred.h5", root / "probes.h5", "--rollout") == 2
    assert "--rollout needs --cache" in capsys.readouterr().err
    # the checkpoint of another model than the one the cache was made from
    code = cli(
        "report",
        root / "pred.h5",
        root / "probes.h5",
        "--checkpoint",
        other / "model",
        "--out",
        tmp_path / "rep",
    )
    assert code == 2 and "weights_sha256" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()
