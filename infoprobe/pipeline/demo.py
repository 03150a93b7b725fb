"""``infoprobe demo``: the toolkit's point in one small run.

Two models on the intrinsic-dimension task (D = 2, T = 16): one with (D, D) heads, which
InfoFlow calls efficient, and one with (D−1, D), which it calls inefficient. Both are
trained side by side (one process and one thread each), then cached, probed, measured by
flow, predicted, compared and reported. ``index.html`` puts the two next to each other and
links each model's full report.

Settings are fixed here, chosen before looking at any comparison with InfoFlow and before
running the demo with them: the training recipe is the one the pre-registered recipe
study adopted on held-out seeds (bench/recipe_study.py: lr 5e-3, warm-up 1000, weights
initialised at half the LeCun scale, 10k steps), one seed per model.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import replace
from html import escape
from pathlib import Path

from infoprobe.base.atomic import atomic_output, refuse_existing
from infoprobe.base.markers import mark_html
from infoprobe.base.runtime import AUTO, Runtime, free_cores
from infoprobe.compare.instruments import probe_family_of
from infoprobe.model import ModelConfig
from infoprobe.pipeline.demo_config import DemoConfig
from infoprobe.pipeline.run import run_pipeline
from infoprobe.pipeline.settings import RunSettings
from infoprobe.pipeline.summary import RunSummary
from infoprobe.report.figures import file_stem
from infoprobe.report.html import STYLE
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig


def _one_model(args: tuple[str, tuple[int, int], DemoConfig, Path, bool, Runtime]) -> RunSummary:
    name, heads, cfg, out, overwrite, runtime = args
    runtime.apply()
    task = make_task("intrinsic-dim", D=cfg.D, T=cfg.T)
    model_cfg = ModelConfig(
        d_in=task.d, n_ctx=task.T, d_model=cfg.d_model, heads=heads, init_gain=cfg.init_gain
    )
    train_cfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup=cfg.warmup,
        batch_size=cfg.batch_size,
        seed=cfg.seeds[0],
        eval_every=max(1, cfg.steps // 10),
        device=runtime.device,
    )
    settings = replace(RunSettings(), n_cache=cfg.n_cache, probe=cfg.probe, device=runtime.device)

    def log(line: str) -> None:
        print(f"[{name}] {line}", flush=True)

    return run_pipeline(
        out / name,
        task,
        model_cfg,
        train_cfg,
        settings,
        seeds=cfg.seeds if len(cfg.seeds) > 1 else None,
        overwrite=overwrite,
        progress=False,
        log=log,
    )


INDEX_FORMAT = "infoprobe.demo-index"
"""Format marker of the demo's index.html (its ``infoprobe-format`` meta tag): a re-run
replaces only an index.html carrying it (infoprobe.base.markers)."""


def run_demo(
    out: str | os.PathLike = "runs/demo",
    cfg: DemoConfig | None = None,
    *,
    overwrite: bool = False,
    parallel: bool = True,
    runtime: Runtime | None = None,
) -> tuple[list[RunSummary], Path]:
    """Run both models, side by side in two processes when ``parallel`` and the runtime has
    two threads or more on the CPU (each model gets half of them), else one after the other
    with all of them; return the summaries and index.html."""
    cfg = cfg or DemoConfig()
    runtime = runtime or Runtime()
    out = Path(out)
    refuse_existing(out / "index.html", True, "demo index page", kind=INDEX_FORMAT)
    count = runtime.thread_count
    count = free_cores() if count == AUTO else count
    parallel = parallel and count >= 2 and runtime.device == "cpu"
    each = replace(runtime, threads=count // 2 if parallel else count)
    jobs = [(name, heads, cfg, out, overwrite, each) for name, heads in cfg.heads().items()]
    if parallel:
        with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
            summaries = pool.map(_one_model, jobs)
            pool.close()  # let the workers exit on their own (terminate() may leak)
            pool.join()
    else:
        summaries = [_one_model(job) for job in jobs]
    return summaries, write_index(out, summaries, cfg)


def separation(summaries: list[RunSummary]) -> float | None:
    """Validation NMSE of the (D-1, D) model over that of the (D, D) model (best seeds):
    how much worse one head fewer is. None when either NMSE is missing."""
    efficient, short = (s.val_nmse for s in summaries)
    if efficient is None or short is None or efficient <= 0:
        return None
    return short / efficient


def report_answer(summary: RunSummary) -> dict | None:
    """The ``answer`` section of a model's report summary.json (None if unreadable)."""
    try:
        found = json.loads((Path(summary.report).parent / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return found.get("answer") if isinstance(found, dict) else None


def _model_label(summary: RunSummary) -> str:
    return f"({','.join(map(str, summary.heads))}) model"


def _headline(summary: RunSummary, found: dict | None) -> str:
    """One line per model: InfoFlow's verdict with α at the run's T and E, then the primary
    instrument's AUROC per layer with its random-init control and rollout beside, then the
    decodability probe's with its random-init control and the probes beside it."""
    verdict = (found or {}).get("verdict") or f"{summary.verdict} (α(T) = {summary.exponent})"
    text = f"<b>{escape(_model_label(summary))}</b>: InfoFlow says {escape(verdict)}"
    instruments = (found or {}).get("instruments", {})
    primary = (found or {}).get("primary")
    shown = [primary] + (["decodability"] if primary != "decodability" else [])
    sentences = [
        _auroc_sentence(name, instruments, found["layers"]) for name in shown if name in instruments
    ]
    return text + "." + "".join(" " + s for s in sentences)


def _auroc_sentence(name: str, instruments: dict, layers: list[int]) -> str:
    """ "Flow (...) AUROC of InfoFlow's sets: layer 1 <b>0.97</b> (random-init 0.38,
    rollout 0.71); ...": an instrument's AUROC per layer with its control, rollout and, for
    decodability, the probes compared beside it."""
    entry = instruments[name]
    beside = {
        family: instruments[key]
        for key in instruments
        if name == "decodability" and (family := probe_family_of(key))
    }
    parts = []
    for layer in layers:
        extra = []
        if entry.get("control_auroc") is not None:
            extra.append(f"random-init {_fmt(entry['control_auroc'][layer])}")
        if "rollout" in entry["auroc"]:
            extra.append(f"rollout {_fmt(entry['auroc']['rollout'][layer])}")
        extra += [f"{f} probe {_fmt(e['auroc']['infoflow'][layer])}" for f, e in beside.items()]
        value = _fmt(entry["auroc"]["infoflow"][layer])
        parts.append(f"layer {layer} <b>{value}</b>" + (f" ({', '.join(extra)})" if extra else ""))
    label = escape(entry["label"][:1].upper() + entry["label"][1:])
    return f"{label} AUROC of InfoFlow's sets: " + "; ".join(parts) + "."


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _figure(summary: RunSummary, found: dict | None, out: Path) -> str:
    """The model's answer figure from its report folder (a relative link), with a caption."""
    primary = (found or {}).get("primary")
    png = Path(summary.report).parent / f"answer_{file_stem(primary)}.png" if primary else None
    if png is None or not png.is_file():
        return ""
    src = os.path.relpath(png, out)
    label = escape(found["instruments"][primary]["label"])
    return (
        f"<figure><img src='{escape(src)}' alt='{escape(_model_label(summary))}: ROC curves'>"
        f"<figcaption>{escape(_model_label(summary))}: per layer, ROC curves of {label} "
        "ranking InfoFlow's predicted positions above the others (InfoFlow solid, "
        "attention rollout dashed, InfoFlow against the random-init model dotted) and the "
        "score at predicted (blue) and other (grey) positions.</figcaption></figure>"
    )


def _row(summary: RunSummary, out: Path) -> str:
    nmse = "n/a" if summary.val_nmse is None else f"{summary.val_nmse:.2e}"
    link = os.path.relpath(summary.report, out)
    found = report_answer(summary)
    exponent = (found or {}).get("exponent") or {}
    alpha = escape(summary.exponent)
    if exponent.get("at_T") is not None:
        alpha = f"α(T) = {alpha}; α = {exponent['at_T']:.3g} at T = {exponent['T']}"
    return (
        f"<tr><td>{escape(str(tuple(summary.heads)))}</td><td>{escape(summary.verdict)}</td>"
        f"<td>{alpha}</td><td class='num'>{nmse}</td>"
        f"<td><a href='{escape(link)}'>report</a></td></tr>"
    )


def write_index(out: Path, summaries: list[RunSummary], cfg: DemoConfig) -> Path:
    """``out/index.html``: :func:`index_page`."""
    page = index_page(out, summaries, cfg)
    path = out / "index.html"
    with atomic_output(path, overwrite=True, what="demo index page", kind=INDEX_FORMAT) as tmp:
        tmp.write_text(mark_html(page, INDEX_FORMAT), encoding="utf-8")
    return path


def index_page(out: Path, summaries: list[RunSummary], cfg: DemoConfig) -> str:
    """The demo's index.html for a demo folder ``out``: the result first (the NMSE gap,
    one headline per model with InfoFlow's verdict, α at T and the flow AUROC per layer,
    each model's answer figure from its report), then both models side by side, linking
    their reports."""
    rows = "\n".join(_row(s, out) for s in summaries)
    answers = [report_answer(s) for s in summaries]
    gap = separation(summaries)
    seeds = ", ".join(map(str, cfg.seeds))
    gap_text = (
        ""
        if gap is None
        else (
            f"<p class='verdict'>One head fewer is {gap:.1f}× worse: validation NMSE of the "
            f"({cfg.D - 1},{cfg.D}) model over the ({cfg.D},{cfg.D}) model's"
            f"{' (best of seeds ' + seeds + ' each)' if len(cfg.seeds) > 1 else ''}.</p>"
        )
    )
    pairs = list(zip(summaries, answers, strict=True))
    headlines = "".join(f"<li>{_headline(s, a)}</li>" for s, a in pairs)
    pictures = "".join(_figure(s, a, out) for s, a in pairs)
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>infoprobe demo</title><style>{STYLE}</style></head><body><main>
<h1>infoprobe demo: intrinsic dimension D = {cfg.D}, T = {cfg.T}</h1>
<div class="answer">
{gap_text}
<p>{escape(rate_line(cfg))}.</p>
<ul>{headlines}</ul>
</div>
{pictures}
<p>Target F(X) = Σ<sub>i=1..D</sub> max<sub>s,t</sub> x(s)ᵀA<sub>i</sub>x(t). InfoFlow
predicts D distinct pairwise comparisons, so a 2-layer model needs D heads in each layer:
one head fewer makes the program inefficient. Both models were trained with the same
settings ({cfg.steps} steps, lr {cfg.lr}, warm-up {cfg.warmup}, batch {cfg.batch_size},
E = {cfg.d_model}, seeds {seeds}).</p>
<table><tr><th>heads per layer</th><th>InfoFlow verdict</th><th>cost exponent</th>
<th>validation NMSE</th><th></th></tr>
{rows}
</table>
<p>Flow AUROC: how well a state's sensitivity to each input (local sensitivity) ranks the
positions InfoFlow predicts above the rest, own positions left out (0.5 is chance; the
random-init model of the same architecture and attention rollout, which reads the trained
model's own attention, beside it). Each report opens with where the violations come from
and the decodability numbers.</p>
<p class="caveat">Observed is not used: flow shows that x(s) moves a token's state and a
probe that it can be read there, not that the network uses it for its output. Violations
(observed but not predicted) and omissions (predicted but not observed) are reported
apart.</p>
</main></body></html>
"""
    return page


def rate_line(cfg: DemoConfig) -> str:
    """Whether InfoFlow's cost law predicts different rates for the two models at the
    demo's size, in words (α at T and E of each; where they are equal, the gap the demo
    measures is a constant factor the law does not speak to)."""
    from infoprobe.infoflow import predict, rate_comparison

    task = make_task("intrinsic-dim", D=cfg.D, T=cfg.T)
    named = {
        f"({h[0]},{h[1]})": predict(
            task, ModelConfig(d_in=task.d, n_ctx=task.T, d_model=cfg.d_model, heads=h)
        ).exponent
        for h in cfg.heads().values()
    }
    text = rate_comparison(named, cfg.T)
    text = text.replace(f"at T={cfg.T}", f"At T={cfg.T}, E={cfg.d_model},", 1)
    if "same rate" in text:
        text += (
            ": the gap above is a constant factor, not a difference in rate "
            "(`infoprobe reproduce cost-law` measures rates)"
        )
    return text
