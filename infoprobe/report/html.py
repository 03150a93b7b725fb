"""The single self-contained ``report.html``: figures as base64 PNG, tables, the caveat.

Every number in a table is read from the summary dict that is also written as
``summary.json``; its cell carries ``data-key`` (the path in summary.json, "/"-separated)
and ``data-value`` (the JSON value), so the two files can be checked against each other.
The page loads nothing from outside (no external src or href) and opens without a server.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Literal

from infoprobe.report.figures import display_name, file_stem

CellKind = Literal["count", "rate", "auroc", "nmse", "text"]

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #1d2430; background: #f6f7f9; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; background: #fff;
  box-shadow: 0 0 12px rgba(0,0,0,.06); }
h1 { margin: 0 0 4px; font-size: 1.7em; }
h2 { margin-top: 2.2em; border-bottom: 2px solid #e3e7ee; padding-bottom: 4px; }
h3 { margin-top: 1.6em; }
.caveat { background: #fff6d8; border-left: 5px solid #e0a800; padding: 10px 14px;
  margin: 16px 0; }
.verdicts li { margin: 3px 0; font-family: ui-monospace, Menlo, Consolas, monospace;
  font-size: .92em; }
table { border-collapse: collapse; margin: 10px 0 18px; font-size: .92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e7ee; }
th { background: #eef1f6; text-align: left; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.viol { color: #b00020; font-weight: 600; }
tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 18px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e7ee; }
figcaption { color: #4a5568; font-size: .92em; margin-top: 6px; max-width: 980px; }
.broken { color: #b00020; font-weight: 600; }
dl.defs dt { font-weight: 600; margin-top: 6px; }
dl.defs dd { margin-left: 18px; }
pre { background: #f3f5f8; padding: 10px; overflow-x: auto; font-size: .82em; }
.muted { color: #6b7585; }
.answer { background: #eef4ff; border-left: 6px solid #1f4e9c; padding: 12px 18px;
  margin: 14px 0 20px; }
.answer .verdict { font-size: 1.25em; font-weight: 600; margin: 0 0 8px; }
.answer ul { margin: 6px 0; padding-left: 20px; }
.answer li { margin: 4px 0; font-size: 1.05em; }
"""

RENDER_CHECK = """
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) {
    var good = imgs[i].complete && imgs[i].naturalWidth > 0;
    imgs[i].setAttribute("data-rendered", good ? "yes" : "no");
    if (good) { ok++; } else {
      imgs[i].insertAdjacentHTML("afterend", "<p class='broken'>figure failed to load</p>");
    }
  }
  document.body.setAttribute("data-images-rendered", ok + "/" + imgs.length);
  document.body.setAttribute("data-page-height", document.documentElement.scrollHeight);
});
"""

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


def _lookup(summary: Mapping[str, Any], key: str) -> Any:
    value: Any = summary
    for part in key.split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def format_value(value: Any, kind: CellKind) -> str:
    """How a summary number is shown: rates as %, AUROC 3 decimals, NMSE 3 significant."""
    if value is None:
        return "n/a"
    if kind == "count":
        return f"{int(value):d}"
    if kind == "rate":
        return f"{100.0 * float(value):.1f}%"
    if kind == "auroc":
        return f"{float(value):.3f}"
    if kind == "nmse":
        return f"{float(value):.3g}"
    return str(value)


def cell(summary: Mapping[str, Any], key: str, kind: CellKind, css: str = "num") -> str:
    """A table cell showing summary[key], tagged with its key and exact JSON value."""
    value = _lookup(summary, key)
    return (
        f'<td class="{css}" data-key="{escape(key)}" '
        f'data-value="{escape(json.dumps(value))}">{escape(format_value(value, kind))}</td>'
    )


