"""The spread of a comparison over training seeds (docs/report.md, "Spread over seeds").

A run folder's ``comparison.json`` measures one trained model: the interval beside each
AUROC is a bootstrap over that model's compared samples (*within-model*). It does not
include how much the number moves between models trained with other seeds, which is what
a claim about the architecture rests on. :func:`seed_spread` reads the comparison files of
several runs of one task and one architecture and returns, per instrument, metric and
layer, every run's value with its within-model interval and, across the runs, n, mean,
sample standard deviation, min and max. Only InfoFlow's sets and the other positions
(s ≠ t, the headline's scope) are read.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output
from infoprobe.base.header import make_header
from infoprobe.compare.predictors import INFOFLOW
from infoprobe.compare.spread_runs import (
    GROUP,
    Interval,
    Metric,
    SpreadError,
    Value,
    check_same,
    compared_instruments,
    comparison_file,
    read_metric,
    read_run,
    refuse_same_model,
    run_identity,
)

FORMAT = formats.SPREAD
SCHEMA_VERSION = 1

RULE = (
    "A claim about one trained model rests on its within-model interval (in brackets: a "
    "bootstrap over that model's compared samples); a claim about the architecture rests "
    "on the spread over seeds (mean, sd, min and max over the runs), which the "
    "within-model intervals do not include."
)

METRICS = {
    "auroc": Metric(
        "AUROC against InfoFlow's per-sample sets",
        "per_sample", ("auroc_per_layer",), "auroc_per_layer_interval",
    ),
    "aggregate_auroc": Metric(
        "AUROC against InfoFlow's aggregate sets (always against never predicted)",
        "aggregate", ("auroc_per_layer",), "auroc_per_layer_interval",
    ),
    "recall": Metric(
        "share of predicted positions carried (per sample, fixed threshold)",
        "per_sample", ("per_layer", "recall"), "recall_interval",
    ),
    "violation_rate": Metric(
        "share of the other positions carried (per sample, fixed threshold)",
        "per_sample", ("per_layer", "violation_rate"), "violation_rate_interval",
    ),
}  # fmt: skip
"""name → where it is read; the headline's numbers (per-sample AUROC, then the shares)
and the aggregate AUROC."""
PRINTED = ("auroc", "aggregate_auroc")
"""The metrics :meth:`SeedSpread.lines` prints by default."""


@dataclass(frozen=True)
class Run:
    """One run: ``folder`` as given, its ``comparison`` file, the training ``seed`` and the
    ``checkpoint_sha256`` of the model it analysed (None where not recorded), and
    ``interval``: how its within-model intervals were made (level, n_resamples, ...)."""

    folder: str
    comparison: str
    seed: int | None
    checkpoint_sha256: str | None
    interval: dict[str, Any] | None


@dataclass(frozen=True)
class MetricSpread:
    """One metric of one instrument over R runs and L+1 layers.

    values: [R][L+1], each run's value (None where undefined, e.g. a layer where InfoFlow
    predicts nothing besides the own position); intervals: [R][L+1], its within-model
    interval (lo, hi) or None; across the runs where the value is defined, per layer
    [L+1]: n, mean, std (sample standard deviation, ddof 1; None where n < 2), min, max
    (None where n = 0).
    """

    name: str
    metric: Metric
    values: tuple[tuple[Value, ...], ...]
    intervals: tuple[tuple[Interval, ...], ...]
    n: tuple[int, ...]
    mean: tuple[Value, ...]
    std: tuple[Value, ...]
    min: tuple[Value, ...]
    max: tuple[Value, ...]

    @classmethod
    def of(cls, name: str, values: Sequence[Sequence[Value]], intervals: Sequence) -> MetricSpread:
        """The spread of ``values`` [R][L+1] (with their ``intervals`` [R][L+1])."""
        layers = [[v for v in column if v is not None] for column in zip(*values, strict=True)]
        return cls(
            name, METRICS[name], tuple(map(tuple, values)), tuple(map(tuple, intervals)),
            n=tuple(len(d) for d in layers),
            mean=tuple(statistics.fmean(d) if d else None for d in layers),
            std=tuple(statistics.stdev(d) if len(d) > 1 else None for d in layers),
            min=tuple(min(d) if d else None for d in layers),
            max=tuple(max(d) if d else None for d in layers),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        intervals = [[None if i is None else list(i) for i in run] for run in self.intervals]
        return {
            "label": self.metric.label,
            "field": "/".join((self.metric.scope, GROUP, *self.metric.value)),
            "per_run": [list(v) for v in self.values],
            "per_run_interval": intervals,
            **{k: list(getattr(self, k)) for k in ("n", "mean", "std", "min", "max")},
        }


@dataclass(frozen=True)
class SeedSpread:
    """Runs of one task and architecture, side by side.

    runs: the R runs, in the order given; task, arch: as recorded by the predicted sets
    (``arch``: heads per layer, widths); n_layers: L (the lists run over layers 0..L);
    instruments: instrument → metric name (:data:`METRICS`) → :class:`MetricSpread`.
    """

    runs: tuple[Run, ...]
    task: dict[str, Any]
    arch: dict[str, Any]
    n_layers: int
    instruments: dict[str, dict[str, MetricSpread]]
    predictor: str = INFOFLOW
    """The predicted sets compared (``infoflow``, or ``your_sets``: the user's)."""

    def to_dict(self) -> dict[str, Any]:
        """Every number as JSON (docs/report.md, "Spread over seeds"); no header."""
        return {
            "rule": RULE,
            "predictor": self.predictor,
            "task": self.task,
            "arch": self.arch,
            "n_layers": self.n_layers,
            "runs": [vars(run) for run in self.runs],
            "instruments": {
                inst: {name: m.to_dict() for name, m in metrics.items()}
                for inst, metrics in self.instruments.items()
            },
        }

    def lines(self, metrics: Sequence[str] = PRINTED) -> list[str]:
        """The printed tables: per metric and layer, one row per run (value [interval])
        and the spread over the runs, one column per instrument; then :data:`RULE`."""
        params = ", ".join(f"{k}={v}" for k, v in self.task.get("params", {}).items())
        out = [
            f"spread over {len(self.runs)} runs of {self.task.get('name')} ({params}), "
            f"heads per layer {self.arch.get('heads')}:"
        ]
        for i, run in enumerate(self.runs, 1):
            seed = "" if run.seed is None else f" (seed {run.seed})"
            out.append(f"  run {i}: {run.folder}{seed}")
        levels = {None if r.interval is None else r.interval.get("level") for r in self.runs}
        level = f"{next(iter(levels)):.0%} " if len(levels) == 1 and None not in levels else ""
        for name in metrics:
            out.append(
                f"{METRICS[name].label}, own positions left out; each run's value "
                f"[{level}within-model interval], then the spread over the runs:"
            )
            out += self._table(name)
        out.append(f"rule: {RULE}")
        return out

    def _table(self, name: str) -> list[str]:
        """The layer tables of one metric."""
        spreads = [m[name] for m in self.instruments.values()]
        width = max(22, *(len(i) + 2 for i in self.instruments))
        out = []
        for layer in range(self.n_layers + 1):
            if not any(s.n[layer] for s in spreads):
                out.append(f"  layer {layer}: undefined in every run")
                continue
            rows = [("", list(self.instruments))]
            for r in range(len(self.runs)):
                cells = [_value(s.values[r][layer], s.intervals[r][layer]) for s in spreads]
                rows.append((f"run {r + 1}", cells))
            rows.append(("mean ± sd", [_mean_sd(s, layer, len(self.runs)) for s in spreads]))
            rows.append(("min .. max", [_min_max(s, layer) for s in spreads]))
            out.append(f"  layer {layer}")
            out += [f"    {label:<12}" + "".join(f"{c:<{width}}" for c in cells).rstrip()
                    for label, cells in rows]  # fmt: skip
        return out


def _number(value: Value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _value(value: Value, interval: Interval) -> str:
    if value is None:
        return "n/a"
    bounds = "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
    return _number(value) + bounds


def _mean_sd(spread: MetricSpread, layer: int, n_runs: int) -> str:
    n = spread.n[layer]
    if n == 0:
        return "n/a"
    few = "" if n == n_runs else f" (n={n})"
    return f"{_number(spread.mean[layer])} ± {_number(spread.std[layer])}{few}"


def _min_max(spread: MetricSpread, layer: int) -> str:
    if spread.n[layer] == 0:
        return "n/a"
    return f"{_number(spread.min[layer])} .. {_number(spread.max[layer])}"


def seed_spread(runs: Sequence[str | os.PathLike]) -> SeedSpread:
    """The spread over ``runs`` (run folders, or comparison files) of one task, one
    architecture and one layer count, analysing different trained models.

    Raises :class:`SpreadError` naming the file, the field, the expected and the found
    value for fewer than 2 runs, a missing comparison.json, one older than schema 4
    (no intervals), another task, architecture, layer count or set of instruments, or
    the same trained model twice.
    """
    if len(runs) < 2:
        raise SpreadError(
            f"a spread over seeds needs 2 or more runs, got {len(runs)}"
            + (f" ({runs[0]})" if runs else "")
        )
    paths = [comparison_file(run) for run in runs]
    documents = [read_run(path) for path in paths]
    identities = [run_identity(doc, path) for doc, path in zip(documents, paths, strict=True)]
    for path, identity in zip(paths[1:], identities[1:], strict=True):
        check_same(identities[0], identity, paths[0], path)
    refuse_same_model(identities, paths)
    first = identities[0]
    n_axis = first["n_layers"] + 1
    instruments = compared_instruments(documents, paths)
    spreads = {
        inst: {
            name: MetricSpread.of(name, *zip(*(
                read_metric(doc, path, inst, metric, n_axis)
                for doc, path in zip(documents, paths, strict=True)
            ), strict=True))
            for name, metric in METRICS.items()
        }
        for inst in instruments
    }  # fmt: skip
    return SeedSpread(
        runs=tuple(
            Run(str(run), str(path), ident["seed"], ident["checkpoint_sha256"], ident["interval"])
            for run, path, ident in zip(runs, paths, identities, strict=True)
        ),
        task=first["task"],
        arch=first["arch"],
        n_layers=first["n_layers"],
        predictor=first["predictor"],
        instruments=spreads,
    )


def write_spread(path: str | os.PathLike, spread: SeedSpread, *, overwrite: bool = False) -> Path:
    """Write ``spread`` as JSON with the common header (``infoprobe.spread``), via a
    temporary file and a rename."""
    document = {**make_header(FORMAT, SCHEMA_VERSION, ("layer",)), **spread.to_dict()}
    with atomic_output(path, overwrite=overwrite, what="--out", kind=FORMAT) as tmp:
        tmp.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return Path(path)
