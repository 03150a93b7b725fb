"""The six claims of the paper, one module each: grids, training settings, profiles,
figures, checks.

Each module reads top to bottom like a config file: its settings as
:class:`~infoprobe.train.TrainConfig` and :class:`~infoprobe.model.ModelConfig` values
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
=====================  =================================================================
"""

from __future__ import annotations

from infoprobe.reproduce.claims import (
    argmax_probe,
    depth_separation,
    fixed_positions,
    head_count,
    intrinsic_dim,
    triangle,
)
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
from infoprobe.reproduce.grid import Claim, ReproduceError

INTRINSIC_DIM = intrinsic_dim.CLAIM
TRIANGLE = triangle.CLAIM
DEPTH_SEPARATION = depth_separation.CLAIM
FIXED_POSITIONS = fixed_positions.CLAIM
ARGMAX_PROBE = argmax_probe.CLAIM
HEAD_COUNT = head_count.CLAIM

CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in (
        INTRINSIC_DIM,
        TRIANGLE,
        DEPTH_SEPARATION,
        FIXED_POSITIONS,
        ARGMAX_PROBE,
        HEAD_COUNT,
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
    "DEPTH_SEPARATION",
    "FIXED_POSITIONS",
    "HEAD_COUNT",
    "INTRINSIC_DIM",
    "PAPER_LR_NOTE",
    "PAPER_SEEDS",
    "PAPER_TRAIN",
    "QUICK_SEEDS",
    "QUICK_TRAIN",
    "TRIANGLE",
    "arch",
    "get_claim",
    "heads_label",
    "paper_runtime",
    "task",
]
