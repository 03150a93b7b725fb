"""Does the recipe adopted for intrinsic-dim D=2 help the other claims? A pre-registered
transfer check on the quick profiles.

The recipe study (bench/recipe_study.py) adopted lr 5e-3, warm-up 1000 and weights
initialised at half the LeCun scale (init gain 0.5) for intrinsic-dim D=2, T=16, E=32.
This script runs the quick profile of every other claim twice on the current code, with
the profile's own seeds: as the profile defines it ("current") and with the adopted recipe
in every grid point, everything else unchanged ("adopted"), and prints both side by side.

Rule, stated before any run of this script:
  * The adopted recipe replaces a claim's quick recipe iff (a) the median over grid points
    of best-over-seeds validation NMSE, adopted / current, is <= 0.5, and (b) every
    acceptance check of the profile that passes with the current recipe also passes with
    the adopted one. Otherwise the claim keeps its recipe; both results are reported.
  * One exception, fixed in advance: argmax-probe's intrinsic-dim (2,2) point is the very
    model the study chose the recipe for, so it trains with it whatever this shows (the
    same model trains the same way in every claim); its d-retrieval point follows the rule.

    python bench/recipe_transfer.py run --recipe current --out DIR [--claims a,b]
    python bench/recipe_transfer.py run --recipe adopted --out DIR [--claims a,b]
    python bench/recipe_transfer.py compare --out DIR [--claims a,b]

``run`` trains (resumable: finished runs are kept); ``compare`` reads both results and
prints, per claim, every grid point's best NMSE (and every seed) under both recipes, the
checks, and the rule's verdict; its last line is the number of claims the rule adopts the
recipe for.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from infoprobe.reproduce import CLAIMS, reproduce

CLAIM_NAMES = ("triangle", "depth-separation", "fixed-positions", "argmax-probe", "head-count")
ADOPTED_TRAIN = {"lr": 5e-3, "warmup": 1000}
ADOPTED_INIT_GAIN = 0.5
MAX_RATIO = 0.5
FIXED_IN_ADVANCE = {"argmax-probe": ("intrinsic-dim (2,2) T=16",)}
"""Grid points that take the adopted recipe whatever the rule says (the study's own model)."""


def adopted_profile(name: str):
    """The claim's quick profile with the adopted recipe in every grid point."""
    profile = CLAIMS[name].profile("quick")
    points = tuple(
        replace(p, model=replace(p.model, init_gain=ADOPTED_INIT_GAIN)).with_train(**ADOPTED_TRAIN)
        for p in profile.points
    )
    return replace(profile, points=points)


def run(args: argparse.Namespace) -> None:
    for name in args.claims:
        profile = adopted_profile(name) if args.recipe == "adopted" else "quick"
        reproduce(
            name,
            profile=profile,
            out=Path(args.out) / args.recipe / name,
            workers=args.workers,
            figures=False,
        )


def _best(config: dict) -> float | None:
    return config["best"] and config["best"]["val_nmse"]


def compare(args: argparse.Namespace) -> int:
    adopted_claims = 0
    for name in args.claims:
        results = {}
        for recipe in ("current", "adopted"):
            path = Path(args.out) / recipe / name / "results.json"
            results[recipe] = json.loads(path.read_text()) if path.exists() else None
        if None in results.values():
            print(f"{name}: not run with both recipes")
            continue
        print(f"\n{name}")
        ratios = []
        current = {c["label"]: c for c in results["current"]["configs"]}
        for c in results["adopted"]["configs"]:
            old = current[c["label"]]
            a, b = _best(old), _best(c)
            seeds = {
                r: " ".join(f"{x['val_nmse']:.3g}" for x in cfg["runs"])
                for r, cfg in (("current", old), ("adopted", c))
            }
            ratio = b / a if a and b is not None else float("nan")
            fixed = c["label"] in FIXED_IN_ADVANCE.get(name, ())
            if not fixed:
                ratios.append(ratio)
            print(
                f"  {c['label']:<28} current {a:.3g} ({seeds['current']})  adopted {b:.3g} "
                f"({seeds['adopted']})  ratio {ratio:.2f}"
                + ("  [adopted in advance, not in the rule]" if fixed else "")
            )
        checks_ok = True
        for old, new in zip(results["current"]["checks"], results["adopted"]["checks"],
                            strict=True):  # fmt: skip
            print(f"  check: {old['text']}: current {old['passed']}, adopted {new['passed']}")
            if old["passed"] is True and new["passed"] is not True:
                checks_ok = False
        median = statistics.median(ratios)
        adopt = median <= MAX_RATIO and checks_ok
        adopted_claims += adopt
        print(
            f"  median ratio {median:.2f} (rule: <= {MAX_RATIO}); checks kept: {checks_ok}; "
            f"rule: {'adopt' if adopt else 'keep the current recipe'}"
        )
    print(f"claims the rule adopts the recipe for: {adopted_claims} of {len(args.claims)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("run", "compare"):
        p = sub.add_parser(command)
        p.add_argument("--out", required=True)
        p.add_argument("--claims", default=",".join(CLAIM_NAMES))
        if command == "run":
            p.add_argument("--recipe", choices=("current", "adopted"), required=True)
            p.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    args.claims = [c for c in args.claims.split(",") if c]
    for name in args.claims:
        if name not in CLAIM_NAMES:
            parser.error(f"--claims: {name!r} is not one of {', '.join(CLAIM_NAMES)}")
    if args.command == "run":
        run(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
