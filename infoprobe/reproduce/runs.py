"""One run = one grid point trained with one seed, and the store that makes sweeps resumable.

:func:`execute_run` is a pure function of a :class:`RunSpec` (it writes only to a scratch
folder) and returns a :class:`RunOutcome`: the run's record (config, seed, NMSE history,
best validation NMSE, test NMSE, times, analyses) and the bytes of its checkpoint. It
runs in a worker process or a Ray task; only the driver writes into the output folder,
through :class:`RunStore`:

    OUT/runs/<run_id>/checkpoint/    model.safetensors + checkpoint.json
    OUT/runs/<run_id>/record.json    written last, atomically: the run is finished; it
                                     starts with the header of docs/conventions.md
                                     (records of schema 1, which had no version, are read)

A run whose ``record.json`` exists is never trained again; a run interrupted before its
record was written leaves no record and restarts from scratch (its checkpoint folder,
if any, is replaced).
"""

from __future__ import annotations

import json
import math
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from infoprobe.base.atomic import atomic_output
from infoprobe.base.errors import UserError
from infoprobe.base.header import check_header, make_header, read_json_object
from infoprobe.checkpoint import FORMAT as CHECKPOINT_FORMAT
from infoprobe.checkpoint import save_checkpoint
from infoprobe.reproduce.analyses import run_analysis
from infoprobe.reproduce.grid import ReproduceError, RunSpec
from infoprobe.train.budget import BudgetStop
from infoprobe.train.config import NonFiniteLossError, TrainResult
from infoprobe.train.convergence import convergence
from infoprobe.train.ensemble import train_ensemble
from infoprobe.train.loop import train
from infoprobe.train.state import StateFile

RECORD = "record.json"
RECORD_FORMAT = "infoprobe.reproduce.run"
RECORD_SCHEMA_VERSION = 2
"""2: the common header; schema 1 records had only ``format`` and are still read."""
CHECKPOINT = "checkpoint"


@dataclass
class RunOutcome:
    """What a worker sends back: the record and the checkpoint files (name → bytes)."""

    record: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)


@contextmanager
def torch_threads(n: int):
    """Run the body with ``torch.set_num_threads(n)``; restore the old value after."""
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


GROUP_STATE = "state.safetensors"
"""An unfinished run's (or batched group's) state, in the run folder of its first run."""


def group_state(specs: Sequence[RunSpec]) -> StateFile | None:
    """The resumable state of the runs ``specs`` trained together (None: they keep none):
    ``OUT/runs/<first run_id>/state.safetensors``, made by exactly these runs."""
    first = specs[0]
    if first.resume is None or first.store is None:
        return None
    settings = {
        "runs": [s.run_id for s in specs],
        "task": first.point.build_task().to_dict(),
        "model_configs": [s.point.model_config().to_dict() for s in specs],
        "train_configs": [s.train_config().to_dict() for s in specs],
    }
    path = RunStore(first.store).run_dir(first.run_id) / GROUP_STATE
    return StateFile(path, settings, first.resume)


def budget_spent(group: Sequence[RunSpec], started_any: bool) -> BudgetStop | None:
    """The stop of a group not yet started when its sweep's budget is spent (None: it
    may start). The first group a call starts always starts, so every piece of a sweep
    makes progress; the others start only before the deadline."""
    resume = group[0].resume
    if not started_any or resume is None or not resume.expired():
        return None
    state = group_state(group)
    saved = None if state is None else state.load()
    steps = max(s.train_config().steps for s in group)
    done = 0 if saved is None else int(saved[1]["step"])
    return BudgetStop(done, steps, resume.minutes or 0.0, None if saved is None else state.path)


def execute_run(spec: RunSpec, state: StateFile | None = None) -> RunOutcome:
    """Train ``spec`` (``spec.threads`` torch threads; ``state``: its resumable state),
    save its checkpoint in a scratch folder, run its analyses there, and return the
    record and checkpoint bytes."""
    started = time.time()
    with torch_threads(spec.threads):
        try:
            result = train(
                spec.point.build_task(),
                spec.point.model_config(),
                spec.train_config(),
                progress=False,
                state=state,
            )
        except NonFiniteLossError as err:
            result = err.result
        return run_outcome(spec, result, result.seconds, started)  # every piece counted


