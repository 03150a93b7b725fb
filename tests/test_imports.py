"""The InfoFlow engine imports without plotting or progress-bar libraries."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_without_matplotlib_or_tqdm():
    code = (
        "import sys, infoprobe.infoflow, infoprobe.tasks\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'tqdm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_figure_code_still_draws_when_asked():
    from infoprobe.infoflow import GridCell, grid_figure

    cells = [
        GridCell((1, 2), 8, 2.0, False),
        GridCell((1, 2), 16, 3.0, False),
        GridCell((2, 2), 8, 1.0, True),
        GridCell((2, 2), 16, 1.0, True),
    ]
    fig = grid_figure(cells)
    assert len(fig.axes[0].patches) == 2  # the two inefficient cells are hatched
