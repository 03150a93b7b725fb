"""Reports: ``summary.json``, PNG figures and one self-contained ``report.html``.

- :mod:`infoprobe.report.figures`: matplotlib figures (each function returns a Figure).
- :mod:`infoprobe.report.answer`: what the page opens with (ROC curves, where violations
come from, what the fixed thresholds pass). - :mod:`infoprobe.report.html`: the page,
figures inlined as base64 PNG. - :mod:`infoprobe.report.build`: :class:`ReportInputs`
(from loaded sources:   :func:`~infoprobe.report.build.from_sources`) and
:func:`write_report`. - :mod:`infoprobe.report.browser_check`: open a report in headless
Chromium.
"""

from infoprobe.report.build import ReportInputError, ReportInputs, write_report

__all__ = ["ReportInputError", "ReportInputs", "write_report"]