def execute_group(specs: Sequence[RunSpec]) -> list[RunOutcome]:
    """Train the runs ``specs`` (one :func:`~infoprobe.reproduce.grid.group_key`) as one
    batched ensemble with ``threads`` torch threads; return one outcome per run, in order.
    Each member's record and checkpoint are those :func:`execute_run` would write; its
    ``train_seconds`` is the group's training time up to that member's end.

    With ``resume`` the group keeps its state (:func:`group_state`) and continues from
    it."""
    state = group_state(specs)
    if len(specs) == 1:
        return [execute_run(specs[0], state)]
    first, started = specs[0], time.time()
    with torch_threads(first.threads):
        results = train_ensemble(
            first.point.build_task(),
            [s.point.model_config() for s in specs],
            [s.train_config() for s in specs],
            progress=False,
            state=state,
        )
        return [
            run_outcome(spec, result, result.seconds, started)
            for spec, result in zip(specs, results, strict=True)
        ]


def run_outcome(
    spec: RunSpec, result: TrainResult, train_seconds: float, started: float
) -> RunOutcome:
    """Save ``result``'s checkpoint in a scratch folder, run the analyses of ``spec``
    there and return the record and checkpoint bytes (``started``: wall-clock start)."""
    point = spec.point
    task, cfg = point.build_task(), spec.train_config()
    analyses: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="infoprobe-run-") as scratch:
        ck = Path(scratch) / CHECKPOINT
        save_checkpoint(
            ck,
            result.model.cpu(),
            task,
            train_config=cfg.to_dict(),
            history=result.history,
            metrics=result.metrics(),
        )
        for name, params in sorted(point.analyses.items()):
            work = Path(scratch) / f"analysis-{name}"
            analyses[name] = run_analysis(name, ck, work, seed=spec.seed, params=dict(params))
        files = {p.name: p.read_bytes() for p in sorted(ck.iterdir())}
    record = {
        **make_header(RECORD_FORMAT, RECORD_SCHEMA_VERSION),
        "run_id": spec.run_id,
        "claim": spec.claim,
        "profile": spec.profile,
        "label": point.label,
        "series": point.series,
        "coords": dict(point.coords),
        "config_key": point.key,
        "config": point.spec(),
        "seed": spec.seed,
        "device": spec.device,
        "threads": spec.threads,
        "compile": spec.compile,
        "n_params": sum(p.numel() for p in result.model.parameters()),
        "history": result.history,
        "best_val_nmse": result.val_nmse,
        "best_step": result.best_step,
        "test_nmse": result.test_nmse,
        "stopped": result.stopped,
        "convergence": convergence(result.history),
        "train_seconds": round(train_seconds, 2),
        "seconds": round(time.time() - started, 2),
        "analyses": analyses,
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine()},
        "torch_version": torch.__version__,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return RunOutcome(record, files)


RECORD_FIELDS = {
    "best_val_nmse": "number", "test_nmse": "number", "best_step": "integer",
    "seed": "integer", "seconds": "number", "train_seconds": "number",
    "history": "list", "analyses": "object",
}  # fmt: skip
"""Fields of record.json that are read back, and their JSON kinds (null allowed for the
numbers: a run that never evaluated has no best NMSE)."""


