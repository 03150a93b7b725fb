"""The paper's synthetic tasks: frozen specs with deterministic, vectorised generators.

    from infoprobe.tasks import make_task
    task = make_task("intrinsic-dim", T=16, D=2, seed=0)
    x, y = task.sample(256, np.random.default_rng(0))   # x [n, T, d], y [n, d_out] float32

Your own task: subclass Task and decorate it with ``@register_task`` (this process), or
list it in the entry-point group ``infoprobe.tasks`` (every process); docs/tasks.md.
A leaf pillar: imports nothing from the rest of infoprobe but infoprobe.base.
"""

from .checks import RESERVED_PARAMETERS
from .errors import TaskError
from .pairwise import IntrinsicDim, PairwiseMin
from .positional import AggregateDecode, FixedPositions
from .registry import (
    TASKS,
    discover_plugins,
    make_task,
    register_task,
    task_class,
    task_from_dict,
    unregister_task,
)
from .retrieval import DRetrieval, KthLargest
from .spec import Task
from .structure import ORIENTATIONS, QUERY_GROUPS, Comparison, ComparisonStructure, Stage
from .triangle import Triangle

__all__ = [
    "ORIENTATIONS",
    "QUERY_GROUPS",
    "RESERVED_PARAMETERS",
    "TASKS",
    "AggregateDecode",
    "Comparison",
    "ComparisonStructure",
    "DRetrieval",
    "FixedPositions",
    "IntrinsicDim",
    "KthLargest",
    "PairwiseMin",
    "Stage",
    "Task",
    "TaskError",
    "Triangle",
    "discover_plugins",
    "make_task",
    "register_task",
    "task_class",
    "task_from_dict",
    "unregister_task",
]
