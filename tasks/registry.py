"""The task registry: look tasks up by name, build and rebuild them from plain data."""

from collections.abc import Mapping
from typing import Any

from .errors import TaskError
from .pairwise import IntrinsicDim, PairwiseMin
from .positional import AggregateDecode, FixedPositions
from .retrieval import DRetrieval, KthLargest
from .spec import Task
from .triangle import Triangle

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (
        IntrinsicDim,
        Triangle,
        FixedPositions,
        DRetrieval,
        PairwiseMin,
        KthLargest,
        AggregateDecode,
    )
}


def task_class(name: str) -> type[Task]:
    """The class registered under ``name``; TaskError listing the valid names otherwise."""
    if not isinstance(name, str) or name not in TASKS:
        raise TaskError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


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