def _check_record_fields(record: dict[str, Any], path: Path) -> None:
    """Refuse a field of ``RECORD_FIELDS`` that is missing or of the wrong JSON kind,
    naming it (every record, schema 1 included, was written with all of them)."""
    for name, kind in RECORD_FIELDS.items():
        article = "an" if kind[0] in "aeiou" else "a"
        if name not in record:
            raise ReproduceError(
                f"{path}: field {name!r} missing, expected {article} {kind}; delete it to "
                "re-run this run"
            )
        value = record[name]
        plain_number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = {
            "number": value is None or plain_number,
            "integer": value is None or (plain_number and isinstance(value, int)),
            "list": isinstance(value, list),
            "object": isinstance(value, dict),
        }[kind]
        if not ok:
            raise ReproduceError(
                f"{path}: field {name!r} is {value!r} ({type(value).__name__}), expected "
                f"{article} {kind}; delete it to re-run this run"
            )


def _same(a: Any, b: Any) -> bool:
    """JSON equality in which NaN equals NaN (a run that never scored records NaN)."""
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or a == b


def _check_record_run(record: dict[str, Any], spec: RunSpec, path: Path) -> None:
    """Refuse a record that is not this run's or that its history and checkpoint do not
    bear out: its seed, grid point and claim against the run key; its best validation NMSE
    and step against its own history; its numbers against the checkpoint folder beside it
    (a record is counted by the results, so an edit must not pass as a result)."""

    def refuse(name: str, found: Any, wanted: Any, why: str) -> ReproduceError:
        return ReproduceError(
            f"{path}: field {name!r} is {found!r}, expected {wanted!r} ({why}); delete it "
            "to re-run this run"
        )

    for name, wanted in (
        ("seed", spec.seed),
        ("config_key", spec.point.key),
        ("claim", spec.claim),
    ):
        if record.get(name) != wanted:
            raise refuse(name, record.get(name), wanted, f"the run {spec.run_id}")
    history = record["history"]
    if not all(isinstance(h, dict) for h in history):
        raise refuse("history", history, "a list of evaluations", "as the run wrote it")
    if history:
        best = min(history, key=lambda h: h.get("val_nmse", math.inf))
        for name, key in (("best_val_nmse", "val_nmse"), ("best_step", "step")):
            if not _same(record[name], best.get(key)):
                raise refuse(name, record[name], best.get(key), "the best of its history")
    checkpoint = path.parent / CHECKPOINT / "checkpoint.json"
    if not checkpoint.is_file():
        raise refuse("checkpoint", "(absent)", str(checkpoint), "a finished run's weights")
    meta = read_json_object(checkpoint, ReproduceError, "delete the run folder to re-run it")
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    found = {"val_nmse": record["best_val_nmse"], "best_step": record["best_step"],
             "test_nmse": record["test_nmse"]}  # fmt: skip
    for key, value in found.items():
        if not _same(metrics.get(key), value):
            raise refuse(
                f"metrics.{key} of {checkpoint.name}", metrics.get(key), value, "the record's"
            )
    if meta.get("history") != history:
        raise refuse(f"history of {checkpoint.name}", "another history", "the record's", "same run")


