"""Plain-text tables for the terminal: aligned columns, empty ones dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def format_table(rows: Sequence[Mapping[str, str]]) -> str:
    """Plain-text table with aligned columns; empty columns are dropped."""
    if not rows:
        return "(no grid points)"
    columns = [c for c in rows[0] if any(r[c] for r in rows)]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    line = "  ".join(c.ljust(widths[c]) for c in columns)
    rule = "  ".join("-" * widths[c] for c in columns)
    body = ["  ".join(r[c].ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join([line, rule, *body])
