"""The task registry: look tasks up by name, register new ones, build them from plain data.

Three sources fill it: the built-in tasks; classes registered from Python with
:func:`register_task` (they live in the registering process only); and classes other
distributions list in the entry-point group ``infoprobe.tasks`` (:mod:`.plugins`),
imported once, on the first lookup of a name not registered yet or the first listing of
``TASKS`` (the command line lists it to build its options). Every class passes
:func:`.checks.check_task_class` first. An entry point that fails to import or to pass
the checks makes only its own name unavailable (a lookup of it raises its error); the
other tasks work as before, and :func:`discover_plugins` lists what failed.
"""

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .checks import check_task_class
from .errors import TaskError
from .pairwise import IntrinsicDim, PairwiseMin
from .plugins import entry_point_tasks
from .positional import AggregateDecode, FixedPositions
from .retrieval import DRetrieval, KthLargest
from .spec import Task
from .triangle import Triangle

BUILTIN_TASKS: tuple[type[Task], ...] = (
    IntrinsicDim,
    Triangle,
    FixedPositions,
    DRetrieval,
    PairwiseMin,
    KthLargest,
    AggregateDecode,
)


class TaskRegistry(Mapping[str, type[Task]]):
    """Task name -> task class, read-only as a mapping (change it with
    :func:`register_task` / :func:`unregister_task`). Listing it, or looking up a name
    not registered yet, first imports the entry-point tasks (once)."""

    def __init__(self, builtins: tuple[type[Task], ...]) -> None:
        self._tasks: dict[str, type[Task]] = {cls.name: cls for cls in builtins}
        self._origins = {name: "built-in task" for name in self._tasks}
        self._builtin = frozenset(self._tasks)
        self._from_plugins: set[str] = set()
        self._errors: dict[str, str] = {}
        self._discovered = False
        self._lock = threading.RLock()

    # ---- mapping ---------------------------------------------------------------------
    def __getitem__(self, name: str) -> type[Task]:
        if name not in self._tasks:
            self.discover()
        return self._tasks[name]

    def __iter__(self) -> Iterator[str]:
        self.discover()
        return iter(dict(self._tasks))

    def __len__(self) -> int:
        self.discover()
        return len(self._tasks)

    def __repr__(self) -> str:
        return f"TaskRegistry({sorted(self)})"

    # ---- lookups ---------------------------------------------------------------------
    def lookup(self, name: Any) -> type[Task]:
        """The class registered under ``name``; TaskError saying why there is none."""
        if isinstance(name, str) and name in self:
            return self._tasks[name]
        if isinstance(name, str) and name in self._errors:
            raise TaskError(f"task {name!r} is unavailable: {self._errors[name]}")
        raise TaskError(
            f"unknown task {name!r}; valid tasks: {', '.join(sorted(self))} (a task "
            "registered from Python exists only in the process that registered it; see "
            "docs/tasks.md)"
        )

    def origin(self, name: str) -> str:
        """Where the task ``name`` comes from, in words."""
        self.lookup(name)
        return self._origins[name]

    def builtin(self, name: str) -> bool:
        return name in self._builtin

    # ---- changes ---------------------------------------------------------------------
    def register(self, cls: Any, origin: str, *, plugin: bool = False) -> None:
        """Check ``cls`` and register it under ``cls.name`` (a no-op if it already is)."""
        with self._lock:
            name = getattr(cls, "name", None) if isinstance(cls, type) else None
            if isinstance(name, str) and name in self._tasks:
                if self._tasks[name] is cls:
                    return
                taken = self._tasks[name]
                raise TaskError(
                    f"cannot register {origin}: name: expected a name no other task has, got "
                    f"{name!r}, the name of {self._origins[name]} "
                    f"{taken.__module__}.{taken.__qualname__}"
                )
            check_task_class(cls, origin, self._tasks)
            self._tasks[name] = cls
            self._origins[name] = origin
            self._errors.pop(name, None)
            if plugin:
                self._from_plugins.add(name)

    def unregister(self, name: str) -> None:
        """Remove the task ``name`` (not a built-in one)."""
        with self._lock:
            if name in self._builtin:
                raise TaskError(f"cannot unregister {name!r}: it is a built-in task")
            self.lookup(name)
            del self._tasks[name], self._origins[name]
            self._from_plugins.discard(name)

    def discover(self, refresh: bool = False) -> dict[str, str]:
        """Import the entry-point tasks (once; ``refresh`` forgets them and imports them
        again) and return the entry points that failed: task name -> why."""
        with self._lock:
            if self._discovered and not refresh:
                return dict(self._errors)
            for name in self._from_plugins:
                del self._tasks[name], self._origins[name]
            self._from_plugins.clear()
            self._errors.clear()
            self._discovered = True  # before importing: a plugin may call register_task
            claims: dict[str, list] = {}
            for ep in entry_point_tasks():
                claims.setdefault(ep.name, []).append(ep)
            for name, eps in claims.items():
                self._register_entry_point(name, eps)
            return dict(self._errors)

    def _register_entry_point(self, name: str, eps: list) -> None:
        if len({ep.origin for ep in eps}) > 1:
            listed = "; ".join(ep.origin for ep in eps)
            self._errors[name] = f"several entry points claim the name {name!r}: {listed}"
            return
        ep = eps[0]
        if ep.error is not None:
            self._errors[name] = f"{ep.origin}: {ep.error}"
            return
        if getattr(ep.target, "name", None) != name:
            got = getattr(ep.target, "name", None)
            self._errors[name] = (
                f"cannot register {ep.origin}: name: expected the entry point's name "
                f"{name!r} as the class's name, got {got!r}"
            )
            return
        try:
            self.register(ep.target, ep.origin, plugin=True)
        except TaskError as err:
            self._errors[name] = str(err)


