"""The report's tables. Every number in a table is read from the summary dict that is
also written as ``summary.json``; its cell carries ``data-key`` (the path in
summary.json, "/"-separated) and ``data-value`` (the JSON value), so the two files can be
checked against each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Literal

from infoprobe.compare.predictors import INFOFLOW, display_name

CellKind = Literal["count", "rate", "auroc", "nmse", "text"]


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


INTERVAL_KEYS = (
    ("/auroc_per_layer/", "/auroc_per_layer_interval/"),
    ("/per_layer/recall/", "/recall_interval/"),
    ("/per_layer/violation_rate/", "/violation_rate_interval/"),
    ("/control_auroc/", "/control_auroc_interval/"),
    ("/auroc/", "/auroc_interval/"),
    ("/violation_rate/", "/violation_rate_interval/"),
)
"""Where the bootstrap interval of a number lives in summary.json: its key with the first
matching segment replaced."""


def interval_key(key: str) -> str | None:
    """The summary.json key of the interval of the number at ``key`` (None if none)."""
    for old, new in INTERVAL_KEYS:
        if old in f"/{key}":
            return f"/{key}".replace(old, new, 1)[1:]
    return None


def _interval(summary: Mapping[str, Any], key: str) -> list[float] | None:
    found = interval_key(key)
    if found is None or not _resolvable(summary, found):
        return None
    value = _lookup(summary, found)
    ok = isinstance(value, list) and len(value) == 2 and all(v is not None for v in value)
    return value if ok else None


def cell(summary: Mapping[str, Any], key: str, kind: CellKind, css: str = "num") -> str:
    """A table cell showing summary[key], tagged with its key and exact JSON value; with
    its bootstrap interval beside it (``data-interval``) where summary.json holds one."""
    value = _lookup(summary, key)
    text = format_value(value, kind)
    interval = _interval(summary, key) if value is not None else None
    extra = ""
    if interval is not None:
        text += f" [{format_value(interval[0], kind)}, {format_value(interval[1], kind)}]"
        extra = f' data-interval="{escape(json.dumps(interval))}"'
    return (
        f'<td class="{css}" data-key="{escape(key)}" '
        f'data-value="{escape(json.dumps(value))}"{extra}>{escape(text)}</td>'
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


NULL_RULES = {"fixed": "fixed threshold", "null": "null rule (BH)"}
NULL_COLUMNS: tuple[tuple[str, str, CellKind], ...] = (
    ("cells marked", "marked", "count"),
    ("of InfoFlow's predicted cells", "share_predicted_marked", "rate"),
    ("of the other cells", "share_others_marked", "rate"),
)


def null_rule_table(summary: Mapping[str, Any], instrument: str, scope: str) -> str:
    """Per layer, the (token, position ≠ t) cells each membership rule marks ("aggregate")
    or the (sample, token, position ≠ t) cells ("per_sample"), and their shares among
    InfoFlow's predicted and other cells."""
    key = f"null_rule/instruments/{instrument}/{scope}"
    entry = _lookup(summary, key)
    header = ["layer", "rule", *(label for label, _, _ in NULL_COLUMNS)]
    rows = []
    for layer in range(len(next(iter(entry.values()))["marked"])):
        for rule in entry:
            cells = [f'<td class="num">{layer}</td>', f"<td>{escape(NULL_RULES[rule])}</td>"]
            cells += [cell(summary, f"{key}/{rule}/{field}/{layer}", kind)
                      for _, field, kind in NULL_COLUMNS]  # fmt: skip
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
    ("reads (from attention alone)", "reads", "text"),
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


def notes_table(summary: Mapping[str, Any]) -> str:
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


def answer_table(summary: Mapping[str, Any], instrument: str) -> str:
    """Per answer layer: AUROC of the predicted sets (InfoFlow's or yours), of the same on
    the control, of rollout, and the violation rates, each cell keyed into
    ``answer/instruments/<instrument>``."""
    entry = summary["answer"]["instruments"][instrument]
    prefix = f"answer/instruments/{instrument}"
    key = summary["answer"].get("predictor", INFOFLOW)
    name = display_name(key)
    columns: list[tuple[str, str, CellKind]] = [(f"AUROC · {name}", f"auroc/{key}", "auroc")]
    if entry.get("control_auroc") is not None:
        columns.append((f"AUROC · {name} on random-init", "control_auroc", "auroc"))
    if "rollout" in entry["auroc"]:
        columns.append(("AUROC · attention rollout", "auroc/rollout", "auroc"))
    columns.append((f"violation rate · {name}", f"violation_rate/{key}", "rate"))
    if "rollout" in entry["violation_rate"]:
        columns.append(("violation rate · attention rollout", "violation_rate/rollout", "rate"))
    rows = []
    for layer in summary["answer"]["layers"]:
        cells = [f'<td class="num">{layer}</td>']
        cells += [cell(summary, f"{prefix}/{path}/{layer}", kind) for _, path, kind in columns]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _table(["layer", *(c[0] for c in columns)], rows)
