"""The sections of ``report.html``, in page order: the answer it leads with, the caveat
and run, headline and verdicts, flow beside decodability, the observed program, the
predictors side by side, the figures, every number, definitions and provenance.

Each section renderer takes the summary dict (what ``summary.json`` holds) and returns
the page's parts, joined one per line by :func:`render_html`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from infoprobe.compare.predictors import INFOFLOW, display_name, sets_phrase
from infoprobe.report.figures import file_stem
from infoprobe.report.html import figure_html, page
from infoprobe.report.tables import (
    AGGREGATE_COLUMNS,
    PER_SAMPLE_COLUMNS,
    answer_table,
    crosstab_table,
    heads_table,
    layer_table,
    notes_table,
    null_rule_table,
    predictor_table,
)

Summary = Mapping[str, Any]
Pngs = Mapping[str, bytes]

DEFINITIONS = (
    (
        "P, O",
        "predicted set I_pred(t, l) and the set I_obs(t, l) an instrument observed, data "
        "positions 0..T-1 only (CLS carries no input).",
    ),
    (
        "instruments",
        "flow: h(t, l) moves when x(s) is nudged (local sensitivity) or redrawn (resample "
        "ablation); decodability: a probe recovers x(s) from h(t, l), scored per sample "
        "against that sample's own baseline (the error of predicting the mean).",
    ),
    (
        "own position",
        "s = t is in every predicted set, so it is reported apart; every other number "
        "is about the other positions.",
    ),
    ("agree", "|P ∩ O|: predicted and observed."),
    (
        "violations",
        "|O \\ P|: observed where the predictor says the information cannot be. "
        "This is what contradicts a theory.",
    ),
    (
        "omissions",
        "|P \\ O|: accessible in theory, not observed. Expected where a network "
        "compresses what it keeps.",
    ),
    ("precision / recall", "agree / |O| and agree / |P|, pooled over samples and tokens."),
    (
        "violation rate",
        "violations / |not P|: share of non-predicted positions that are observed.",
    ),
    ("Jaccard", "agree / |P ∪ O|."),
    (
        "AUROC",
        "probability that a predicted position scores higher than a non-predicted one "
        "(ties count half), from the continuous scores: no threshold. 0.5 is chance.",
    ),
    (
        "aggregate",
        "aggregate scores against the share of samples in which s is "
        "predicted: violations count never-predicted cells, omissions always-predicted cells; "
        "sometimes-predicted cells are counted apart.",
    ),
)


ROLLOUT_MEANING = (
    "Attention rollout reads this trained model's own attention patterns; InfoFlow predicts "
    "from the task and the architecture alone, before any training. Rollout explaining the "
    "observed flow better is therefore expected and is not, by itself, evidence against "
    "InfoFlow. What would count against InfoFlow: doing no better than on the random-init "
    "model, or violations its program cannot produce (above)."
)


def _items(lines: Sequence[str], split: str | None = None) -> str:
    """A list; with ``split``, each line's head (up to the first ": ") as the item and its
    parts (separated by ``split``) as a nested list."""
    items = []
    for line in lines:
        head, _, rest = line.partition(": ") if split else (line, "", "")
        nested = "".join(f"<li>{escape(p)}</li>" for p in rest.split(split)) if rest else ""
        items.append(f"<li>{escape(head)}" + (f"<ul>{nested}</ul>" if nested else "") + "</li>")
    return "<ul>" + "".join(items) + "</ul>"


def answer_section(summary: Mapping[str, Any], figures: Mapping[str, bytes]) -> list[str]:
    """The page's opening: verdict and exponent, one sentence per layer, the answer
    figure(s), where violations come from, rollout and what it means, thresholds."""
    found = summary.get("answer") or {}
    primary = found.get("primary")
    if primary is None:
        return []
    entry = found["instruments"][primary]
    verdict = found.get("verdict")
    given = (summary.get("notes") or {}).get("sets compared with")
    who = "Your sets" if given else "InfoFlow's sets"
    parts = [
        "<div class='answer'>",
        f"<p class='verdict'>{who} against {escape(entry['label'])}</p>",
        "" if not given else f"<p><strong>The sets compared</strong>: {escape(given)}.</p>",
        "" if not verdict else f"<p>InfoFlow's verdict for this architecture: "
        f"<strong>{escape(verdict)}</strong>.</p>",
        _items(found["lines"]),
        *(
            ["<p>Decodability (a probe reads x(s) back from the state; decodable is not "
             "used):</p>", _items(found["decodability_lines"])]
            if found.get("decodability_lines")
            else []
        ),
        "</div>",
    ]  # fmt: skip
    parts.append(_answer_figure(summary, figures, primary))
    parts.append(answer_table(summary, primary))
    if found.get("violation_lines"):
        parts += [
            "<h3>Where the violations come from</h3>",
            f"<p>Violations: cells {escape(entry['label'])} observes where InfoFlow predicts "
            "nothing (own positions left out), by token; “new in block b”: not yet a "
            "violation one layer below; the head named is the one of that block that moves "
            "the most attention from the token onto keys already carrying x(s).</p>",
            _items(found["violation_lines"], split="; "),
        ]
    if found.get("rollout_lines"):
        parts += [
            "<h3>InfoFlow against attention rollout</h3>",
            _items(found["rollout_lines"]),
            f"<p>{escape(ROLLOUT_MEANING)}</p>",
        ]
    for name, other in found["instruments"].items():
        if other.get("threshold_lines"):
            parts += [
                f"<h3>{escape(other['label'])}: the fixed threshold and the AUROC</h3>",
                "<p>The shares in the verdicts count cells that clear the threshold fixed "
                "before the comparison; the AUROC only compares the scores of predicted and "
                "other positions, with no threshold.</p>",
                _items(other["threshold_lines"]),
            ]
        if name != primary:
            parts.append(_answer_figure(summary, figures, name))
    return parts


def _answer_figure(summary: Mapping[str, Any], figures: Mapping[str, bytes], name: str) -> str:
    """The answer figure of one instrument (``answer_<name>``), or "" without one."""
    key = f"answer_{file_stem(name)}"
    meta = summary.get("figures", {}).get(key)
    if meta is None or key not in figures:
        return ""
    return figure_html(figures[key], meta.get("title", key), meta["caption"])


def render_html(summary: Summary, figures: Pngs) -> str:
    """The whole page. summary: the summary.json dict; figures: name → PNG bytes, each
    with ``summary["figures"][name]["caption"]`` (figures without one are skipped)."""
    title = escape(summary.get("title", "infoprobe report"))
    parts = [
        f"<h1>{title}</h1>",
        f'<p class="muted">infoprobe {escape(str(summary.get("infoprobe_version", "")))}'
        f" · {escape(str(summary.get('created', '')))}</p>",
        *answer_section(summary, figures),
        f'<div class="caveat"><strong>Caveat.</strong> {escape(summary["caveat"])}</div>',
        "<h2>Run</h2>",
        notes_table(summary),
        *headline_section(summary),
        *flagged_section(summary),
        *verdicts_section(summary),
        *crosstab_section(summary),
        *null_rule_section(summary),
        *heads_section(summary),
        *predictors_section(summary),
        *figures_section(summary, figures),
        *numbers_section(summary),
        *definitions_section(),
        *provenance_section(summary),
    ]
    return page(title, "\n".join(p for p in parts if p))


def headline_section(summary: Summary) -> list[str]:
    """Each instrument's AUROC against the predicted sets (InfoFlow's or yours), one line
    each."""
    if not summary.get("headline"):
        return []
    items = "".join(f"<li>{escape(v)}</li>" for v in summary["headline"])
    sets = sets_phrase((summary.get("answer") or {}).get("predictor", INFOFLOW))
    return [
        f"<h2>Headline</h2><p>Each instrument's AUROC against {sets} (own "
        f"positions left out; controls in brackets).{_within_model(summary)}</p>"
        f"<ul class='verdicts'>{items}</ul>"
    ]


def _within_model(summary: Summary) -> str:
    """The sentence that says what the page's intervals cover ("" without intervals)."""
    settings = summary.get("interval")
    if not settings:
        return ""
    return (
        f" The intervals in square brackets ({float(settings['level']):.0%}, here and in every "
        "table) are within-model, a bootstrap over the compared samples of this one trained "
        "model: a claim about this model rests on them, while a claim about the "
        "architecture rests on the spread over training seeds, which they do not include "
        "(<code>infoprobe spread</code>, docs/report.md)."
    )