TASKS = TaskRegistry(BUILTIN_TASKS)
"""Every registered task by name (a read-only mapping; see :class:`TaskRegistry`)."""


def register_task(cls: type[Task]) -> type[Task]:
    """Register a task class under its ``name``, for this process; usable as a decorator.

    The class must pass the registration checks (:mod:`infoprobe.tasks.checks`); a
    TaskError names the class, the field, what was expected and what was found.
    Registering the same class again does nothing; another class under a name already
    registered is refused. Other processes (the ``infoprobe`` command, spawned workers,
    Ray workers) see the task only through an entry point (group ``infoprobe.tasks``).
    """
    where = f"{cls.__module__}.{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
    TASKS.register(cls, f"class {where}")
    return cls


def unregister_task(name: str) -> None:
    """Remove a task registered with :func:`register_task` or an entry point (a later
    :func:`discover_plugins` with ``refresh=True`` brings entry-point tasks back)."""
    TASKS.unregister(name)


def discover_plugins(*, refresh: bool = False) -> dict[str, str]:
    """Import the tasks of entry-point group ``infoprobe.tasks`` (done once, on first need;
    ``refresh=True`` imports them again, e.g. after installing a distribution) and return
    the entry points that failed: task name -> why, in one line."""
    return TASKS.discover(refresh=refresh)


def task_class(name: str) -> type[Task]:
    """The class registered under ``name``; TaskError listing the valid names otherwise."""
    return TASKS.lookup(name)


def make_task(name: str, **params: Any) -> Task:
    """Build and validate a task: ``make_task("intrinsic-dim", T=16, D=2, seed=0)``.

    Unspecified parameters take the task's defaults. Raises TaskError for an unknown
    task or parameter (naming the valid ones) or a bad value (naming the field).
    """
    cls = task_class(name)
    valid = cls.param_names()
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise TaskError(
            f"task '{name}': unknown parameter(s) {', '.join(unknown)}; "
            f"valid parameters: {', '.join(valid)}"
        )
    return cls(**params)


def task_from_dict(spec: Mapping[str, Any]) -> Task:
    """Rebuild a task from ``Task.to_dict()`` output (``{"name": ..., "params": {...}}``)."""
    if not isinstance(spec, Mapping):
        raise TaskError(f"task spec must be a mapping with 'name' and 'params', got {spec!r}")
    extra = sorted(set(spec) - {"name", "params"})
    if "name" not in spec or extra:
        raise TaskError(
            f"task spec must have keys 'name' and optionally 'params', got {sorted(spec)}"
        )
    params = spec.get("params", {})
    if not isinstance(params, Mapping):
        raise TaskError(f"task spec field 'params' must be a mapping, got {params!r}")
    return make_task(spec["name"], **params)
