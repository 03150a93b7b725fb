"""Why do the (D,D) intrinsic-dim models stop short? A pre-registered study of the recipe.

Background: at the quick profile's recipe (10k steps, lr 2e-3, warm-up 100, batch 256),
half the (2,2) seeds end near 1e-2 and every run is still improving at its last
evaluation. A pilot on development seed 0 (10k steps each; not a held-out seed) gave:
lr 1e-3 1.46e-2, lr 2e-3 (baseline) 1.07e-2, lr 2e-3 without weight decay 1.09e-2,
lr 5e-3 with warm-up 1000 5.8e-3. So the learning rate moved the result and weight
decay did not; the candidates below follow from that.

The rule, fixed before any run of this script:

- task intrinsic-dim D=2, d=4, T=16; model E=32, FFN 128, readout 32; batch 256 of fresh
  samples; AdamW (wd 1e-2), linear warm-up, cosine decay to 0, clipping 1; 10k steps;
  every seed and recipe trained in one batched ensemble per shape (infoprobe.train.ensemble);
- held-out seeds 300, 301, 302, 303: disjoint from the profiles' (0..3), the
  architecture selection's (100, 101) and the pilot's (0);
- candidates, on the (2,2) model only:
    R0 ``baseline``  lr 2e-3, warm-up 100 (the quick profile's recipe)
    R1 ``lr5e-3``    lr 5e-3, warm-up 1000
    R2 ``lr1e-2``    lr 1e-2, warm-up 1000
    R3 ``lr5e-3-g0.5`` lr 5e-3, warm-up 1000, init_gain 0.5 (a smaller initial scale)
- score: the median over the four seeds of the best validation NMSE;
- adopt the lowest-scoring candidate only if its score is at most half the baseline's
  and its worst seed is no worse than the baseline's worst seed; else keep the baseline;
- then train the one-head-short (1,2) model with the baseline and the adopted recipe
  (same seeds) and report the gap median (1,2) / median (2,2) for both, every seed shown.

Not studied here, with the reason: 30k and 100k steps (3x and 10x the compute; a 30k-step
run of seed 0 at the baseline reached 4.4e-3 against 1.07e-2), batch size (changes the
compute per step), float64 (several times slower on this CPU).

Records go to ``--out`` (one JSON per member, written as it finishes; a rerun skips
finished members). The last line printed is the ratio baseline score / adopted score.

    python bench/recipe_study.py [--out bench-out/recipe-study] [--part 0 --parts 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from infoprobe.base.atomic import atomic_output
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
from infoprobe.train.ensemble import train_ensemble

SEEDS = (300, 301, 302, 303)
ADOPT_FACTOR = 2.0
BASE = TrainConfig(steps=10_000, lr=2e-3, warmup=100, compile=True)
RECIPES = {
    "baseline": ({}, {}),
    "lr5e-3": ({"lr": 5e-3, "warmup": 1000}, {}),
    "lr1e-2": ({"lr": 1e-2, "warmup": 1000}, {}),
    "lr5e-3-g0.5": ({"lr": 5e-3, "warmup": 1000}, {"init_gain": 0.5}),
}
TASK = make_task("intrinsic-dim", D=2, T=16)


def model_config(heads: tuple[int, int], recipe: str) -> ModelConfig:
    base = ModelConfig(d_in=TASK.d, n_ctx=TASK.T, d_model=32, heads=heads)
    return replace(base, **RECIPES[recipe][1])


def record_path(out: Path, heads: tuple[int, int], recipe: str, seed: int) -> Path:
    return out / f"heads-{heads[0]}-{heads[1]}" / f"{recipe}-s{seed}.json"


def train_group(out: Path, heads: tuple[int, int], recipes: list[str], seeds: list[int]):
    """Train every (recipe, seed) of ``heads`` without a record, as one ensemble."""
    members = [(r, s) for r in recipes for s in seeds if not record_path(out, heads, r, s).exists()]
    if not members:
        return
    model_cfgs = [model_config(heads, r) for r, _ in members]
    cfgs = [replace(BASE, seed=s, **RECIPES[r][0]) for r, s in members]

    def save(m: int, result) -> None:
        recipe, seed = members[m]
        path = record_path(out, heads, recipe, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"recipe": recipe, "seed": seed, "heads": list(heads), **result.metrics()}
        record["history"] = result.history
        with atomic_output(path, overwrite=True) as tmp:
            tmp.write_text(json.dumps(record, indent=1))
        print(f"{heads} {recipe} seed {seed}: best val NMSE {result.val_nmse:.3g}", flush=True)

    train_ensemble(TASK, model_cfgs, cfgs, progress=False, on_member_done=save)


def scores(out: Path, heads: tuple[int, int], recipe: str) -> list[float] | None:
    paths = [record_path(out, heads, recipe, s) for s in SEEDS]
    if not all(p.exists() for p in paths):
        return None
    return [json.loads(p.read_text())["val_nmse"] for p in paths]


def adopted(out: Path) -> str | None:
    """The recipe the rule adopts, or None while (2,2) records are missing."""
    table = {r: scores(out, (2, 2), r) for r in RECIPES}
    if any(v is None for v in table.values()):
        return None
    base = table["baseline"]
    best = min(table, key=lambda r: statistics.median(table[r]))
    ok = statistics.median(table[best]) * ADOPT_FACTOR <= statistics.median(base)
    return best if ok and max(table[best]) <= max(base) else "baseline"


def report(out: Path) -> None:
    choice = adopted(out)
    print("heads  recipe        " + "  ".join(f"seed {s}" for s in SEEDS) + "   median")
    for heads in ((2, 2), (1, 2)):
        for recipe in RECIPES:
            values = scores(out, heads, recipe)
            if values is not None:
                cells = "  ".join(f"{v:8.2e}" for v in values)
                print(f"{heads}  {recipe:12s}  {cells}  {statistics.median(values):8.2e}")
    if choice is None:
        print("incomplete: the (2,2) runs of some recipes are missing")
        return
    for recipe in sorted({"baseline", choice}):
        a, b = scores(out, (1, 2), recipe), scores(out, (2, 2), recipe)
        if a is not None:
            gap = statistics.median(a) / statistics.median(b)
            print(f"gap median (1,2) / median (2,2) with {recipe}: {gap:.1f}x")
    base = statistics.median(scores(out, (2, 2), "baseline"))
    print(f"adopted: {choice}")
    ratio = base / statistics.median(scores(out, (2, 2), choice))
    print(f"baseline score / adopted score: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out/recipe-study"))
    parser.add_argument("--part", type=int, default=0, help="this process's share of seeds")
    parser.add_argument("--parts", type=int, default=1, help="processes sharing the seeds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--report", action="store_true", help="only print the table")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = list(SEEDS[args.part :: args.parts])
    if not args.report:
        train_group(args.out, (2, 2), list(RECIPES), seeds)
        while (choice := adopted(args.out)) is None:  # the other parts' (2,2) runs
            time.sleep(30)
        train_group(args.out, (1, 2), sorted({"baseline", choice}), seeds)
    report(args.out)


if __name__ == "__main__":
    main()