def _table(header: Sequence[str], rows: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


PER_SAMPLE_COLUMNS: tuple[tuple[str, str, CellKind], ...] = (
    ("agree", "per_layer/agree", "count"),
    ("omissions", "per_layer/omissions", "count"),
    ("violations", "per_layer/violations", "count"),
    ("absent", "per_layer/absent", "count"),
    ("recall", "per_layer/recall", "rate"),
    ("precision", "per_layer/precision", "rate"),
    ("violation rate", "per_layer/violation_rate", "rate"),
    ("Jaccard (pooled)", "per_layer/jaccard", "rate"),
    ("Jaccard (mean per set)", "mean_sample_jaccard", "rate"),
    ("AUROC", "auroc_per_layer", "auroc"),
)
AGGREGATE_COLUMNS: tuple[tuple[str, str, CellKind], ...] = (
    ("agree (always)", "per_layer/agree", "count"),
    ("omissions (always)", "per_layer/omissions", "count"),
    ("violations (never)", "per_layer/violations", "count"),
    ("absent (never)", "per_layer/absent", "count"),
    ("recall", "per_layer/recall", "rate"),
    ("violation rate", "per_layer/violation_rate", "rate"),
    ("sometimes: observed", "sometimes_observed", "count"),
    ("sometimes: not", "sometimes_unobserved", "count"),
    ("AUROC", "auroc_per_layer", "auroc"),
)


def _resolvable(tree: Mapping[str, Any], path: str) -> bool:
    try:
        _lookup(tree, path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _available(tree: Mapping[str, Any], path: str) -> bool:
    return _resolvable(tree, path) and _lookup(tree, path) is not None


def layer_table(
    summary: Mapping[str, Any],
    prefix: str,
    columns: Sequence[tuple[str, str, CellKind]],
    n_layer_axis: int,
) -> str:
    """Rows = layers 0..n_layer_axis-1 (L+1 rows); columns whose data is absent are left out."""
    part = _lookup(summary, prefix)
    shown = [c for c in columns if _available(part, c[1])]
    rows = []
    for layer in range(n_layer_axis):
        cells = [f'<td class="num">{layer}</td>']
        for label, path, kind in shown:
            key = f"{prefix}/{path}/{layer}"
            flagged = label.startswith("violation") and bool(_lookup(summary, key))
            cells.append(cell(summary, key, kind, "num viol" if flagged else "num"))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _table(["layer", *(c[0] for c in shown)], rows)


def predictor_table(summary: Mapping[str, Any], instrument: str) -> str:
    """InfoFlow beside other predictors against one instrument: per layer recall,
    violation rate, Jaccard, AUROC (own positions left out)."""
    comparisons = summary["comparisons"][instrument]
    part = "per_sample" if all(c.get("per_sample") for c in comparisons.values()) else "aggregate"
    metrics = (
        ("recall", "per_layer/recall", "rate"),
        ("violation rate", "per_layer/violation_rate", "rate"),
        ("Jaccard", "per_layer/jaccard", "rate"),
        ("AUROC", "auroc_per_layer", "auroc"),
    )
    names = list(comparisons)
    header = ["layer"] + [f"{m} · {display_name(n)}" for m, _, _ in metrics for n in names]
    n_layer_axis = next(iter(comparisons.values()))["shape"]["layers"]
    rows = []
    for layer in range(n_layer_axis):
        cells = [f'<td class="num">{layer}</td>']
        for _, path, kind in metrics:
            for name in names:
                key = f"comparisons/{instrument}/{name}/{part}/others/{path}/{layer}"
                if _resolvable(summary, key):
                    cells.append(cell(summary, key, kind))
                else:
                    cells.append('<td class="num">n/a</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<p class="muted">{escape(part.replace("_", "-"))} comparison</p>' + _table(
        header, rows
    )


CROSSTAB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("both", "{first} and {second}"),
    ("first_only", "{first}, not {second}"),
    ("second_only", "{second} without {first} (check: near 0)"),
    ("neither", "neither"),
)


def crosstab_table(summary: Mapping[str, Any]) -> str:
    """Per layer, the (sample, token, position ≠ t) cells by what flow and decodability saw."""
    table = summary["crosstab"]
    labels = {"first": table["first"], "second": table["second"]}
    header = ["layer"]
    for _, label in CROSSTAB_COLUMNS:
        header += [label.format(**labels), "share"]
    rows = []
    for layer in range(len(table["both"])):
        cells = [f'<td class="num">{layer}</td>']
        for part, _ in CROSSTAB_COLUMNS:
            cells.append(cell(summary, f"crosstab/{part}/{layer}", "count"))
            cells.append(cell(summary, f"crosstab/share/{part}/{layer}", "rate"))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _table(header, rows)


HEAD_COLUMNS: tuple[tuple[str, str, CellKind], ...] = (
    ("observed mode", "mode", "text"),
    ("top-1 mass", "top1", "auroc"),
    ("position specificity", "specificity", "auroc"),
    ("entropy (norm.)", "entropy", "auroc"),
    ("content dependence", "content", "auroc"),
    ("program operation", "operation", "text"),
    ("argmax agreement", "agreement", "rate"),
    ("content-blind best", "fixed_key", "rate"),
    ("mass on P", "mass_on_positions", "rate"),
)


def heads_table(summary: Mapping[str, Any]) -> str:
    """The observed program: one row per head and query group (data tokens, CLS), beside
    the operation InfoFlow's program assigns the slot the head is matched to."""
    rows = []
    for i, head in enumerate(summary["heads"]["heads"]):
        for group in ("data", "cls"):
            key = f"heads/heads/{i}/{group}"
            cells = [
                f'<td class="num">{int(head["block"])}</td>',
                f'<td class="num">{int(head["head"])}</td>',
                f"<td>{'CLS' if group == 'cls' else 'data tokens'}</td>",
            ]
            for _, name, kind in HEAD_COLUMNS:
                css = "txt" if kind == "text" else "num"
                cells.append(cell(summary, f"{key}/{name}", kind, css))
            rows.append(f"<tr>{''.join(cells)}</tr>")
    chance = summary["heads"].get("chance")
    note = "" if chance is None else f'<p class="muted">chance agreement {chance:.3f}</p>'
    return _table(["block", "head", "queries", *(c[0] for c in HEAD_COLUMNS)], rows) + note


def figure_html(png: bytes, alt: str, caption: str) -> str:
    """An <img> with the PNG inlined as a base64 data URI, and its caption."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def _notes_table(summary: Mapping[str, Any]) -> str:
    notes = summary.get("notes") or {}
    rows = [
        f"<tr><th>{escape(str(k))}</th>{cell(summary, f'notes/{k}', 'text', 'txt')}</tr>"
        for k in notes
        if not isinstance(notes[k], Mapping)
    ]
    training = summary.get("training") or {}
    for key, label in (
        ("final_val_nmse", "final validation NMSE"),
        ("best_val_nmse", "best validation NMSE"),
    ):
        if training.get(key) is not None:
            rows.append(f"<tr><th>{label}</th>{cell(summary, f'training/{key}', 'nmse')}</tr>")
    return f"<table><tbody>{''.join(rows)}</tbody></table>" if rows else ""


ROLLOUT_MEANING = (
    "Attention rollout reads this trained model's own attention patterns; InfoFlow predicts "
    "from the task and the architecture alone, before any training. Rollout explaining the "
    "observed flow better is therefore expected and is not, by itself, evidence against "
    "InfoFlow. What would count against InfoFlow: doing no better than on the random-init "
    "model, or violations its program cannot produce (above)."
)


def answer_table(summary: Mapping[str, Any], instrument: str) -> str:
    """Per answer layer: AUROC of InfoFlow, of InfoFlow on the control, of rollout, and
    the violation rates, each cell keyed into ``answer/instruments/<instrument>``."""
    entry = summary["answer"]["instruments"][instrument]
    prefix = f"answer/instruments/{instrument}"
    columns: list[tuple[str, str, CellKind]] = [("AUROC · InfoFlow", "auroc/infoflow", "auroc")]
    if entry.get("control_auroc") is not None:
        columns.append(("AUROC · InfoFlow on random-init", "control_auroc", "auroc"))
    if "rollout" in entry["auroc"]:
        columns.append(("AUROC · attention rollout", "auroc/rollout", "auroc"))
    columns.append(("violation rate · InfoFlow", "violation_rate/infoflow", "rate"))
    if "rollout" in entry["violation_rate"]:
        columns.append(("violation rate · attention rollout", "violation_rate/rollout", "rate"))
    rows = []
    for layer in summary["answer"]["layers"]:
        cells = [f'<td class="num">{layer}</td>']
        cells += [cell(summary, f"{prefix}/{path}/{layer}", kind) for _, path, kind in columns]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _table(["layer", *(c[0] for c in columns)], rows)


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
    parts = [
        "<div class='answer'>",
        f"<p class='verdict'>InfoFlow's sets against {escape(entry['label'])}</p>",
        "" if not verdict else f"<p>InfoFlow's verdict for this architecture: "
        f"<strong>{escape(verdict)}</strong>.</p>",
        _items(found["lines"]),
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


def render_html(summary: Mapping[str, Any], figures: Mapping[str, bytes]) -> str:
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
        _notes_table(summary),
    ]
    if summary.get("headline"):
        items = "".join(f"<li>{escape(v)}</li>" for v in summary["headline"])
        parts.append(
            "<h2>Headline</h2><p>Each instrument's AUROC against InfoFlow's sets (own "
            f"positions left out; controls in brackets).</p><ul class='verdicts'>{items}</ul>"
        )
    parts.append("<h2>Verdicts</h2>")
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
    if summary.get("crosstab"):
        parts += [
            "<h2>Flow beside decodability, per sample</h2>",
            "<p>Every (sample, token, position ≠ t) cell by what the two instruments saw. "
            "Flowing but not decodable: the network keeps only a function of x(s) "
            "(compressed). Decodable without flow should be near zero: it checks both "
            "instruments.</p>",
            crosstab_table(summary),
        ]
    if summary.get("heads"):
        parts += [
            "<h2>The observed program, per head</h2>",
            "<p>From the attention patterns of the compared samples: each head's observed "
            "mode beside the operation InfoFlow's program assigns it (heads matched to "
            "operations by the best assignment of per-sample argmax agreement). Where a "
            "head looks is not what it moves.</p>",
            heads_table(summary),
        ]
    multi = [k for k, v in summary["comparisons"].items() if len(v) > 1]
    if multi:
        parts += [
            "<h2>Which predictor explains the observed sets?</h2>",
            "<p>Higher recall and AUROC and a lower violation rate fit better.</p>",
        ]
        for instrument in multi:
            parts += [f"<h3>{escape(instrument)}</h3>", predictor_table(summary, instrument)]
    parts.append("<h2>Figures</h2>")
    for name, meta in summary.get("figures", {}).items():
        if name in figures and not name.startswith("answer_"):
            parts.append(figure_html(figures[name], meta.get("title", name), meta["caption"]))
    parts.append("<h2>Numbers</h2>")
    for instrument, by_predictor in summary["comparisons"].items():
        for name, comp in by_predictor.items():
            prefix = f"comparisons/{instrument}/{name}"
            label = f"{escape(display_name(name))} · {escape(instrument)}"
            for scope, words in (("others", "positions s ≠ t"), ("own", "own position s = t")):
                if comp.get("per_sample") and comp["per_sample"][scope].get("per_layer"):
                    parts.append(f"<h3>{label}: per sample, {words} (pooled per layer)</h3>")
                    parts.append(
                        layer_table(
                            summary,
                            f"{prefix}/per_sample/{scope}",
                            PER_SAMPLE_COLUMNS,
                            comp["shape"]["layers"],
                        )
                    )
            if comp.get("aggregate"):
                parts.append(
                    f"<h3>{label}: aggregate ({escape(comp['score_name'])}), positions s ≠ t</h3>"
                )
                parts.append(
                    layer_table(
                        summary,
                        f"{prefix}/aggregate/others",
                        AGGREGATE_COLUMNS,
                        comp["shape"]["layers"],
                    )
                )
    defs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in DEFINITIONS)
    parts.append(f"<h2>Definitions</h2><dl class='defs'>{defs}</dl>")
    parts.append("<h2>Provenance</h2>")
    for label, prov in summary.get("provenance", {}).items():
        text = escape(json.dumps(prov, indent=2, sort_keys=True, default=str))
        parts.append(f"<details><summary>{escape(label)}</summary><pre>{text}</pre></details>")
    body = "\n".join(p for p in parts if p)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}</title><style>{STYLE}</style><script>{RENDER_CHECK}</script>"
        f"</head><body><main>\n{body}\n</main></body></html>\n"
    )
