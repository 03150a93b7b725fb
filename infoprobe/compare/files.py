"""The comparison file (``infoprobe.comparison``, docs/report.md): every comparison as
one JSON document, written atomically and read back with its fields checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output
from infoprobe.base.errors import CompareInputError
from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.base.jsonable import jsonable
from infoprobe.compare.scopes import CAVEAT

if TYPE_CHECKING:
    from infoprobe.compare.scopes import SetComparison

FORMAT = formats.COMPARISON
SCHEMA_VERSION = 4
"""4: bootstrap intervals beside every AUROC and per-layer rate (``<name>_interval``, [...,
2] lo/hi, null where not available) and each comparison's ``interval`` (method, level,
n_resamples, seed); 3: the common header of docs/conventions.md (2 had
``format_version``, no ``created``). Files of schema 2 and 3 are still read (no
intervals)."""
AXES = ("layer", "token", "position", "tau")
"""Axes of the arrays a comparison file holds (per layer, per token, membership, sweeps)."""


def write_comparisons(
    path: str | os.PathLike,
    comparisons: Mapping[str, Mapping[str, SetComparison]],
    *,
    extra: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write comparisons as one JSON file (docs/report.md).

    comparisons: instrument → predictor →
    :class:`~infoprobe.compare.scopes.SetComparison`, stored under
    ``comparisons/<instrument>/<predictor>``; extra: further top-level entries (headline,
    crosstab, heads). Written to ``path.tmp-<pid>`` and renamed; raises OutputExistsError
    if ``path`` exists and ``overwrite`` is false.
    """
    document = jsonable(
        {
            **make_header(FORMAT, SCHEMA_VERSION, AXES),
            "caveat": CAVEAT,
            "comparisons": {
                inst: {pred: c.to_dict() for pred, c in by_pred.items()}
                for inst, by_pred in comparisons.items()
            },
            **dict(extra or {}),
            "provenance": dict(provenance or {}),
        }
    )
    with atomic_output(path, overwrite=overwrite, what="comparison file", kind=FORMAT) as tmp:
        tmp.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    return Path(path)


def read_comparisons(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by :func:`write_comparisons` (schema 2 to 4) as a dict,
    validating the fields infoprobe reads back: the header, ``comparisons`` (an object),
    ``headline`` (a list of lines) and ``provenance`` (an object).

    Raises CompareInputError naming the file and the field.
    """
    path = Path(path)
    fix = "re-run `infoprobe compare` (or `infoprobe run --overwrite`)"
    document = read_json_object(path, CompareInputError, fix)
    check_header(document, path, fmt=FORMAT, readable=range(2, SCHEMA_VERSION + 1),
                 error=CompareInputError, legacy_version="format_version")  # fmt: skip
    for name, kind in (("comparisons", dict), ("headline", list), ("provenance", dict)):
        value = document.get(name)
        if not isinstance(value, kind) or (
            kind is list and not all(isinstance(line, str) for line in value)
        ):
            expected = "a list of text lines" if kind is list else "a JSON object"
            raise CompareInputError(
                f"{path}: field {name!r} is {str(value)[:60]!r}, expected {expected}; {fix}"
            )
    return document