def verdicts_section(summary: Summary) -> list[str]:
    """Every comparison's verdicts, with what the fixed threshold counts."""
    parts = ["<h2>Verdicts</h2>"]
    checks = (summary.get("answer") or {}).get("instruments", {})
    for instrument, by_predictor in summary["comparisons"].items():
        for name, comp in by_predictor.items():
            items = "".join(f"<li>{escape(v)}</li>" for v in comp["verdicts"])
            parts.append(
                f"<h3>{escape(display_name(name))} · {escape(instrument)}</h3>"
                f"<ul class='verdicts'>{items}</ul>"
            )
            threshold = (checks.get(instrument) or {}).get("threshold")
            if threshold is not None:
                relation = "&lt;" if threshold["member_when"] == "below" else "≥"
                score = escape(threshold["score_name"])
                parts.append(
                    f"<p class='muted'>Shares count positions with {score} "
                    f"{relation} {threshold['tau']:.3g} (fixed before comparing); the AUROC "
                    "ranks the scores without a threshold (see the fixed threshold and the "
                    "AUROC, above).</p>"
                )
    return parts


def crosstab_section(summary: Summary) -> list[str]:
    """Flow beside decodability per (sample, token, position) cell, if both were run."""
    if not summary.get("crosstab"):
        return []
    return [
        "<h2>Flow beside decodability, per sample</h2>",
        "<p>Every (sample, token, position ≠ t) cell by what the two instruments saw. "
        "Flowing but not decodable: the network keeps only a function of x(s) "
        "(compressed). Decodable without flow should be near zero: it checks both "
        "instruments.</p>",
        crosstab_table(summary),
    ]


