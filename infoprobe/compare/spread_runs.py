"""The runs a spread over seeds is made of: each run's comparison file, read and checked
(its schema, what names the run, what must agree with the other runs, its per-layer
numbers), so :mod:`infoprobe.compare.spread` only sets them side by side.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infoprobe.base.errors import UserError
from infoprobe.compare.files import SCHEMA_VERSION as COMPARISON_SCHEMA
from infoprobe.compare.files import read_comparisons
from infoprobe.compare.predictors import INFOFLOW, sets_phrase

COMPARISON_FILE = "comparison.json"


def predictor(document: Mapping[str, Any]) -> str:
    """The predicted sets' key in a comparison.json (``predictor``; files written before it
    was recorded compared InfoFlow's sets)."""
    return str(document.get("predictor", INFOFLOW))


GROUP = "others"

Value = float | None
Interval = tuple[float, float] | None


class SpreadError(UserError):
    """Runs that cannot be set side by side (the message names the file, the field, the
    expected and the found value)."""


@dataclass(frozen=True)
class Metric:
    """Where a per-layer number lives in a comparison: ``comparisons/<instrument>/infoflow/
    <scope>/others/<value...>``, its interval at ``<interval>`` beside it."""

    label: str
    scope: str
    value: tuple[str, ...]
    interval: str


def comparison_file(run: str | os.PathLike) -> Path:
    """A run folder's comparison.json (or ``run`` itself, a comparison file)."""
    path = Path(run)
    if path.is_file():
        return path
    if not path.exists():
        raise SpreadError(f"{run}: no such run folder")
    found = path / COMPARISON_FILE
    if not found.is_file():
        raise SpreadError(
            f"{run}: no {COMPARISON_FILE}, expected {found} (written by `infoprobe run`, "
            "`infoprobe probe-checkpoint` or `infoprobe compare --out`)"
        )
    return found


def read_run(path: Path) -> dict[str, Any]:
    """A comparison file of the current schema (older ones have no intervals)."""
    document = read_comparisons(path)
    version = document.get("schema_version", document.get("format_version"))
    if version != COMPARISON_SCHEMA:
        raise SpreadError(
            f"{path}: field 'schema_version' is {version!r}, expected {COMPARISON_SCHEMA} "
            "(older comparison files have no within-model intervals); re-run `infoprobe "
            "probe-checkpoint` or `infoprobe run --overwrite` for that run"
        )
    return document


def _entry(provenance: Mapping[str, Any], prefix: str) -> dict[str, Any] | None:
    """The provenance entry whose label starts with ``prefix`` ("predicted sets (...)")."""
    found = [v for k, v in provenance.items() if k.startswith(prefix) and isinstance(v, dict)]
    return found[0] if found else None


