"""The vocabulary of a sweep: one grid point (:class:`GridPoint`), a profile, a claim.

A *grid point* is one trained configuration (task + architecture + training settings);
it is trained once per seed, and each (grid point, seed) pair is one *run*. A *profile*
(``quick`` or ``paper``) is the list of grid points of a claim with its number of seeds;
a *claim* holds both profiles, its figures and its acceptance checks. Everything here is
plain data: the claims themselves are written out in :mod:`infoprobe.reproduce.claims`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from infoprobe.base.errors import UserError
from infoprobe.base.jsonable import json_sha256
from infoprobe.model_config import ModelConfig
from infoprobe.tasks import Task
from infoprobe.train.budget import Resume
from infoprobe.train.config import TrainConfig
from infoprobe.train.groups import SHARED_FIELDS, shape_of


class ReproduceError(UserError):
    """A claim, profile, grid point or run record that does not fit (names the fix)."""


@dataclass(frozen=True)
class GridPoint:
    """One configuration of a sweep, trained once per seed.

    Attributes:
        label: row name in tables and legends, e.g. ``"(1,2) D=2"``.
        series: the line it belongs to in figures, e.g. ``"(D-1,D)"``.
        coords: its coordinates on the figures' x axes, e.g. ``{"D": 2, "T": 16}``.
        task: the task (its own parameters drawn from ``task.seed``).
        model: the architecture; ``d_in``, ``n_ctx`` and ``d_out`` must be the task's.
        train: the training settings; its :data:`EXECUTION_FIELDS` (seed, device,
            compile) are replaced by each run's.
        analyses: analysis name → its parameters, run on the trained model after training
            (see :mod:`infoprobe.reproduce.analyses`).
        seeds: this point's number of seeds where it differs from its profile's (None:
            the profile's); ``--seeds`` overrides both.
    """

    label: str
    series: str
    coords: Mapping[str, Any]
    task: Task
    model: ModelConfig
    train: TrainConfig
    analyses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    seeds: int | None = None

    def __post_init__(self) -> None:
        for name, cls in (("task", Task), ("model", ModelConfig), ("train", TrainConfig)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ReproduceError(
                    f"grid point {self.label!r}: field {name} must be a {cls.__name__}, "
                    f"got {type(value).__name__}"
                )
        run_fields = {name: getattr(self.train, name) for name in EXECUTION_FIELDS}
        if run_fields != EXECUTION_DEFAULTS:
            raise ReproduceError(
                f"grid point {self.label!r}: train fields {list(EXECUTION_FIELDS)} are set "
                f"per run; expected {EXECUTION_DEFAULTS}, got {run_fields}"
            )
        for name, expected, actual in (
            ("n_ctx", self.task.T, self.model.n_ctx),
            ("d_in", self.task.d, self.model.d_in),
            ("d_out", self.task.d_out, self.model.d_out),
        ):
            if expected != actual:
                raise ReproduceError(
                    f"grid point {self.label!r}: model.{name} is {actual} but task "
                    f"{self.task.name} needs {expected}"
                )

    def build_task(self) -> Task:
        return self.task

    def model_config(self) -> ModelConfig:
        """The full model config (d_in = d, n_ctx = T and d_out are the task's)."""
        return self.model

    def train_config(self, seed: int, device: str = "cpu", compile: bool = False) -> TrainConfig:
        return replace(self.train, seed=seed, device=device, compile=compile)

    def spec(self) -> dict[str, Any]:
        """Everything that determines the trained models (JSON-ready): ``task``, ``model``
        and ``train`` as their ``to_dict()`` (train without :data:`EXECUTION_FIELDS`) and
        ``analyses`` sorted by name. Run records store it under ``config``."""
        return {
            "task": self.task.to_dict(),
            "model": self.model.to_dict(),
            "train": {k: v for k, v in self.train.to_dict().items() if k not in EXECUTION_FIELDS},
            "analyses": {k: dict(v) for k, v in sorted(self.analyses.items())},
        }

    @property
    def key(self) -> str:
        """Stable folder-safe name: the label as a slug plus a hash of :meth:`spec`.

        Changing any setting changes the key, so a finished run of other settings is
        never mistaken for this one. Fields added to the model or task after runs were
        first recorded (:data:`ADDED_FIELDS`) are left out of the hash while they hold the
        value every earlier run had, so upgrading never orphans finished runs.
        """
        spec = without_added_defaults(self.spec())
        digest = json_sha256(spec)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.label).strip("-").lower()
        return f"{slug}-{digest[:10]}"

    def with_train(self, **overrides: Any) -> GridPoint:
        """A copy with these :class:`TrainConfig` fields replaced."""
        valid = [f.name for f in fields(TrainConfig)]
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            raise ReproduceError(
                f"grid point {self.label!r}: unknown training field(s) {unknown}; valid: {valid}"
            )
        return replace(self, train=replace(self.train, **overrides))

    def with_analysis_params(self, **overrides: Any) -> GridPoint:
        return replace(
            self, analyses={name: {**p, **overrides} for name, p in self.analyses.items()}
        )


EXECUTION_FIELDS = ("seed", "device", "compile")
"""TrainConfig fields that say how or with which seed a grid point runs, not what it is."""
EXECUTION_DEFAULTS = {name: getattr(TrainConfig(), name) for name in EXECUTION_FIELDS}
"""Their values in a grid point's ``train`` (each run replaces them)."""

# (part of spec, task name or None for any, field) -> the value runs recorded before the
# field existed implicitly had.
ADDED_FIELDS: dict[tuple[str, str | None, str], Any] = {
    ("model", None, "init_gain"): 1.0,
    ("task", "intrinsic-dim", "distinct"): False,
    ("train", None, "dtype"): "float32",
}


def without_added_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` (:meth:`GridPoint.spec`) without the :data:`ADDED_FIELDS` that hold their
    pre-existing value."""
    out = json.loads(json.dumps(spec))
    for (part, task_name, name), value in ADDED_FIELDS.items():
        if task_name is not None and out["task"]["name"] != task_name:
            continue
        fields_ = out[part]["params"] if part == "task" else out[part]
        if name in fields_ and fields_[name] == value:
            del fields_[name]
    return out


@dataclass(frozen=True)
class Check:
    """An acceptance criterion with its thresholds fixed before any run.

    ``evaluate(configs)`` receives the per-grid-point summaries of ``results.json`` and
    returns ``(passed, detail)``; ``passed`` is None when the runs it needs are missing.
    ``gate``: a profile's acceptance (True) or a reported observation (False).
    """

    text: str
    evaluate: Callable[[Sequence[Mapping[str, Any]]], tuple[bool | None, str]]
    gate: bool = True


@dataclass(frozen=True)
class Profile:
    """A claim's sweep at one size: its grid points, seeds, departures and checks.

    ``departures``: where this profile differs from the paper's settings (printed with
    every result). ``expected_runtime``: a measured or estimated wall time, in words.
    """

    name: str
    seeds: int
    points: tuple[GridPoint, ...]
    departures: tuple[str, ...] = ()
    expected_runtime: str = ""
    checks: tuple[Check, ...] = ()

    def override(
        self,
        *,
        train: Mapping[str, Any] | None = None,
        analyses: Mapping[str, Any] | None = None,
        points: Sequence[int] | None = None,
        seeds: int | None = None,
    ) -> Profile:
        """A smaller (or otherwise changed) copy: training / analysis settings replaced
        in every grid point, only the grid points at indices ``points``, ``seeds`` seeds."""
        chosen = self.points if points is None else tuple(self.points[i] for i in points)
        if seeds is not None:
            chosen = tuple(replace(p, seeds=None) for p in chosen)
        if train:
            chosen = tuple(p.with_train(**train) for p in chosen)
        if analyses:
            chosen = tuple(p.with_analysis_params(**analyses) for p in chosen)
        return replace(self, points=chosen, seeds=self.seeds if seeds is None else seeds)


FigureKind = Literal["nmse_vs", "cls_attention", "cls_probe", "role_ratios", "rate"]
"""The figure builders of :mod:`infoprobe.reproduce.figures`."""
Annotation = Literal["comparison_number", "exponent"]
"""What :func:`infoprobe.reproduce.figures.nmse_vs` adds: InfoFlow's comparison number
to the x tick labels, or each series' exponent alpha(T) to the legend."""


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a claim: which builder draws it, its caption and the builder's options.

    ``x``, ``log``, ``where``, ``series_by`` and ``annotate`` are the options of ``kind``
    ``"nmse_vs"`` (NMSE against coordinate ``x``, or ``"n_params"``; log scale; only the
    grid points whose coords match ``where``; one line per value of coordinate
    ``series_by`` instead of per series); ``"rate"`` (the cost-law fit of the grid points
    at ``where``, one (task, T)) takes ``where`` only; the other kinds take none.

    Attributes:
        name: file name of the PNG (without ``.png``), e.g. ``"nmse_vs_T"``.
        kind: the builder (:data:`FigureKind`).
        caption: what the figure shows, printed under it in the report.
    """

    name: str
    kind: FigureKind
    caption: str
    x: str | None = None
    log: bool = True
    where: Mapping[str, Any] = field(default_factory=dict)
    series_by: str | None = None
    annotate: Annotation | None = None

    def __post_init__(self) -> None:
        where = f"figure {self.name!r}"
        if self.kind not in get_args(FigureKind):
            raise ReproduceError(
                f"{where}: kind must be one of {get_args(FigureKind)}, got {self.kind!r}"
            )
        if self.annotate is not None and self.annotate not in get_args(Annotation):
            raise ReproduceError(
                f"{where}: annotate must be None or one of {get_args(Annotation)}, "
                f"got {self.annotate!r}"
            )
        if self.kind == "nmse_vs" and not self.x:
            raise ReproduceError(f"{where}: kind 'nmse_vs' needs x (a coordinate or 'n_params')")
        changed = [name for name, v in NMSE_VS_DEFAULTS.items() if getattr(self, name) != v]
        if self.kind == "rate" and set(changed) - {"where"}:
            raise ReproduceError(f"{where}: kind 'rate' takes only where, got {changed}")
        if self.kind not in ("nmse_vs", "rate") and changed:
            raise ReproduceError(f"{where}: kind {self.kind!r} takes no options, got {changed}")

    def options(self) -> dict[str, Any]:
        """The builder's keyword arguments (none but for ``nmse_vs`` and ``rate``)."""
        if self.kind == "rate":
            return {"where": dict(self.where)}
        if self.kind != "nmse_vs":
            return {}
        return {
            "x": self.x,
            "log": self.log,
            "where": dict(self.where) or None,
            "series_by": self.series_by,
            "annotate": self.annotate,
        }


NMSE_VS_DEFAULTS: dict[str, Any] = {
    "x": None,
    "log": True,
    "where": {},
    "series_by": None,
    "annotate": None,
}
"""The options of :class:`FigureSpec` that only ``nmse_vs`` reads, at their defaults."""


@dataclass(frozen=True)
class Claim:
    """One of the paper's claims: what it says, its two profiles, its figures."""

    name: str
    title: str
    paper: str
    profiles: Mapping[str, Profile]
    figures: tuple[FigureSpec, ...] = ()
    probes_shown: bool = False

    def profile(self, name: str | Profile) -> Profile:
        """The profile called ``name`` (a :class:`Profile` passes through unchanged)."""
        if isinstance(name, Profile):
            return name
        if name not in self.profiles:
            raise ReproduceError(
                f"claim {self.name}: unknown profile {name!r}; valid: {sorted(self.profiles)}"
            )
        return self.profiles[name]

    def runs(
        self,
        profile: str | Profile = "quick",
        seeds: int | None = None,
        device: str = "cpu",
        compile: bool = False,
    ) -> list[RunSpec]:
        """Every run of a profile: each grid point once per seed 0..n-1, where n is
        ``seeds`` if given, else the point's own count, else the profile's."""
        prof = self.profile(profile)
        if seeds is not None and seeds < 1:
            raise ReproduceError(f"seeds must be >= 1, got {seeds}")
        return [
            RunSpec(self.name, prof.name, point, seed, device, compile=compile)
            for point in prof.points
            for seed in range(seeds or point.seeds or prof.seeds)
        ]


@dataclass(frozen=True)
class RunSpec:
    """One run: a grid point trained with one seed (on ``device`` with ``threads``;
    ``compile``: through ``torch.compile``; its state in ``store`` as ``resume`` says)."""

    claim: str
    profile: str
    point: GridPoint
    seed: int
    device: str = "cpu"
    threads: int = 1
    compile: bool = False
    store: str | None = None
    """The sweep's output folder, where an unfinished run keeps its state (None: none)."""
    resume: Resume | None = None
    """How often a run writes its state and its time budget (None: no state)."""

    def train_config(self) -> TrainConfig:
        return self.point.train_config(self.seed, self.device, self.compile)

    @property
    def run_id(self) -> str:
        """Folder name of the run: ``<grid point key>-s<seed>``."""
        return f"{self.point.key}-s{self.seed}"

    def describe(self) -> str:
        return f"{self.claim} {self.point.label} seed {self.seed}"


def describe_runs(specs: Sequence[RunSpec]) -> str:
    """``"18 runs (6 configs x 2-4 seeds)"``: the size of a sweep in words."""
    per_point: dict[str, int] = {}
    for spec in specs:
        per_point[spec.point.key] = per_point.get(spec.point.key, 0) + 1
    low, high = min(per_point.values(), default=0), max(per_point.values(), default=0)
    seeds = str(low) if low == high else f"{low}-{high}"
    return f"{len(specs)} runs ({len(per_point)} configs x {seeds} seeds)"


def group_key(spec: RunSpec) -> str:
    """Runs with equal keys can train as one batched ensemble: the same task, the same
    model shape (:func:`infoprobe.train.ensemble.shape_of`), the same shared training fields
    (:data:`infoprobe.train.ensemble.SHARED_FIELDS`) and execution settings."""
    cfg = spec.train_config()
    return json.dumps(
        {
            "task": spec.point.build_task().to_dict(),
            "shape": shape_of(spec.point.model_config()).to_dict(),
            "train": {name: getattr(cfg, name) for name in SHARED_FIELDS},
            "run": [spec.device, spec.threads, spec.compile],
        },
        sort_keys=True,
    )


def group_runs(specs: Sequence[RunSpec], size: int) -> list[list[RunSpec]]:
    """``specs`` in groups of at most ``size`` runs that can train together
    (:func:`group_key`), in the order of each group's first run; ``size`` 1 gives one
    run per group."""
    if size < 1:
        raise ReproduceError(f"ensemble size must be >= 1, got {size}")
    by_key: dict[str, list[RunSpec]] = {}
    for spec in specs:
        by_key.setdefault(group_key(spec), []).append(spec)
    return [runs[i : i + size] for runs in by_key.values() for i in range(0, len(runs), size)]
