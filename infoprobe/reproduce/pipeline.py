"""``reproduce()``: run a claim's sweep (resumably), gather results, draw, write the report.

Output folder (default ``reproduce/<claim>/<profile>``)::

    runs/<run_id>/record.json, runs/<run_id>/checkpoint/   one per finished run
    results.json                                           every run + per-config summary
    <figure>.png, report.html                              figures and the report section
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infoprobe.base.atomic import atomic_output, output_lock, refuse_existing
from infoprobe.base.errors import UserError
from infoprobe.base.markers import mark_png
from infoprobe.report.build import render_png
from infoprobe.reproduce.backends import (
    BackendError,
    LocalBackend,
    RayBackend,
    available_cores,
    make_backend,
    plan_workers,
)
from infoprobe.reproduce.claims import get_claim
from infoprobe.reproduce.figures import claim_figures
from infoprobe.reproduce.grid import (
    Claim,
    Profile,
    ReproduceError,
    RunSpec,
    describe_runs,
    group_runs,
)
from infoprobe.reproduce.preflight import check_states
from infoprobe.reproduce.report import FIGURE_FORMAT, REPORT_FORMAT, page_html, section_html
from infoprobe.reproduce.results import (
    RESULTS,
    RESULTS_FORMAT,
    format_summary,
    gather,
    write_results,
)
from infoprobe.reproduce.runs import RunStore, SweepSummary, run_sweep
from infoprobe.reproduce.timing import SweepEstimate, estimate_sweep
from infoprobe.train.budget import Resume

REPORT = "report.html"


@dataclass
class Reproduction:
    """What :func:`reproduce` returns: the results dict, its files and the sweep summary."""

    results: dict[str, Any]
    out: Path
    results_path: Path
    report_path: Path | None
    figure_paths: dict[str, Path]
    sweep: SweepSummary

    def summary(self) -> str:
        return format_summary(self.results)


def default_out(claim: str, profile: str) -> Path:
    return Path("reproduce") / claim / profile


def write_outputs(
    claim: Claim, results: dict[str, Any], out: Path, *, dpi: int = 110
) -> tuple[Path, dict[str, Path]]:
    """Write each figure as PNG and the report page; return (report path, figure paths)."""
    pngs: dict[str, tuple[bytes, str]] = {}
    paths = {}
    for name, (fig, caption) in claim_figures(claim, results).items():
        png = render_png(fig, dpi)
        pngs[name] = (png, caption)
        with atomic_output(
            out / f"{name}.png", overwrite=True, what="sweep figure", kind=FIGURE_FORMAT
        ) as tmp:
            tmp.write_bytes(mark_png(png, FIGURE_FORMAT))
        paths[name] = out / f"{name}.png"
    section = section_html(results, pngs, probes_shown=claim.probes_shown)
    title = f"infoprobe reproduce {claim.name} ({results['profile']} profile)"
    with atomic_output(
        out / REPORT, overwrite=True, what="sweep report", kind=REPORT_FORMAT
    ) as tmp:
        tmp.write_text(page_html(title, [section]), encoding="utf-8")
    return out / REPORT, paths


def check_outputs(claim: Claim, out: Path, figures: bool) -> None:
    """Refuse, before any run, a results.json, report.html or figure PNG in ``out`` that is
    not a sweep's own (its format marker): a sweep replaces only its own outputs."""
    kinds = {RESULTS: (RESULTS_FORMAT, "sweep results")}
    if figures:
        kinds[REPORT] = (REPORT_FORMAT, "sweep report")
        kinds.update(
            {f"{spec.name}.png": (FIGURE_FORMAT, "sweep figure") for spec in claim.figures}
        )
    for name, (kind, what) in kinds.items():
        refuse_existing(out / name, True, what, kind=kind)


