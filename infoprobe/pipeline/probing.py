"""Probe an activation cache and write the results: the settings
(:mod:`infoprobe.pipeline.probe_settings`), the run (:mod:`infoprobe.pipeline.probe_run`:
every (layer, token, position) probe with its controls) and the file.

:func:`probe_cache` reads the layer sites of an activation cache block by block, fits the
linear (or MLP / query) probes of every cell (l, t) and target, fits the identical probes
on the controls (shuffled pairing, a random-init cache of the same architecture on the
same samples, the h(t, 0) conditional baseline for role targets), derives observed sets
with fixed thresholds, and returns a :class:`~infoprobe.probes.results.ProbeResults`;
:func:`run_probe` writes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from infoprobe.base.atomic import locked_output, refuse_existing, remove_stale_temps
from infoprobe.pipeline.probe_run import Control, Metric, probe_cache
from infoprobe.pipeline.probe_settings import BUDGET_KEYS, PROBES, TARGETS, ProbeSettings
from infoprobe.probes.families import family
from infoprobe.probes.results import FORMAT as RESULTS_FORMAT
from infoprobe.probes.results import ProbeResults

__all__ = [
    "BUDGET_KEYS",
    "PROBES",
    "TARGETS",
    "Control",
    "Metric",
    "ProbeSettings",
    "layer_summary",
    "probe_cache",
    "run_probe",
]


@locked_output("out")
def run_probe(
    cache_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    control_path: str | os.PathLike[str] | None = None,
    settings: ProbeSettings | None = None,
    partners: dict[str, np.ndarray] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> ProbeResults:
    """:func:`probe_cache`, then write the results to ``out`` (temp name + rename).

    Raises :class:`~infoprobe.base.atomic.OutputExistsError` (a ``FileExistsError``) before any
    work if ``out`` exists and not ``overwrite``.
    """
    out_path = Path(out)
    refuse_existing(out_path, overwrite, "probe-results file", kind=RESULTS_FORMAT)
    remove_stale_temps(out_path)
    results = probe_cache(
        cache_path,
        control_path=control_path,
        settings=settings,
        partners=partners,
        progress=progress,
    )
    results.write(out_path)
    return results


def layer_summary(results: ProbeResults) -> list[dict[str, Any]]:
    """Per layer: the mean score (``score_name``: R², or the critic's V-information in
    nats), and how many positions are observed for CLS and for a typical token.

    The typical token is the median over data tokens of the count of observed positions.
    """
    probe = results.settings.get("probe", "linear")
    targets = results.settings.get("targets", "positions")
    density = family(probe).kind == "density"
    metric = "v_information" if density else "r2"
    scores = results.score(metric, targets, probe)
    observed = results.observed.get((targets, "aggregate"))
    rows = []
    for layer in results.layers:
        row: dict[str, Any] = {
            "layer": layer,
            "site": results.sites[layer],
            "score_name": "V-information (nats)" if density else "R²",
            "mean_score": float(np.nanmean(scores[layer])),
        }
        if observed is not None:
            counts = observed[layer, :, : results.T].sum(-1)
            row["cls_observed"] = int(counts[results.T])
            row["token_observed_median"] = float(np.median(counts[: results.T]))
        rows.append(row)
    return rows


def fit_lines(results: ProbeResults) -> list[str]:
    """One line per fitted dataset (the probe, each control) on how its cells' fits went
    (:mod:`infoprobe.probes.refits`): how many were refit from more starts, and which
    still failed (flagged in ``/scores/.../fit_failure``)."""
    lines = []
    for (targets, probe, control, metric), codes in sorted(results.scores.items()):
        if metric != "fit_failure":
            continue
        failed = (codes != 0).any(axis=-1)  # [L+1, T+1]
        starts = results.scores.get((targets, probe, control, "fit_starts"))
        refit = int((starts > 1).any(axis=-1).sum()) if starts is not None else 0
        line = (
            f"{probe} fits ({control}): {refit} of {failed.size} cells refit from more starts, "
            f"{int(failed.sum())} still failed"
        )
        if failed.any():
            where = [
                f"layer {layer} token {'CLS' if t == results.T else t}"
                for layer, t in np.argwhere(failed)
            ]
            line += (
                " (flagged: " + ", ".join(where[:10]) + (", ..." if len(where) > 10 else "") + ")"
            )
        lines.append(line)
    return lines
