"""Claim 6, single-layer head count (predecessor paper): one layer needs h >= D heads."""

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

QUICK_TRAIN_5K = replace(QUICK_TRAIN, steps=5_000)


def head_count_points(
    heads: Sequence[tuple[int, ...]], Ts: Sequence[int], E: int, train: TrainConfig
) -> tuple[GridPoint, ...]:
    """D-retrieval (D = d = 4) for every head configuration at every T."""

    def series(h: tuple[int, ...]) -> str:
        return f"h={h[0]}" if len(h) == 1 else f"{len(h)} layers {heads_label(h)}"

    def point(h: tuple[int, ...], T: int) -> GridPoint:
        problem = task("d-retrieval", T=T, D=4, d=4)
        return GridPoint(
            label=f"{series(h)} T={T}",
            series=series(h),
            coords={"T": T, "h": h[0], "layers": len(h)},
            task=problem,
            model=arch(problem, E, h),
            train=train,
        )

    return tuple(point(h, T) for h in heads for T in Ts)


QUICK = Profile(
    name="quick",
    seeds=QUICK_SEEDS,
    points=head_count_points(((1,), (2,), (4,)), (8, 16), 32, QUICK_TRAIN_5K)
    + head_count_points(((2, 2),), (16,), 32, QUICK_TRAIN_5K),
    departures=("h in {1, 2, 4}, T in {8, 16}", PAPER_LR_NOTE, "5k steps, 2 seeds"),
    expected_runtime="about 7 min on 2 CPU cores (14 runs of 5k steps; measured 402 s)",
    checks=(
        Check(
            "1 layer: h = D = 4 has a lower best NMSE than h = 1 and h = 2 at every T",
            partial(checks.series_below, x="T", good="h=4", others=["h=1", "h=2"]),
            gate=False,
        ),
    ),
)

PAPER = Profile(
    name="paper",
    seeds=PAPER_SEEDS,
    points=head_count_points(((1,), (2,), (3,), (4,), (6,)), (8, 16, 32, 64), 48, PAPER_TRAIN)
    + head_count_points(((1, 1), (2, 2)), (8, 16, 32, 64), 48, PAPER_TRAIN),
    departures=("E=48: our choice", "50k steps of 256 fresh samples: our choice"),
    expected_runtime=paper_runtime("about 35 h"),
    checks=(
        Check(
            "1 layer: h = 4 has a lower best NMSE than h = 1, 2, 3 at every T",
            partial(checks.series_below, x="T", good="h=4", others=["h=1", "h=2", "h=3"]),
        ),
    ),
)

CLAIM = Claim(
    name="head-count",
    title="Single-layer head count: one layer needs h >= D for D-retrieval",
    paper=(
        "F(X) = sum_{i=1..4} max_t a_i^T x(t), x ~ N(0, I_4): one layer needs h >= D "
        "(h = D reaches about 1e-5 to 1e-6, h < D stays >= 1e-3 and worsens with T); "
        "two layers need about L*h >= D."
    ),
    profiles={"quick": QUICK, "paper": PAPER},
    figures=(
        FigureSpec(
            name="nmse_vs_T",
            kind="nmse_vs",
            caption="Best validation NMSE (line) and every seed (dots) against T, per head count.",
            x="T",
            log=True,
        ),
        FigureSpec(
            name="nmse_vs_h",
            kind="nmse_vs",
            caption="One layer: best validation NMSE against the number of heads h, per T (D = 4).",
            x="h",
            log=True,
            where={"layers": 1},
            series_by="T",
        ),
    ),
)