def check_device(device: str) -> None:
    """Refuse ``cuda`` when torch sees no CUDA device."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ReproduceError("device 'cuda' asked for, but torch sees no CUDA device")


def estimate(
    claim: str | Claim,
    *,
    profile: str | Profile = "quick",
    seeds: int | None = None,
    workers: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
    ensemble: int = 1,
    compile: bool = False,
    log: Callable[[str], None] | None = print,
) -> SweepEstimate:
    """Time a few training steps of every grid point on this machine and project the
    sweep's wall time with the local backend's plan (``workers`` groups of at most
    ``ensemble`` runs at a time with ``threads`` each; default: fit the cores; with
    ``compile``, the compilation time is measured and counted). Trains nothing to completion, writes
    nothing. See :mod:`infoprobe.reproduce.timing` for what is and is not counted."""
    claim_obj = get_claim(claim)
    check_device(device)
    specs = claim_obj.runs(profile, seeds, device, compile)
    n_workers, n_threads = plan_workers(
        len(group_runs(specs, ensemble)),
        available_cores(),
        workers=workers,
        threads=threads,
        device=device,
    )
    specs = [replace(s, threads=n_threads) for s in specs]
    return estimate_sweep(specs, n_workers, ensemble=ensemble, progress=log)


def reproduce(
    claim: str | Claim,
    *,
    profile: str | Profile = "quick",
    seeds: int | None = None,
    backend: str | LocalBackend | RayBackend = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    out: str | Path | None = None,
    device: str = "cpu",
    ensemble: int = 1,
    compile: bool = False,
    figures: bool = True,
    log: Callable[[str], None] | None = print,
    resume: Resume | None = None,
) -> Reproduction:
    """Run (or resume) a claim's sweep and write results.json, figures and report.html.

    Args:
        claim: a name of :data:`~infoprobe.reproduce.claims.CLAIMS` or a :class:`Claim`.
        profile: ``"quick"``, ``"paper"``, or a :class:`Profile` (e.g. a smaller copy made
            with :meth:`Profile.override`).
        seeds: seeds per grid point (default: the profile's); seeds are 0..seeds-1.
        backend: ``"local"``, ``"ray"`` or a backend object.
        ray_address: address of an existing Ray cluster (``--backend ray``).
        workers, threads: local processes and torch threads per run (default: fit the
            cores); for Ray, ``threads`` is the CPUs per task.
        out: output folder (default ``reproduce/<claim>/<profile>``).
        device: ``cpu`` or ``cuda``.
        ensemble: at most this many runs of one shape train together as one batched
            ensemble in a worker (1: each run alone); a backend object keeps its own.
        compile: train through ``torch.compile`` (compiled once per worker and shape).
        figures: write figures and report.html.
        log: receives one line per run skipped, started and finished (None: silent).
        resume: every unfinished run keeps its resumable state in its run folder
            (``OUT/runs/<run_id>/state.safetensors``, :mod:`infoprobe.train.state`) and
            continues from it; with a budget the sweep stops at the runs' first states
            after it, writes the results of the finished runs and raises
            :class:`~infoprobe.train.state.BudgetStop`. None: no states.

    A finished run (its record exists) is never trained again; failed runs are retried on
    the next call. Results are gathered from every finished run even if some failed.
    """
    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise BackendError(f"{name}: expected an integer >= 1, got {value!r}")
    claim_obj = get_claim(claim)
    prof = claim_obj.profile(profile)
    check_device(device)
    runner = (
        make_backend(
            backend, workers=workers, threads=threads, ray_address=ray_address, ensemble=ensemble
        )
        if isinstance(backend, str)
        else backend
    )
    runner.check()  # e.g. Ray not installed: refused before anything is written
    out_dir = Path(out) if out is not None else default_out(claim_obj.name, prof.name)
    with output_lock(out_dir):  # a second sweep writing this folder is refused at once
        return _sweep_into(out_dir, claim_obj, prof, runner, seeds, device, compile, figures,
                           resume, log)  # fmt: skip


def _sweep_into(
    out_dir: Path,
    claim_obj: Claim,
    prof: Profile,
    runner: Any,
    seeds: int | None,
    device: str,
    compile: bool,
    figures: bool,
    resume: Resume | None,
    log: Callable[[str], None] | None,
) -> Reproduction:
    """:func:`reproduce` once its settings are checked and ``out_dir`` is locked."""
    check_outputs(claim_obj, out_dir, figures)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs: list[RunSpec] = [
        replace(spec, store=str(out_dir), resume=resume)
        for spec in claim_obj.runs(prof, seeds, device, compile)
    ]
    store = RunStore(out_dir)
    say = log or (lambda _line: None)
    if prof.departures:
        say(
            f"{claim_obj.name} {prof.name} profile departs from the paper: "
            + "; ".join(prof.departures)
        )
    say(f"{describe_runs(specs)} -> {out_dir}")
    check_states(specs, store)  # an edited state is refused before any run starts
    error: Exception | None = None
    try:
        sweep = run_sweep(specs, store, runner, log=say)
    except UserError:  # an input refused (an edited state): results.json stays as it was
        raise
    except Exception as err:  # gather what finished, then re-raise
        sweep, error = SweepSummary(), err
    results = gather(claim_obj, prof, specs, store.records(specs), backend=runner.name)
    results_path = write_results(results, out_dir)
    report_path, figure_paths = (
        write_outputs(claim_obj, results, out_dir) if figures else (None, {})
    )
    if error is not None:
        print(f"results of the finished runs written to {results_path}", file=sys.stderr)
        raise error
    return Reproduction(results, out_dir, results_path, report_path, figure_paths, sweep)
