"""Gather a sweep's run records into ``results.json`` and print its tables.

``results.json`` holds the header of docs/conventions.md (schema 2; schema 1 kept its
version in ``format_version``), the claim, the profile (with its departures from the
paper), every run's record (config, seed, NMSE history, times, analyses), and one
summary per grid point: InfoFlow's prediction for that architecture (verdict, exponent
alpha(T), minimum heads, comparison number) next to the best validation NMSE over seeds
(the paper's statistic) and every seed's value, plus the profile's checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infoprobe.base.atomic import atomic_output
from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.base.texttable import format_table
from infoprobe.infoflow import predict
from infoprobe.reproduce.grid import Claim, GridPoint, Profile, ReproduceError, RunSpec
from infoprobe.train.convergence import convergence

RESULTS = "results.json"
RESULTS_FORMAT = "infoprobe.reproduce.results"
RESULTS_SCHEMA_VERSION = 2
"""2: the common header (``schema_version`` instead of ``format_version``, UTC ``...Z``)."""


def engine_summary(point: GridPoint) -> dict[str, Any]:
    """InfoFlow's prediction for a grid point's task and architecture (JSON-ready)."""
    prediction = predict(point.build_task(), point.model_config())
    T = prediction.task.T
    return {
        "verdict": prediction.verdict,
        "exponent": str(prediction.exponent),
        "exponent_at_T": prediction.exponent(T),
        "exponent_slope": prediction.exponent.slope,
        "min_heads": None if prediction.min_heads is None else list(prediction.min_heads),
        "comparison_number": prediction.comparison_number,
        "comparison_order": prediction.comparison_order,
    }


def _run_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("run_id", "seed", "best_val_nmse", "test_nmse", "best_step", "seconds", "stopped")
    out = {k: record[k] for k in keys}
    out["val_nmse"] = record["best_val_nmse"]
    out["convergence"] = record.get("convergence") or convergence(record.get("history", []))
    out["analyses"] = record.get("analyses", {})
    return out


def point_summary(
    point: GridPoint, records: Sequence[Mapping[str, Any]], seeds: Sequence[int]
) -> dict[str, Any]:
    """One grid point: engine prediction, every seed, the best over seeds, missing seeds."""
    runs = sorted((_run_summary(r) for r in records), key=lambda r: r["seed"])
    best = min(runs, key=lambda r: r["val_nmse"], default=None)
    done = {r["seed"] for r in runs}
    return {
        "key": point.key,
        "label": point.label,
        "series": point.series,
        "coords": dict(point.coords),
        "config": point.spec(),
        "n_params": records[0]["n_params"] if records else None,
        "engine": engine_summary(point),
        "runs": runs,
        "best": None
        if best is None
        else {k: best[k] for k in ("seed", "run_id", "val_nmse", "test_nmse")},
        "missing_seeds": [s for s in seeds if s not in done],
    }


def gather(
    claim: Claim,
    profile: Profile,
    specs: Sequence[RunSpec],
    records: Sequence[Mapping[str, Any]],
    *,
    backend: str = "",
) -> dict[str, Any]:
    """The results dict of a sweep from its run specs and the finished runs' records."""
    by_id = {r["run_id"]: r for r in records}
    points: dict[str, tuple[GridPoint, list[int]]] = {}
    for spec in specs:
        points.setdefault(spec.point.key, (spec.point, []))[1].append(spec.seed)
    configs = []
    for key, (point, seeds) in points.items():
        mine = [by_id[s.run_id] for s in specs if s.point.key == key and s.run_id in by_id]
        configs.append(point_summary(point, mine, seeds))
    evaluated = []
    for check in profile.checks:
        passed, detail = check.evaluate(configs)
        evaluated.append(
            {"text": check.text, "gate": check.gate, "passed": passed, "detail": detail}
        )
    ordered = [by_id[s.run_id] for s in specs if s.run_id in by_id]
    return {
        **make_header(RESULTS_FORMAT, RESULTS_SCHEMA_VERSION),
        "claim": claim.name,
        "title": claim.title,
        "paper_claim": claim.paper,
        "profile": profile.name,
        "departures": list(profile.departures),
        "expected_runtime": profile.expected_runtime,
        "backend": backend,
        "seeds": max((len(s) for _, s in points.values()), default=0),
        "n_runs": len(specs),
        "n_finished": len(ordered),
        "total_seconds": round(sum(r["seconds"] for r in ordered), 1),
        "configs": configs,
        "checks": evaluated,
        "runs": ordered,
    }


