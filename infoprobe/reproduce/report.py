"""The report section of a claim: its table, checks and figures as self-contained HTML.

Reuses the report machinery of :mod:`infoprobe.report` (page style, image-render check,
base64 figures, PNG rendering). :func:`section_html` returns one ``<section>`` that a
larger report can embed; :func:`page_html` wraps sections into a standalone page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from infoprobe.base.markers import mark_html
from infoprobe.compare.scopes import CAVEAT
from infoprobe.report.html import RENDER_CHECK, STYLE, figure_html
from infoprobe.reproduce.results import rate_notes, rates_text, table_rows

CHECK_STATES = {True: "PASS", False: "FAIL", None: "n/a"}
REPORT_FORMAT = "infoprobe.reproduce.report"
"""Format marker of a sweep's report.html (its ``infoprobe-format`` meta tag)."""
FIGURE_FORMAT = "infoprobe.reproduce.figure"
"""Format marker of a sweep's figure PNGs (their ``infoprobe-format`` text chunk)."""


def _table(rows: Sequence[Mapping[str, str]]) -> str:
    if not rows:
        return "<p class='muted'>no grid points</p>"
    columns = [c for c in rows[0] if any(r[c] for r in rows)]
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(r[c])}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section_html(
    results: Mapping[str, Any],
    figures: Mapping[str, tuple[bytes, str]],
    *,
    probes_shown: bool = False,
) -> str:
    """One claim: paper claim, profile departures, checks, table, figures (PNG, caption)."""
    parts = [
        f"<section id='{escape(results['claim'])}'>",
        f"<h2>{escape(results['claim'])}: {escape(results['title'])}</h2>",
        f"<p><strong>Paper:</strong> {escape(results['paper_claim'])}</p>",
        f"<p><strong>Profile:</strong> {escape(results['profile'])}; "
        f"{results['n_finished']}/{results['n_runs']} runs finished, "
        f"{results['total_seconds']:.0f} s of run time, backend "
        f"{escape(results.get('backend') or '?')}.</p>",
    ]
    if results["departures"]:
        items = "".join(f"<li>{escape(d)}</li>" for d in results["departures"])
        parts.append(f"<p>This profile departs from the paper:</p><ul>{items}</ul>")
    if probes_shown:
        parts.append(f"<div class='caveat'><strong>Caveat.</strong> {escape(CAVEAT)}</div>")
    if results["checks"]:
        items = "".join(
            f"<li>[{CHECK_STATES[c['passed']]}] ({'acceptance' if c['gate'] else 'observed'}) "
            f"{escape(c['text'])}: {escape(c['detail'])}</li>"
            for c in results["checks"]
        )
        parts.append(f"<h3>Checks (thresholds fixed before the runs)</h3><ul>{items}</ul>")
    parts.append(
        "<h3>InfoFlow's prediction next to the measurement</h3>"
        "<p class='muted'>best = lowest validation NMSE over seeds (the paper's statistic); "
        "every seed is listed.</p>"
    )
    parts.append(_table(table_rows(results)))
    notes = rate_notes(results)
    if notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in notes)
        parts.append(f"<h3>InfoFlow's rates at this size</h3><ul>{items}</ul>")
    rates = rates_text(results)
    if rates:
        parts.append(f"<h3>Fitted rates (infoprobe rates)</h3><pre>{escape(rates)}</pre>")
    for name, (png, caption) in figures.items():
        parts.append(figure_html(png, name, caption))
    parts.append("</section>")
    return "\n".join(parts)


def page_html(title: str, sections: Sequence[str]) -> str:
    """A standalone page (no external resources) around report sections, marked as a
    sweep's report (:data:`REPORT_FORMAT`)."""
    body = "\n".join(sections)
    return mark_html(
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{STYLE}</style><script>{RENDER_CHECK}</script>"
        f"</head><body><main>\n<h1>{escape(title)}</h1>\n{body}\n</main></body></html>\n",
        REPORT_FORMAT,
    )
