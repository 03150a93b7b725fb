"""The phase boundary at a glance: verdict and exponent over sequence lengths and heads."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from infoprobe.tasks import Task, TaskError, make_task

from .arch import Architecture
from .cost import DEFAULT_KTH_LAW, KthLaw
from .predict import predict

if TYPE_CHECKING:  # the engine imports without matplotlib; only the figure needs it
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

MAX_DEFAULT_ROWS = 36


@dataclass(frozen=True)
class GridCell:
    """One (heads, T) cell: ``alpha`` and ``efficient`` are None where T is invalid."""

    heads: tuple[int, ...]
    T: int
    alpha: float | None
    efficient: bool | None


def default_heads(
    arch: Architecture, extra: Sequence[tuple[int, ...]] = ()
) -> list[tuple[int, ...]]:
    """Every head vector with entries 1..H (H = one more than the largest given) if there
    are at most 36 of them, else just the given architecture and ``extra``."""
    top = max(max(arch.heads), *(max(h) for h in extra if h)) + 1
    if top**arch.n_layers <= MAX_DEFAULT_ROWS:
        return list(itertools.product(range(1, top + 1), repeat=arch.n_layers))
    return sorted({arch.heads, *extra})


def prediction_grid(
    task: Task,
    arch: Architecture,
    T_values: Sequence[int],
    heads_list: Sequence[tuple[int, ...]],
    *,
    kth_law: str | KthLaw = DEFAULT_KTH_LAW,
) -> list[GridCell]:
    """Predict ``task`` (its T replaced by each of ``T_values``) on ``arch`` with each head
    vector of ``heads_list`` (same depth, width and positional encoding)."""
    cells = []
    for heads in heads_list:
        variant = arch.with_heads(tuple(heads))
        for T in T_values:
            try:
                sized = make_task(task.name, **{**task.params(), "T": T})
            except TaskError:
                cells.append(GridCell(tuple(heads), T, None, None))
                continue
            p = predict(sized, variant, kth_law=kth_law, search_min_heads=False)
            cells.append(GridCell(tuple(heads), T, p.exponent_at_T, p.efficient))
    return cells


def _axes(cells: Sequence[GridCell]) -> tuple[list[tuple[int, ...]], list[int]]:
    rows = list(dict.fromkeys(c.heads for c in cells))
    cols = list(dict.fromkeys(c.T for c in cells))
    return rows, cols


def format_grid(cells: Sequence[GridCell]) -> str:
    """Text table: rows = heads per layer, columns = T, cells = exponent and verdict
    ("ok" efficient, "X" inefficient, "-" T invalid for the task)."""
    rows, cols = _axes(cells)
    lookup = {(c.heads, c.T): c for c in cells}
    width = 10
    lines = ["heads \\ T".ljust(12) + "".join(f"{T:>{width}}" for T in cols)]
    for heads in rows:
        text = []
        for T in cols:
            cell = lookup[(heads, T)]
            if cell.alpha is None:
                text.append(f"{'-':>{width}}")
            else:
                text.append(f"{cell.alpha:>{width - 3}.2f} {'ok' if cell.efficient else 'X ':2}")
        lines.append(",".join(map(str, heads)).ljust(12) + "".join(text))
    lines.append("cells: exponent alpha at T (parameters ~ eps^-alpha); ok = efficient (alpha "
                 "bounded in T), X = inefficient")  # fmt: skip
    return "\n".join(lines)


def grid_figure(cells: Sequence[GridCell], title: str = "") -> Figure:
    """Heat map of the exponent over (heads, T); inefficient cells are hatched."""
    rows, cols = _axes(cells)
    lookup = {(c.heads, c.T): c for c in cells}
    alpha = np.array([[lookup[(h, T)].alpha or np.nan for T in cols] for h in rows], dtype=float)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.2 + 0.9 * len(cols), 1.0 + 0.45 * len(rows)))
    ax = fig.add_subplot()
    image = ax.imshow(alpha, aspect="auto", cmap="viridis")
    for i, heads in enumerate(rows):
        for j, T in enumerate(cols):
            cell = lookup[(heads, T)]
            if cell.efficient is False:
                ax.add_patch(_hatch(j, i))
            label = "-" if cell.alpha is None else f"{cell.alpha:.2g}"
            ax.text(j, i, label, ha="center", va="center", color="white", fontsize=8)
    ax.set_xticks(range(len(cols)), [str(T) for T in cols])
    ax.set_yticks(range(len(rows)), [",".join(map(str, h)) for h in rows])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("heads per layer")
    ax.set_title(title or "InfoFlow exponent alpha (hatched: inefficient)")
    fig.colorbar(image, ax=ax, label="alpha")
    fig.tight_layout()
    return fig


def _hatch(j: int, i: int) -> Rectangle:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="red", lw=0)
