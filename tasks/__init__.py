"""The paper's synthetic tasks: frozen specs with deterministic, vectorised generators.

    from infoprobe.tasks import make_task
    task = make_task("intrinsic-dim", T=16, D=2, seed=0)
    x, y = task.sample(256, np.random.default_rng(0))   # x [n, T, d], y [n, d_out] float32

A leaf pillar: imports nothing from the rest of infoprobe.
"""

from .errors import TaskError
from .pairwise import IntrinsicDim, PairwiseMin
from .positional import AggregateDecode, FixedPositions
from .registry import TASKS, make_task, task_class, task_from_dict
from .retrieval import DRetrieval, KthLargest
from .spec import Task
from .structure import ORIENTATIONS, QUERY_GROUPS, Comparison, ComparisonStructure, Stage
from .triangle import Triangle

__all__ = [
    "ORIENTATIONS",
    "QUERY_GROUPS",
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
    "make_task",
    "task_class",
    "task_from_dict",
]