def flagged_section(summary: Summary) -> list[str]:
    """The probe cells whose fit failed after its restarts, with each instrument's AUROC
    over all cells and over the rest (nothing when no cell is flagged)."""
    flags = summary.get("flagged_fits") or {}
    if not flags:
        return []
    parts = [
        "<h2>Probe fits that failed</h2>",
        "<p>These cells' probe fits failed on their validation samples after their restarts "
        "(docs/probes.md, section When a fit fails); their numbers are shown as measured, "
        "and each AUROC is given with and without them.</p>",
    ]
    for instrument, entry in flags.items():
        rows = "".join(
            f"<tr><td>{layer}</td><td>{token_name(t, entry['T'])}</td>"
            f"<td>{escape(', '.join(why))}</td></tr>"
            for (layer, t), why in zip(entry["cells"], entry["reasons"], strict=True)
        )
        aucs = "".join(
            f"<tr><td>{layer}</td><td>{_auc(a)}</td><td>{_auc(b)}</td></tr>"
            for layer, (a, b) in enumerate(
                zip(entry["auroc"], entry["auroc_without_flagged"], strict=True)
            )
        )
        parts += [
            f"<h3>{escape(instrument)}</h3>",
            "<table class='flagged'><tr><th>layer</th><th>token</th><th>why</th></tr>"
            f"{rows}</table>",
            "<table><tr><th>layer</th><th>AUROC, all cells</th><th>AUROC without the flagged"
            f"</th></tr>{aucs}</table>",
        ]
    return parts


def token_name(t: int, T: int) -> str:
    """A token index as shown: its number, or CLS (index T)."""
    return "CLS" if t == T else str(t)


