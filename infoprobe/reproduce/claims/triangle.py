"""Claim 2, triangle centre: an order-3 comparison defeats every fixed architecture."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from infoprobe.reproduce import checks
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
from infoprobe.reproduce.grid import Check, Claim, FigureSpec, GridPoint, Profile
from infoprobe.train.config import TrainConfig

# (heads per layer, width E): the paper's three configurations.
MODELS = (((2, 2), 24), ((4, 4), 24), ((4, 4), 48))
QUICK_STEPS = 3_000


def triangle_points(Ts: Sequence[int], train: TrainConfig) -> tuple[GridPoint, ...]:
    """Every configuration of :data:`MODELS` at every T (d = 2)."""

    def point(heads: tuple[int, ...], E: int, T: int) -> GridPoint:
        problem = task("triangle", T=T, d=2)
        return GridPoint(
            label=f"{heads_label(heads)}/E={E} T={T}",
            series=f"{heads_label(heads)}/E={E}",
            coords={"T": T},
            task=problem,
            model=arch(problem, E, heads),
            train=train,
        )

    return tuple(point(heads, E, T) for heads, E in MODELS for T in Ts)


QUICK = Profile(
    name="quick",
    seeds=QUICK_SEEDS,
    points=triangle_points((4, 8, 16), replace(QUICK_TRAIN, steps=QUICK_STEPS)),
    departures=("T in {4, 8, 16} instead of 8..64", PAPER_LR_NOTE, "3k steps, 2 seeds"),
    expected_runtime="about 8 min on 2 CPU cores (18 runs of 3k steps; measured 474 s)",
    checks=(
        Check(
            "best NMSE increases with T in every configuration and is > 0.8 at T=16",
            partial(checks.rises_with, x="T", floor=0.8, at=16),
        ),
    ),
)

PAPER = Profile(
    name="paper",
    seeds=PAPER_SEEDS,
    points=triangle_points((8, 16, 32, 64), PAPER_TRAIN),
    departures=("50k steps of 256 fresh samples: our choice",),
    expected_runtime=paper_runtime("about 22 h"),
    checks=(
        Check(
            "best NMSE increases with T in every configuration",
            partial(checks.rises_with, x="T"),
        ),
    ),
)

CLAIM = Claim(
    name="triangle",
    title="Triangle centre: an order-3 comparison defeats every fixed architecture",
    paper=(
        "F(X) = min ||x(t1)+x(t2)+x(t3)|| (d=2): NMSE rises towards 1 as T grows (8..64) for "
        "(2,2)/E=24, (4,4)/E=24 and (4,4)/E=48."
    ),
    profiles={"quick": QUICK, "paper": PAPER},
    figures=(
        FigureSpec(
            name="nmse_vs_T",
            kind="nmse_vs",
            caption="Best validation NMSE (line) and every seed (dots) against T; the tick "
            "labels give InfoFlow's comparison number C(T,3) (order 3).",
            x="T",
            log=False,
            annotate="comparison_number",
        ),
    ),
)
