"""The six claims of the paper and the cost-law rate study, one module each: grids,
training settings, profiles, figures, checks.

Each module reads top to bottom like a config file: its settings as
:class:`~infoprobe.train.config.TrainConfig` and :class:`~infoprobe.model.ModelConfig` values
(built from :mod:`~infoprobe.reproduce.claims.defaults`), the grid points, the ``QUICK``
and ``PAPER`` profiles and the ``CLAIM`` with its figures.

=====================  =================================================================
module                 claim
=====================  =================================================================
``intrinsic_dim``      intrinsic-dim: a 2-layer model needs h1 >= D and h2 >= D
``triangle``           triangle: an order-3 comparison defeats every fixed architecture
``depth_separation``   depth-separation: pairwise minimum, 1 layer vs 2 layers
``fixed_positions``    fixed-positions: CLS attends 1/3 to each of x(1), x(2), x(3)
``argmax_probe``       argmax-probe: only the most attended key is linearly recoverable
``head_count``         head-count: one layer needs h >= D heads for D-retrieval
``cost_law``           cost-law: fitted rates of NMSE against parameters beside alpha
=====================  =================================================================
"""

from __future__ import annotations

from infoprobe.reproduce.claims import (
    argmax_probe,
    cost_law,
    depth_separation,
    fixed_positions,
    head_count,
    intrinsic_dim,
    triangle,
)
from infoprobe.reproduce.claims.argmax_probe import argmax_points
from infoprobe.reproduce.claims.defaults import (
    PAPER_LR_NOTE,
    PAPER_SEEDS,
    PAPER_TRAIN,
    QUICK_SEEDS,
    QUICK_TRAIN,
    arch,
    heads_label,
    paper_runtime,
    task,
)
from infoprobe.reproduce.claims.depth_separation import depth_check, depth_points
from infoprobe.reproduce.claims.fixed_positions import fixed_positions_points
from infoprobe.reproduce.claims.head_count import head_count_points
from infoprobe.reproduce.claims.intrinsic_dim import intrinsic_dim_points
from infoprobe.reproduce.claims.triangle import triangle_points
from infoprobe.reproduce.grid import Claim, ReproduceError

# The names these settings had when all claims were one module.
INTRINSIC_QUICK_D2_SEEDS = intrinsic_dim.QUICK_D2_SEEDS
INTRINSIC_QUICK_D2_TRAIN = intrinsic_dim.QUICK_D2_TRAIN
INTRINSIC_QUICK_D2_MODEL = {"init_gain": intrinsic_dim.QUICK_D2_INIT_GAIN}  # ModelConfig fields
PAPER_INTRINSIC_WIDTHS = intrinsic_dim.PAPER_WIDTHS
TRIANGLE_MODELS = triangle.MODELS
DEPTH_MATCHED = depth_separation.MATCHED
DEPTH_WIDTHS = depth_separation.WIDTHS

INTRINSIC_DIM = intrinsic_dim.CLAIM
TRIANGLE = triangle.CLAIM
DEPTH_SEPARATION = depth_separation.CLAIM
FIXED_POSITIONS = fixed_positions.CLAIM
ARGMAX_PROBE = argmax_probe.CLAIM
HEAD_COUNT = head_count.CLAIM
COST_LAW = cost_law.CLAIM

CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in (
        INTRINSIC_DIM,
        TRIANGLE,
        DEPTH_SEPARATION,
        FIXED_POSITIONS,
        ARGMAX_PROBE,
        HEAD_COUNT,
        COST_LAW,
    )
}


def get_claim(name: str | Claim) -> Claim:
    """The claim called ``name`` (a :class:`Claim` passes through)."""
    if isinstance(name, Claim):
        return name
    if name not in CLAIMS:
        raise ReproduceError(f"unknown claim {name!r}; valid claims: {', '.join(CLAIMS)}")
    return CLAIMS[name]


__all__ = [
    "ARGMAX_PROBE",
    "CLAIMS",
    "COST_LAW",
    "DEPTH_MATCHED",
    "DEPTH_SEPARATION",
    "DEPTH_WIDTHS",
    "FIXED_POSITIONS",
    "HEAD_COUNT",
    "INTRINSIC_DIM",
    "INTRINSIC_QUICK_D2_MODEL",
    "INTRINSIC_QUICK_D2_SEEDS",
    "INTRINSIC_QUICK_D2_TRAIN",
    "PAPER_INTRINSIC_WIDTHS",
    "PAPER_LR_NOTE",
    "PAPER_SEEDS",
    "PAPER_TRAIN",
    "QUICK_SEEDS",
    "QUICK_TRAIN",
    "TRIANGLE",
    "TRIANGLE_MODELS",
    "arch",
    "argmax_points",
    "depth_check",
    "depth_points",
    "fixed_positions_points",
    "get_claim",
    "head_count_points",
    "heads_label",
    "intrinsic_dim_points",
    "paper_runtime",
    "task",
    "triangle_points",
]