def _auc(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def null_rule_section(summary: Summary) -> list[str]:
    """The fixed-threshold membership rule beside the null rule, per instrument."""
    null = summary.get("null_rule")
    if not null or not null.get("instruments"):
        return []
    parts = [
        "<h2>Membership: fixed threshold and null rule</h2>",
        "<p>Two rules for which cells an instrument marks as carrying x(s). The fixed "
        "threshold is the instrument's own, fixed before comparing. The null rule gives "
        "each cell a p-value against a null and keeps the cells Benjamini–Hochberg "
        f"accepts across the whole grid at q = {float(null['q']):g}, fixed in advance "
        "(docs/report.md, section Membership against a null). Marked is decodable or "
        "moving, not used.</p>",
    ]
    for instrument, entry in null["instruments"].items():
        parts.append(
            f"<h3>{escape(instrument)}</h3><p class='muted'>null: {escape(str(entry['null']))}</p>"
        )
        for scope, label in (("aggregate", "aggregate sets"), ("per_sample", "per sample")):
            if entry.get(scope):
                parts += [f"<p>{label}</p>", null_rule_table(summary, instrument, scope)]
    return parts


def heads_section(summary: Summary) -> list[str]:
    """The observed program per head, if attention patterns were given."""
    if not summary.get("heads"):
        return []
    beside = (
        "beside the operation InfoFlow's program assigns it (heads matched to operations "
        "by the best assignment of per-sample argmax agreement)"
        if summary["heads"].get("predicted", True)
        else "(no task, so no predicted program to match it to)"
    )
    return [
        "<h2>The observed program, per head</h2>",
        "<p>From the attention patterns of the compared samples: each head's observed "
        f"mode and the keys it reads {beside}. Where a head looks is not what it moves.</p>",
        heads_table(summary),
    ]


def predictors_section(summary: Summary) -> list[str]:
    """InfoFlow beside the other predictors, per instrument compared with more than one."""
    multi = [k for k, v in summary["comparisons"].items() if len(v) > 1]
    if not multi:
        return []
    parts = [
        "<h2>Which predictor explains the observed sets?</h2>",
        "<p>Higher recall and AUROC and a lower violation rate fit better.</p>",
    ]
    for instrument in multi:
        parts += [f"<h3>{escape(instrument)}</h3>", predictor_table(summary, instrument)]
    return parts


def figures_section(summary: Summary, figures: Pngs) -> list[str]:
    """Every figure but the answer figures (shown at the top), in summary order."""
    parts = ["<h2>Figures</h2>"]
    for name, meta in summary.get("figures", {}).items():
        if name in figures and not name.startswith("answer_"):
            parts.append(figure_html(figures[name], meta.get("title", name), meta["caption"]))
    return parts


def numbers_section(summary: Summary) -> list[str]:
    """Per comparison, the per-layer tables: per sample (other and own positions), and
    aggregate."""
    parts = ["<h2>Numbers</h2>"]
    for instrument, by_predictor in summary["comparisons"].items():
        for name, comp in by_predictor.items():
            prefix = f"comparisons/{instrument}/{name}"
            label = f"{escape(display_name(name))} · {escape(instrument)}"
            n_layer_axis = comp["shape"]["layers"]
            for scope, words in (("others", "positions s ≠ t"), ("own", "own position s = t")):
                if comp.get("per_sample") and comp["per_sample"][scope].get("per_layer"):
                    parts += [
                        f"<h3>{label}: per sample, {words} (pooled per layer)</h3>",
                        layer_table(
                            summary,
                            f"{prefix}/per_sample/{scope}",
                            PER_SAMPLE_COLUMNS,
                            n_layer_axis,
                        ),
                    ]
            if comp.get("aggregate"):
                parts += [
                    f"<h3>{label}: aggregate ({escape(comp['score_name'])}), positions s ≠ t</h3>",
                    layer_table(
                        summary, f"{prefix}/aggregate/others", AGGREGATE_COLUMNS, n_layer_axis
                    ),
                ]
    return parts


def definitions_section() -> list[str]:
    """The terms of the tables (:data:`DEFINITIONS`)."""
    defs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in DEFINITIONS)
    return [f"<h2>Definitions</h2><dl class='defs'>{defs}</dl>"]


def provenance_section(summary: Summary) -> list[str]:
    """Every input's provenance, folded, as JSON."""
    parts = ["<h2>Provenance</h2>"]
    for label, prov in summary.get("provenance", {}).items():
        text = escape(json.dumps(prov, indent=2, sort_keys=True, default=str))
        parts.append(f"<details><summary>{escape(label)}</summary><pre>{text}</pre></details>")
    return parts