def write_results(results: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write ``out_dir/results.json`` (temp name + rename), replacing only a results.json
    of a sweep (its ``format``); one that holds the same results but for its ``created``
    time is kept as it is (a resumed sweep that finished nothing new changes no file)."""
    path = Path(out_dir) / RESULTS
    if _same_results(path, results):
        return path
    with atomic_output(path, overwrite=True, what="sweep results", kind=RESULTS_FORMAT) as tmp:
        tmp.write_text(json.dumps(results, indent=1, allow_nan=True))
    return path


def _same_results(path: Path, results: Mapping[str, Any]) -> bool:
    """Whether ``path`` is a JSON file holding ``results`` but for the ``created`` field."""
    try:
        old = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(old, dict):
        return False

    def text(document: Mapping[str, Any]) -> str:
        kept = {key: value for key, value in document.items() if key != "created"}
        return json.dumps(kept, indent=1, allow_nan=True)

    return text(old) == text(results)


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a sweep's results.json (schema 1, with ``format_version``, or 2), refusing
    another file or a newer schema by name."""
    path = Path(path)
    results = read_json_object(path, ReproduceError)
    check_header(results, path, fmt=RESULTS_FORMAT, error=ReproduceError,
                 readable=range(1, RESULTS_SCHEMA_VERSION + 1),
                 legacy_version="format_version")  # fmt: skip
    return results


# ---- tables --------------------------------------------------------------------------------
def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def analysis_text(analyses: Mapping[str, Any]) -> str:
    """A short summary of a run's analyses for one table cell."""
    parts = []
    if "cls_attention" in analyses:
        row = analyses["cls_attention"]["blocks"][0][0]
        parts.append("CLS attn " + " ".join(f"{v:.2f}" for v in row))
    if "cls_probe" in analyses:
        r2 = analyses["cls_probe"]["r2"][-1]
        parts.append("CLS probe R2 " + " ".join(f"{v:.2f}" for v in r2))
    if "role_probe" in analyses:
        ratios = [
            f"h{r['head']}r{r['rank']} {r['ratio']:.2f}"
            for r in analyses["role_probe"]["roles"]
            if r["block"] == 0
        ]
        parts.append("error ratio " + ", ".join(ratios))
    return "; ".join(parts)


def table_rows(results: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per grid point: prediction next to the measured NMSE (best and each seed)."""
    rows = []
    for config in results["configs"]:
        engine, best = config["engine"], config["best"]
        seeds = " ".join(f"s{r['seed']}:{_g(r['val_nmse'])}" for r in config["runs"])
        if config["missing_seeds"]:
            seeds += " missing:" + ",".join(map(str, config["missing_seeds"]))
        best_run = next((r for r in config["runs"] if best and r["seed"] == best["seed"]), None)
        rows.append(
            {
                "config": config["label"],
                "params": "-" if config["n_params"] is None else str(config["n_params"]),
                "InfoFlow": engine["verdict"],
                "alpha(T)": f"{engine['exponent']} = {engine['exponent_at_T']:.3g}",
                "min heads": "-"
                if engine["min_heads"] is None
                else ",".join(map(str, engine["min_heads"])),
                "best val NMSE": _g(best and best["val_nmse"]),
                "test NMSE": _g(best and best["test_nmse"]),
                "every seed (val NMSE)": seeds,
                "analyses (best seed)": analysis_text(best_run["analyses"]) if best_run else "",
            }
        )
    return rows


def rate_notes(results: Mapping[str, Any]) -> list[str]:
    """For each task of a sweep trained on architectures InfoFlow gives different verdicts,
    whether its cost law predicts the same rate for them at the task's T, in words
    (:func:`infoprobe.infoflow.rate_comparison`); a verdict measured where the rates are
    equal is a constant factor, not the law's separation."""
    from infoprobe.infoflow import rate_comparison
    from infoprobe.model import ModelConfig
    from infoprobe.tasks import task_from_dict

    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for config in results["configs"]:
        by_task.setdefault(json.dumps(config["config"]["task"], sort_keys=True), []).append(config)
    notes = []
    for configs in by_task.values():
        if len({c["engine"]["verdict"] for c in configs}) < 2:
            continue
        task = task_from_dict(configs[0]["config"]["task"])
        named = {}
        for c in configs:
            model = ModelConfig.from_dict(c["config"]["model"])
            named.setdefault(c["series"], predict(task, model, search_min_heads=False).exponent)
        params = ", ".join(f"{k}={v}" for k, v in task.params().items() if k not in ("seed",))
        notes.append(f"{task.name} {params}: {rate_comparison(named, task.T)}")
    return notes


def rates_text(results: Mapping[str, Any]) -> str | None:
    """The cost-law fits of a capacity sweep (grid points with a ``width`` coordinate) as
    :func:`infoprobe.rates.format_rates` prints them, or why they cannot be made yet;
    None for a sweep without widths."""
    from infoprobe.rates import RateError, fit_rates, format_rates, records_from_results

    if not any("width" in c["coords"] for c in results["configs"]):
        return None
    try:
        return format_rates(fit_rates(records_from_results(results, "results.json")))
    except RateError as err:
        return f"rates: no fit yet ({err})"


def format_summary(results: Mapping[str, Any]) -> str:
    """Everything printed at the end of a sweep: header, departures, table, checks."""
    lines = [
        f"{results['claim']} ({results['profile']} profile): {results['title']}",
        f"paper: {results['paper_claim']}",
    ]
    if results["departures"]:
        lines.append("this profile departs from the paper: " + "; ".join(results["departures"]))
    lines += [
        f"runs finished: {results['n_finished']}/{results['n_runs']}, "
        f"{results['total_seconds']:.0f} s of run time; best = lowest validation NMSE "
        "over seeds (the paper's statistic), every seed listed",
        "",
        format_table(table_rows(results)),
        "",
        *(f"rate: {note}" for note in rate_notes(results)),
        *([rates, ""] if (rates := rates_text(results)) else []),
    ]
    for check in results["checks"]:
        state = {True: "PASS", False: "FAIL", None: "n/a "}[check["passed"]]
        kind = "acceptance" if check["gate"] else "observed"
        lines.append(f"[{state}] ({kind}) {check['text']}: {check['detail']}")
    return "\n".join(lines)