class RunStore:
    """The runs folder of a sweep: ``root/runs/<run_id>/{checkpoint/, record.json}``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def record_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / RECORD

    def load(self, run_id: str, spec: RunSpec | None = None) -> dict[str, Any] | None:
        """The finished run's record, or None if the run has not finished; with ``spec``
        (the run it must be) checked against it and its checkpoint first."""
        path = self.record_path(run_id)
        if not path.is_file():
            return None
        record = read_json_object(path, ReproduceError, "delete it to re-run this run")
        if record.get("run_id") != run_id or record.get("format") != RECORD_FORMAT:
            raise ReproduceError(
                f"{path}: field 'run_id' is {record.get('run_id')!r}, expected {run_id!r} "
                f"(format {RECORD_FORMAT!r}); delete it to re-run this run"
            )
        check_header(
            record,
            path,
            fmt=RECORD_FORMAT,
            readable=range(1, RECORD_SCHEMA_VERSION + 1),
            error=ReproduceError,
            unversioned=1,
        )
        _check_record_fields(record, path)
        if spec is not None:
            _check_record_run(record, spec, path)
        return record

    def is_done(self, spec: RunSpec) -> bool:
        return self.load(spec.run_id, spec) is not None

    def save(self, outcome: RunOutcome) -> Path:
        """Write the checkpoint folder, then the record (each via a temp name + rename)."""
        run_id = outcome.record["run_id"]
        run_dir = self.run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        if outcome.files:
            with atomic_output(
                run_dir / CHECKPOINT, overwrite=True, directory=True, kind=CHECKPOINT_FORMAT
            ) as tmp:
                for name, data in outcome.files.items():
                    (tmp / name).write_bytes(data)
        with atomic_output(self.record_path(run_id), overwrite=True, kind=RECORD_FORMAT) as tmp:
            tmp.write_text(json.dumps(outcome.record, indent=1, sort_keys=True))
        return self.record_path(run_id)

    def records(self, specs: Sequence[RunSpec]) -> list[dict[str, Any]]:
        """Records of the finished runs among ``specs``, in their order."""
        found = (self.load(s.run_id, s) for s in specs)
        return [r for r in found if r is not None]


class SweepError(RuntimeError):
    """One or more runs of a sweep raised; the others were finished and stored."""


@dataclass
class SweepSummary:
    """Run ids of a sweep: trained now, skipped (finished before) and failed (with errors)."""

    trained: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    paused: dict[str, BudgetStop] = field(default_factory=dict)


Log = Callable[[str], None]


def run_sweep(
    specs: Sequence[RunSpec], store: RunStore, backend: Any, *, log: Log | None = None
) -> SweepSummary:
    """Train every run of ``specs`` that has no record yet, on ``backend``.

    Prints one line per run skipped, started and finished through ``log``. Each finished
    run is stored as soon as it arrives, so an interrupted sweep keeps what it finished.
    Raises :class:`SweepError` at the end if any run raised, or the first run's input error
    (a :class:`~infoprobe.base.errors.UserError`, such as an edited state) if any.
    """
    say = log or (lambda _line: None)
    summary = SweepSummary()
    pending = []
    for spec in specs:
        if store.is_done(spec):
            summary.skipped.append(spec.run_id)
            say(f"skip   {spec.describe()} (finished: {store.record_path(spec.run_id)})")
        else:
            pending.append(spec)
    total = len(pending)
    order = {s.run_id: i + 1 for i, s in enumerate(pending)}

    def on_start(spec: RunSpec) -> None:
        say(f"[{order[spec.run_id]}/{total}] start  {spec.describe()} ({spec.threads} threads)")

    def on_done(spec: RunSpec, outcome: RunOutcome) -> None:
        store.save(outcome)
        summary.trained.append(spec.run_id)
        rec = outcome.record
        say(
            f"[{order[spec.run_id]}/{total}] done   {spec.describe()}: best val NMSE "
            f"{rec['best_val_nmse']:.3g}, test NMSE {rec['test_nmse']:.3g}, "
            f"{rec['seconds']:.0f} s"
        )

    def on_error(spec: RunSpec, err: BaseException) -> None:
        if isinstance(err, BudgetStop):
            summary.paused[spec.run_id] = err
            say(f"[{order[spec.run_id]}/{total}] paused {spec.describe()}: {err}")
            return
        if isinstance(err, UserError):  # bad input (an edited state): refused, not a failure
            refused.append(err)
        summary.failed[spec.run_id] = f"{type(err).__name__}: {err}"
        say(f"[{order[spec.run_id]}/{total}] FAILED {spec.describe()}: {err}")

    refused: list[UserError] = []
    if pending:
        backend.execute(pending, on_start=on_start, on_done=on_done, on_error=on_error)
    if refused:
        raise refused[0]
    if summary.paused and not summary.failed:
        stops = list(summary.paused.values())
        raise BudgetStop(
            sum(s.step for s in stops),
            sum(s.steps for s in stops),
            stops[0].minutes,
            runs=len(stops),
        )
    if summary.failed:
        listed = "; ".join(f"{k}: {v}" for k, v in summary.failed.items())
        raise SweepError(f"{len(summary.failed)} run(s) failed (re-run to retry them): {listed}")
    return summary