def run_identity(document: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """What must agree between runs (task, n_layers, arch, model_config) and what names a
    run (seed, checkpoint_sha256, interval), from the comparison's provenance."""
    predicted = _entry(document["provenance"], "predicted sets (")
    if predicted is None:
        raise SpreadError(
            f"{path}: field 'provenance' has no 'predicted sets (...)' entry, expected the "
            "provenance `infoprobe compare` records"
        )
    for name, kind in (("task", dict), ("n_layers", int), ("arch", dict)):
        if not isinstance(predicted.get(name), kind) or isinstance(predicted.get(name), bool):
            raise SpreadError(
                f"{path}: provenance field {name!r} of the predicted sets is "
                f"{predicted.get(name)!r}, expected {'an integer' if kind is int else 'an object'}"
            )
    checkpoint = _entry(document["provenance"], "checkpoint (") or {}
    key = predictor(document)
    intervals = [
        by_pred[key].get("interval")
        for by_pred in document["comparisons"].values()
        if isinstance(by_pred, dict) and isinstance(by_pred.get(key), dict)
    ]
    seed = (checkpoint.get("train_config") or {}).get("seed")
    return {
        "task": predicted["task"],
        "n_layers": predicted["n_layers"],
        "arch": predicted["arch"],
        "model_config": checkpoint.get("model_config"),
        "seed": seed if isinstance(seed, int) else None,
        "checkpoint_sha256": predicted.get("checkpoint_sha256"),
        "interval": next((i for i in intervals if isinstance(i, dict)), None),
        "predictor": key,
    }


def _difference(expected: Any, found: Any, field: str) -> tuple[str, Any, Any] | None:
    """The first (field, expected, found) where two JSON values differ, None if equal."""
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in sorted(set(expected) | set(found)):
            inner = _difference(expected.get(key), found.get(key), f"{field}.{key}")
            if inner is not None:
                return inner
        return None
    return None if expected == found else (field, expected, found)


def check_same(first: dict[str, Any], other: dict[str, Any], first_path: Path, path: Path) -> None:
    """Refuse ``other`` unless its task, layer count, architecture and predicted sets
    (InfoFlow's or the user's) equal ``first``'s (``model_config`` compared where both
    record one)."""
    fields = ["task", "n_layers", "arch", "predictor"]
    if first["model_config"] is not None and other["model_config"] is not None:
        fields.append("model_config")
    for name in fields:
        found = _difference(first[name], other[name], name)
        if found is not None:
            field, expected, actual = found
            raise SpreadError(
                f"{path}: provenance field {field!r} is {json.dumps(actual)}, expected "
                f"{json.dumps(expected)} (as in {first_path}): a spread over seeds compares "
                "runs of one task and one architecture"
            )


def refuse_same_model(identities: Sequence[dict[str, Any]], paths: Sequence[Path]) -> None:
    """Refuse two runs of the same trained model (equal ``checkpoint_sha256``)."""
    seen: dict[str, Path] = {}
    for identity, path in zip(identities, paths, strict=True):
        sha = identity["checkpoint_sha256"]
        if sha is None:
            continue
        if sha in seen:
            raise SpreadError(
                f"{path}: provenance field 'checkpoint_sha256' is {sha[:12]}..., the same "
                f"trained model as {seen[sha]}; expected runs of different seeds (`infoprobe "
                "run --seeds` analyses its best seed: probe the others)"
            )
        seen[sha] = path


def compared_instruments(
    documents: Sequence[Mapping[str, Any]], paths: Sequence[Path]
) -> list[str]:
    """The instruments compared with the predicted sets, the same in every run."""
    found = [
        [k for k, v in doc["comparisons"].items() if isinstance(v, dict) and predictor(doc) in v]
        for doc in documents
    ]
    if not found[0]:
        raise SpreadError(
            f"{paths[0]}: field 'comparisons' has no comparison with "
            f"{sets_phrase(predictor(documents[0]))}"
        )
    for names, path in zip(found[1:], paths[1:], strict=True):
        if set(names) != set(found[0]):
            raise SpreadError(
                f"{path}: field 'comparisons' holds instruments {names}, expected "
                f"{found[0]} (as in {paths[0]})"
            )
    return found[0]


def read_metric(
    document: Mapping[str, Any], path: Path, instrument: str, metric: Metric, n_axis: int
) -> tuple[list[Value], list[Interval]]:
    """One run's values [L+1] and intervals [L+1] of ``metric``; all None where the
    instrument has no such scope (an aggregate-only probe has no per-sample scores)."""
    key = predictor(document)
    scope = document["comparisons"][instrument][key].get(metric.scope)
    if scope is None:
        return [None] * n_axis, [None] * n_axis
    where = f"comparisons/{instrument}/{key}/{metric.scope}/{GROUP}"
    group = scope.get(GROUP) if isinstance(scope, dict) else None
    values: Any = group
    for key in metric.value:
        values = values.get(key) if isinstance(values, dict) else None
    field = "/".join((where, *metric.value))
    if not _layer_list(values, n_axis, _is_value):
        raise SpreadError(
            f"{path}: field {field!r} is {str(values)[:60]!r}, expected a list of {n_axis} "
            f"numbers or nulls (layers 0..{n_axis - 1})"
        )
    values = [None if v is None else float(v) for v in values]
    intervals = group.get(metric.interval)
    if intervals is None:  # not available for this instrument
        return values, [None] * n_axis
    if not _layer_list(intervals, n_axis, _is_interval):
        raise SpreadError(
            f"{path}: field '{where}/{metric.interval}' is {str(intervals)[:60]!r}, expected "
            f"a list of {n_axis} [lo, hi] pairs (or nulls)"
        )
    pairs = [None if i is None or None in i else (float(i[0]), float(i[1])) for i in intervals]
    return values, pairs


def _is_value(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def _is_interval(v: Any) -> bool:
    return v is None or (isinstance(v, list) and len(v) == 2 and all(map(_is_value, v)))


def _layer_list(value: Any, n_axis: int, ok: Any) -> bool:
    return isinstance(value, list) and len(value) == n_axis and all(map(ok, value))
