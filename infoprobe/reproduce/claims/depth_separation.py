"""Claim 3, depth separation: pairwise minimum, 1 layer vs 2 layers."""

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
    paper_runtime,
    task,
)
from infoprobe.reproduce.grid import Check, Claim, FigureSpec, GridPoint, Profile
from infoprobe.train.config import TrainConfig

# (series, width E, heads per layer).
# 1 layer E=32 (13,793 parameters at d=2) vs 2 layers E=23 (14,003): matched within 2%.
MATCHED = (("1 layer", 32, (1,)), ("2 layers", 23, (1, 1)))
WIDTHS = (
    ("1 layer", 16, (1,)),
    ("1 layer", 64, (1,)),
    ("2 layers", 12, (1, 1)),
    ("2 layers", 45, (1, 1)),
)
QUICK_STEPS = 5_000


def depth_check(*, gate: bool) -> Check:
    """Depth separation: at matched parameters, 2 layers beat 1 layer at every T."""
    return Check(
        "at matched parameters, 2 layers reach a lower best NMSE than 1 layer at every T",
        partial(
            checks.series_below, x="T", good="2 layers", others=["1 layer"], where={"sweep": "T"}
        ),
        gate=gate,
    )


def depth_points(Ts: Sequence[int], width_T: int, train: TrainConfig) -> tuple[GridPoint, ...]:
    """Matched-parameter 1- vs 2-layer models at every T, plus other widths at ``width_T``."""

    def point(series: str, E: int, heads: tuple[int, ...], T: int, sweep: str) -> GridPoint:
        problem = task("pairwise-min", T=T, d=2)
        return GridPoint(
            label=f"{series} E={E} T={T}",
            series=series,
            coords={"T": T, "sweep": sweep, "width_sweep": T == width_T},
            task=problem,
            model=arch(problem, E, heads),
            train=train,
        )

    matched = [point(s, E, h, T, "T") for T in Ts for s, E, h in MATCHED]
    widths = [point(s, E, h, width_T, "width") for s, E, h in WIDTHS]
    return tuple(matched + widths)


QUICK = Profile(
    name="quick",
    seeds=QUICK_SEEDS,
    points=depth_points((4, 8, 16), 16, replace(QUICK_TRAIN, steps=QUICK_STEPS)),
    departures=(
        "T in {4, 8, 16}",
        PAPER_LR_NOTE,
        "5k steps, 2 seeds",
        "widths (matched 1 layer E=32 vs 2 layers E=23): our choice",
    ),
    expected_runtime="about 13 min on 2 CPU cores (20 runs of 5k steps; measured 796 s)",
    checks=(depth_check(gate=False),),
)

PAPER = Profile(
    name="paper",
    seeds=PAPER_SEEDS,
    points=depth_points((8, 16, 32, 64), 64, PAPER_TRAIN),
    departures=(
        "widths (matched 1 layer E=32 vs 2 layers E=23): our choice",
        "50k steps of 256 fresh samples: our choice",
    ),
    expected_runtime=paper_runtime("about 14 h"),
    checks=(depth_check(gate=True),),
)

CLAIM = Claim(
    name="depth-separation",
    title="Depth separation: pairwise minimum, 1 layer vs 2 layers",
    paper=(
        "For min_{s != t} <x(s), x(t)>, one layer needs parameters growing like "
        "eps^-k(T) with k linear in T; two layers with one head each need O(eps^-1), "
        "independent of T."
    ),
    profiles={"quick": QUICK, "paper": PAPER},
    figures=(
        FigureSpec(
            name="nmse_vs_T",
            kind="nmse_vs",
            caption="Best validation NMSE against T at matched parameter counts; the legend "
            "gives InfoFlow's exponent alpha(T) of each depth.",
            x="T",
            log=True,
            where={"sweep": "T"},
            annotate="exponent",
        ),
        FigureSpec(
            name="nmse_vs_params",
            kind="nmse_vs",
            caption="Best validation NMSE against the parameter count at the largest T.",
            x="n_params",
            log=True,
            where={"width_sweep": True},
        ),
    ),
)
