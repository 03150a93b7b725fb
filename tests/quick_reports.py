"""Reports with blank figures, for tests of the stages around them.

Plain module (no pytest fixtures): ``from quick_reports import blank_figures``. Drawing
the report's PNGs is most of a report's time; tests/test_report.py checks the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from matplotlib.figure import Figure

import infoprobe.report.build as report_build


@contextmanager
def blank_figures() -> Iterator[None]:
    """Within the block, every report figure is written as one tiny blank PNG."""
    blank = report_build.render_png(Figure(figsize=(0.1, 0.1)), dpi=10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_build, "render_png", lambda fig, dpi=110: blank)
        yield
