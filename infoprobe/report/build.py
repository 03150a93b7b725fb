"""Write a report folder: ``summary.json``, one PNG per figure and ``report.html``.

The folder is assembled under ``NAME.tmp-<pid>`` and renamed onto ``NAME`` when complete.
Figures are rendered with matplotlib's Agg canvas (no display needed, no pyplot state).
What goes in is :mod:`infoprobe.report.inputs` (:func:`from_sources`, importable from
here too), the figures :mod:`infoprobe.report.figure_set`, the numbers
:mod:`infoprobe.report.summary`, the page :mod:`infoprobe.report.sections`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from infoprobe.base.atomic import atomic_output
from infoprobe.report.figure_set import build_figures
from infoprobe.report.inputs import ReportInputs, from_sources
from infoprobe.report.sections import render_html
from infoprobe.report.summary import FORMAT, build_summary

__all__ = ["FORMAT", "HTML", "SUMMARY", "from_sources", "render_png", "write_report"]

SUMMARY = "summary.json"
HTML = "report.html"


def render_png(fig: Figure, dpi: int = 110) -> bytes:
    """PNG bytes of a figure through the Agg canvas."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor="white", bbox_inches="tight")
    return buffer.getvalue()


def write_report(
    out_dir: str | Path, inputs: ReportInputs, *, overwrite: bool = False, dpi: int = 110
) -> Path:
    """Write ``summary.json``, ``<figure>.png`` and ``report.html`` into ``out_dir``.

    The folder is built as ``out_dir.tmp-<pid>`` and renamed when complete. Raises
    ``OutputExistsError`` if ``out_dir`` exists and ``overwrite`` is false. Returns the path
    of report.html.
    """
    out_dir = Path(out_dir)
    with atomic_output(
        out_dir, overwrite=overwrite, directory=True, what="report folder", kind=FORMAT
    ) as tmp:
        pngs: dict[str, bytes] = {}
        meta: dict[str, dict[str, str]] = {}
        for name, (fig, title, caption) in build_figures(inputs).items():
            pngs[name] = render_png(fig, dpi)
            (tmp / f"{name}.png").write_bytes(pngs[name])
            meta[name] = {"file": f"{name}.png", "title": title, "caption": caption}
        summary = build_summary(inputs, meta)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
        (tmp / HTML).write_text(render_html(summary, pngs), encoding="utf-8")
    return out_dir / HTML
