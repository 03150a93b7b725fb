"""Reports: ``summary.json``, PNG figures and one self-contained ``report.html``.

- :mod:`infoprobe.report.inputs`: :class:`ReportInputs` (from loaded sources:
  :func:`~infoprobe.report.inputs.from_sources`).
- :mod:`infoprobe.report.figures`: shared colours and names, the score grids;
  :mod:`infoprobe.report.sample_figure`: the per-sample view; :mod:`infoprobe.report.curves`:
  ROC curves, threshold sweeps, the training curve (each function returns a Figure).
- :mod:`infoprobe.report.figure_set`: every figure of a report with its title and caption.
- :mod:`infoprobe.report.answer`: what the page opens with (ROC curves, where violations
  come from, what the fixed thresholds pass); :mod:`infoprobe.report.summary`: the
  summary.json dict.
- :mod:`infoprobe.report.html`: the page skeleton (style, figures inlined as base64 PNG);
  :mod:`infoprobe.report.tables` and :mod:`infoprobe.report.sections`: its tables and
  sections.
- :mod:`infoprobe.report.build`: :func:`write_report` (the folder).
- :mod:`infoprobe.report.browser_check`: open a report in headless Chromium.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "write_report": "infoprobe.report.build",
    "ReportInputError": "infoprobe.report.inputs",
    "ReportInputs": "infoprobe.report.inputs",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
