"""Rate records from files: a reproduce ``results.json`` or a plain records file.

The records file (``format`` ``"infoprobe.rates.records"``, schema 1) is how a sweep
trained with another tool comes in; docs/rates.md describes it::

    {"format": "infoprobe.rates.records", "schema_version": 1,
     "records": [{"task": "intrinsic-dim D=2", "T": 32, "arch": "(1,2)", "width": 64,
                  "seed": 0, "n_params": 6369, "nmse": 0.031, "alpha": 3.0}, ...]}

``n_params_total``, ``diverged`` and ``convergence`` (the run's best NMSE at half its
steps over that at the end, :mod:`infoprobe.train.convergence`) are optional. From a
``results.json`` every finished run becomes a record: ``width`` is the grid point's
``width`` coordinate (else its FFN width), ``n_params`` the decoding parameters of its
model (:mod:`.params`), ``alpha`` InfoFlow's exponent at the point's T and E, ``arch``
the grid point's series, ``task`` its ``rate_group`` coordinate if it has one (the
series of one group are compared with each other), else the task's name and parameters
without T and seed, ``convergence`` the run's recorded ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.model import ModelConfig
from infoprobe.rates.fit import RateError, RateRecord
from infoprobe.rates.params import parameter_counts

RECORDS_FORMAT = "infoprobe.rates.records"
RECORDS_SCHEMA_VERSION = 1
RESULTS_FORMAT = "infoprobe.reproduce.results"
REQUIRED = {"task": str, "T": int, "arch": str, "width": int, "seed": int, "n_params": int}


def task_label(task: Mapping[str, Any]) -> str:
    """``{"name": "intrinsic-dim", "params": {"T": 32, "D": 2, ...}}`` → ``"intrinsic-dim
    D=2 d=4"``: name and parameters other than T and seed, sorted."""
    params = {k: v for k, v in sorted(task.get("params", {}).items()) if k not in ("T", "seed")}
    return " ".join([task["name"], *(f"{k}={v}" for k, v in params.items())])


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RateError(f"{where}: expected a number, got {value!r}")
    return float(value)


def record_from_dict(entry: Any, where: str) -> RateRecord:
    """Validate one record of a records file (``where`` names it in errors)."""
    if not isinstance(entry, Mapping):
        raise RateError(f"{where}: expected an object, got {type(entry).__name__}")
    for name, kind in REQUIRED.items():
        value = entry.get(name)
        if value is None:
            raise RateError(f"{where}: field {name!r} is missing")
        if isinstance(value, bool) or not isinstance(value, kind):
            raise RateError(f"{where}: field {name!r}: expected {kind.__name__}, got {value!r}")
    if entry.get("nmse") is None:
        raise RateError(
            f"{where}: field 'nmse' is missing: width {entry['width']} seed {entry['seed']} "
            "was not trained (leave the run out, or train it)"
        )
    nmse = _number(entry["nmse"], f"{where}: field 'nmse'")
    if not math.isnan(nmse) and nmse <= 0:
        raise RateError(f"{where}: field 'nmse': expected > 0 (NaN: diverged), got {nmse}")
    for name in ("n_params", "width", "T"):
        if entry[name] < 1:
            raise RateError(f"{where}: field {name!r}: expected >= 1, got {entry[name]}")
    alpha = entry.get("alpha")
    if alpha is not None and not _number(alpha, f"{where}: field 'alpha'") > 0:
        raise RateError(f"{where}: field 'alpha': expected > 0, got {alpha}")
    total = entry.get("n_params_total")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        raise RateError(f"{where}: field 'n_params_total': expected int, got {total!r}")
    diverged = entry.get("diverged", False)
    if not isinstance(diverged, bool):
        raise RateError(f"{where}: field 'diverged': expected true or false, got {diverged!r}")
    ratio = entry.get("convergence")
    if ratio is not None and not _number(ratio, f"{where}: field 'convergence'") >= 1:
        raise RateError(f"{where}: field 'convergence': expected a ratio >= 1, got {ratio}")
    return RateRecord(
        task=entry["task"],
        T=entry["T"],
        arch=entry["arch"],
        width=entry["width"],
        seed=entry["seed"],
        n_params=entry["n_params"],
        nmse=nmse,
        alpha=None if alpha is None else float(alpha),
        n_params_total=total,
        diverged=diverged,
        convergence=None if ratio is None else float(ratio),
    )


def records_from_results(results: Mapping[str, Any], where: str) -> list[RateRecord]:
    """Every finished run of a reproduce ``results.json`` dict as a record."""
    out = []
    for i, config in enumerate(results.get("configs", [])):
        at = f"{where}: configs[{i}] ({config.get('label')!r})"
        try:
            spec = config["config"]
            model = ModelConfig.from_dict(spec["model"])
            counts = parameter_counts(model)
            alpha = config["engine"]["exponent_at_T"]
            width = config["coords"].get("width", model.d_mlp)
            label = config["coords"].get("rate_group") or task_label(spec["task"])
        except (KeyError, TypeError, ValueError) as err:
            raise RateError(f"{at}: not a grid point summary ({err})") from None
        for run in config.get("runs", []):
            out.append(
                record_from_dict(
                    {
                        "task": label,
                        "T": model.n_ctx,
                        "arch": config["series"],
                        "width": width,
                        "seed": run["seed"],
                        "n_params": counts["decoding"],
                        "n_params_total": counts["total"],
                        "nmse": run["val_nmse"],
                        "alpha": alpha,
                        "diverged": str(run.get("stopped", "")).startswith("non-finite"),
                        "convergence": (run.get("convergence") or {}).get("ratio"),
                    },
                    f"{at} seed {run.get('seed')}",
                )
            )
    return out


def load_records(paths: Iterable[str | Path]) -> list[RateRecord]:
    """Records from each file (a reproduce ``results.json`` or a records file), pooled;
    the same run (task, T, arch, width, seed) twice is refused."""
    out: list[RateRecord] = []
    for path in map(Path, paths):
        data = read_json_object(path, RateError)
        if data.get("format") == RESULTS_FORMAT:
            out += records_from_results(data, str(path))
            continue
        check_header(data, path, fmt=RECORDS_FORMAT, error=RateError,
                     readable=range(1, RECORDS_SCHEMA_VERSION + 1))  # fmt: skip
        entries = data.get("records")
        if not isinstance(entries, list):
            raise RateError(f"{path}: field 'records': expected a list, got {entries!r}")
        out += [record_from_dict(e, f"{path}: records[{i}]") for i, e in enumerate(entries)]
    seen: dict[tuple, int] = {}
    for r in out:
        key = (*r.group, r.width, r.seed)
        seen[key] = seen.get(key, 0) + 1
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        raise RateError(f"the same run appears more than once: {twice[:3]}")
    return out


def records_file(records: Sequence[RateRecord]) -> dict[str, Any]:
    """A records file's content (header + records), e.g. to export a sweep."""
    rows = []
    for r in records:
        row = {
            "task": r.task,
            "T": r.T,
            "arch": r.arch,
            "width": r.width,
            "seed": r.seed,
            "n_params": r.n_params,
            "nmse": r.nmse,
            "alpha": r.alpha,
            "diverged": r.diverged,
        }
        if r.n_params_total is not None:
            row["n_params_total"] = r.n_params_total
        if r.convergence is not None:
            row["convergence"] = r.convergence
        rows.append(row)
    return {**make_header(RECORDS_FORMAT, RECORDS_SCHEMA_VERSION), "records": rows}
