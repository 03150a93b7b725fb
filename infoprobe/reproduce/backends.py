"""Where the runs of a sweep execute: a local process pool, or Ray tasks on a cluster.

Both backends take runs (:class:`RunSpec`), form groups of at most ``ensemble`` runs that
can train together (:func:`~infoprobe.reproduce.grid.group_runs`; 1: every run alone),
execute :func:`execute_group` on each group, and call back ``on_start(spec)`` when a run
is handed to a worker, ``on_done(spec, outcome)`` in the driver process when it finishes
and ``on_error(spec, exc)`` when it raised. A group's runs finish together. They keep at
most as many groups in flight as there are workers, so "started" means started.

- :class:`LocalBackend`: ``workers`` processes (fresh, not forks; default: as many as fit the
  cores) with ``threads`` torch threads per run (default: cores // workers), so runs
  do not fight over cores. One worker runs in the calling process (no pool).
- :class:`RayBackend`: each run is a Ray task with ``num_cpus=threads`` (and one GPU on
  ``cuda``), on an existing cluster (``address``) or a local Ray started for the sweep.
  Records and checkpoints come back to the driver, so workers need no shared disk.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from infoprobe.reproduce.grid import ReproduceError, RunSpec, group_runs
from infoprobe.reproduce.runs import RunOutcome, budget_spent, execute_group

OnStart = Callable[[RunSpec], None]
OnDone = Callable[[RunSpec, RunOutcome], None]
OnError = Callable[[RunSpec, BaseException], None]
BACKENDS = ("local", "ray")


class BackendError(ReproduceError):
    """A backend that cannot start (Ray missing, bad worker counts, no CUDA) or whose
    worker processes died."""


BROKEN_POOL_HINT = (
    "a worker process of the local pool died before finishing its run. If you called "
    'reproduce() from a script, put the call under `if __name__ == "__main__":` '
    "(worker processes import your main module, and an unguarded call starts the sweep "
    "again inside each of them); otherwise a worker may have run out of memory (try fewer "
    "--workers). Finished runs are kept: run the same command again to resume."
)


def available_cores() -> int:
    """CPU cores this process may use (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def plan_workers(
    n_runs: int,
    cores: int,
    *,
    workers: int | None = None,
    threads: int | None = None,
    device: str = "cpu",
) -> tuple[int, int]:
    """(workers, torch threads per run) so that workers * threads <= cores.

    Defaults: on CPU one worker per core (capped by the number of runs), the cores shared
    out as threads; on CUDA one worker (runs share the GPU) with all cores.
    """
    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and value < 1:
            raise BackendError(f"{name} must be >= 1, got {value}")
    n_runs = max(1, n_runs)
    if workers is None:
        if device.startswith("cuda"):
            workers = 1
        else:
            workers = max(1, min(n_runs, cores // (threads or 1)))
    if threads is None:
        threads = max(1, cores // workers)
    return workers, threads


def pool_context() -> multiprocessing.context.BaseContext:
    """Fresh worker processes (never a fork of a driver whose torch threads are live):
    a fork server that imported the run code once where the OS has one, else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["infoprobe.reproduce.runs"])
        return context
    return multiprocessing.get_context("spawn")


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def report_budget(group: Sequence[RunSpec], started_any: bool, on_error: OnError) -> bool:
    """Report a group as paused, without starting it, when its sweep's time budget is
    spent (:func:`~infoprobe.reproduce.runs.budget_spent`); True if it was."""
    stop = budget_spent(group, started_any)
    for spec in group if stop is not None else ():
        on_error(spec, stop)
    return stop is not None


def report_group(
    group: Sequence[RunSpec],
    outcome: list[RunOutcome] | BaseException,
    on_done: OnDone,
    on_error: OnError,
) -> None:
    """Call back for every run of a finished group: its outcome, or the group's error."""
    if isinstance(outcome, BaseException):
        for spec in group:
            on_error(spec, outcome)
        return
    for spec, result in zip(group, outcome, strict=True):
        on_done(spec, result)


@dataclass
class LocalBackend:
    """A process pool on this machine (see the module docstring)."""

    workers: int | None = None
    threads: int | None = None
    cores: int = field(default_factory=available_cores)
    name: str = "local"
    ensemble: int = 1

    def check(self) -> None:
        """Nothing to check: a process pool always starts (see :meth:`RayBackend.check`)."""

    def execute(
        self, specs: Sequence[RunSpec], *, on_start: OnStart, on_done: OnDone, on_error: OnError
    ) -> None:
        device = specs[0].device if specs else "cpu"
        n_groups = len(group_runs(specs, self.ensemble))
        workers, threads = plan_workers(
            n_groups, self.cores, workers=self.workers, threads=self.threads, device=device
        )
        groups = group_runs([replace(s, threads=threads) for s in specs], self.ensemble)
        if workers == 1:
            for i, group in enumerate(groups):
                if report_budget(group, i > 0, on_error):
                    continue
                for spec in group:
                    on_start(spec)
                try:
                    outcomes = execute_group(group)
                except Exception as err:
                    for spec in group:
                        on_error(spec, err)
                else:
                    for spec, outcome in zip(group, outcomes, strict=True):
                        on_done(spec, outcome)
            return
        try:
            self._execute_in_pool(groups, workers, threads, on_start, on_done, on_error)
        except BrokenProcessPool as err:
            raise BackendError(BROKEN_POOL_HINT) from err

    @staticmethod
    def _execute_in_pool(
        groups: Sequence[list[RunSpec]],
        workers: int,
        threads: int,
        on_start: OnStart,
        on_done: OnDone,
        on_error: OnError,
    ) -> None:
        with ProcessPoolExecutor(
            workers, mp_context=pool_context(), initializer=_init_worker, initargs=(threads,)
        ) as pool:
            queue = list(reversed(groups))
            running: dict[Future, list[RunSpec]] = {}
            started = 0
            while queue or running:
                while queue and len(running) < workers:
                    group = queue.pop()
                    if report_budget(group, started > 0, on_error):
                        continue
                    started += 1
                    for spec in group:
                        on_start(spec)
                    running[pool.submit(execute_group, group)] = group
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    group = running.pop(future)
                    err = future.exception()
                    if isinstance(err, BrokenProcessPool):
                        raise err
                    report_group(group, future.result() if err is None else err, on_done, on_error)


@dataclass
class RayBackend:
    """Ray tasks on a cluster at ``address`` (None: a local Ray started for the sweep).

    ``threads``: CPUs per run (``num_cpus`` of each task and its torch threads).
    ``init_kwargs``: extra arguments of ``ray.init`` (e.g. ``num_cpus`` for a local Ray).
    """

    address: str | None = None
    threads: int = 1
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = "ray"
    ensemble: int = 1

    def check(self) -> None:
        """Raise :class:`BackendError` now, before a sweep writes anything, if Ray is not
        installed."""
        self._ray()

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise BackendError(
                "backend 'ray' needs the ray package: pip install 'infoprobe[ray]' "
                "(or use --backend local)"
            ) from None
        return ray

    def execute(
        self, specs: Sequence[RunSpec], *, on_start: OnStart, on_done: OnDone, on_error: OnError
    ) -> None:
        ray = self._ray()
        if self.threads < 1:
            raise BackendError(f"threads must be >= 1, got {self.threads}")
        started_here = not ray.is_initialized()
        if started_here:
            kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
            ray.init(address=self.address, **kwargs)
        try:
            gpus = 1 if specs and specs[0].device.startswith("cuda") else 0
            task = ray.remote(num_cpus=self.threads, num_gpus=gpus, max_retries=0)(execute_group)
            cpus = int(ray.cluster_resources().get("CPU", 1))
            window = max(1, cpus // self.threads)
            runs = [replace(s, threads=self.threads) for s in specs]
            queue = list(reversed(group_runs(runs, self.ensemble)))
            running: dict[Any, list[RunSpec]] = {}
            started = 0
            while queue or running:
                while queue and len(running) < window:
                    group = queue.pop()
                    if report_budget(group, started > 0, on_error):
                        continue
                    started += 1
                    for spec in group:
                        on_start(spec)
                    running[task.remote(group)] = group
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    group = running.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as err:
                        outcome = err
                    report_group(group, outcome, on_done, on_error)
        finally:
            if started_here:
                ray.shutdown()


def make_backend(
    name: str,
    *,
    workers: int | None = None,
    threads: int | None = None,
    ray_address: str | None = None,
    ensemble: int = 1,
) -> LocalBackend | RayBackend:
    """Backend by name: ``local`` or ``ray``; ``ensemble``: runs per batched group."""
    if name == "local":
        if ray_address is not None:
            raise BackendError("--ray-address only applies to --backend ray")
        return LocalBackend(workers=workers, threads=threads, ensemble=ensemble)
    if name == "ray":
        if workers is not None:
            raise BackendError(
                "--workers only applies to --backend local (Ray sizes the pool from the "
                "cluster's CPUs and --threads)"
            )
        return RayBackend(address=ray_address, threads=threads or 1, ensemble=ensemble)
    raise BackendError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)}")
