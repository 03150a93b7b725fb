"""``infoprobe influence``: measure flow (does h(t, l) move when x(s) moves?) on a cache."""

from __future__ import annotations

import argparse

from infoprobe.commands import summary
from infoprobe.commands.argtypes import add_trust_argument, positive_int, seed
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.settingsargs import (
    DeviceSetting,
    add_settings_arguments,
    settings_from_args,
)
from infoprobe.influence.sets import DEFAULT_FLOW_FRACTION, flow_threshold
from infoprobe.influence.settings import InfluenceSettings

DESCRIPTION = """Measure flow: for every layer l, token t (CLS = T) and input position s, how much
the state h(t, l) moves when x(s) alone moves, on exactly the samples of an activation cache.
Probes ask whether x(s) can be decoded from h(t, l); flow asks whether h(t, l) depends on
x(s). Two questions:

  local sensitivity (--method local, default): does the state carry x(s) now?
      g = σ² ‖∂h(t,l)/∂x(s)‖_F² / v(l,t), the share of the state's variance v that x(s)
      explains through the linearised network (for inputs of equal variance in every
      direction, a linear map of x(s) alone scores 1, an equal linear mix of all T
      positions 1/T at each).
      --estimator jacobian (default) is exact (forward-mode AD over the d directions of
      x(s)); --estimator fd nudges x(s) by EPS·σ·u along K random directions u.
  resample ablation (--method resample): could x(s) change the state?
      g = mean over R partner samples j of ‖h(x with x(s) ← x_j(s)) − h(x)‖² / (2 v).
      Under content-based selection it also marks keys that only took part in the
      selection (redrawn, they can win it): a superset of what local sensitivity marks.

s is in the flow set of (t, l) when g ≥ 0.25 / T (a quarter of the uniform share). The
output influence.h5 holds the per-sample scores [layer, sample, token, position], the
state variance, the mean over samples and the provenance (docs/influence.md). Blocks of
samples are committed as they finish; re-running the same command resumes an interrupted
run, with identical results."""

EXAMPLES = f"""examples:
  infoprobe influence runs/id --cache runs/id/acts.h5 --out runs/id/influence.h5
  infoprobe influence runs/id --cache runs/id/acts.h5 --method resample --resamples 4 \\
      --out runs/id/resample.h5
  infoprobe influence runs/id --cache runs/id/acts.h5 --random-init 1 \\
      --out runs/id/influence-random.h5      # control: untrained weights, same samples
  infoprobe influence runs/id --cache runs/id/acts.h5 --estimator fd --directions 8 \\
      --n 2048 --out fd.h5

The cache must come from CHECKPOINT (`infoprobe cache CHECKPOINT --out acts.h5`, any
sites). Read the file in Python with infoprobe.influence.read_influence(path); its
.sets() gives bool [L+1, n, T+1, T+1] at the default threshold (fraction
{DEFAULT_FLOW_FRACTION})."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "influence",
        help=summary("influence"),
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint folder")
    p.add_argument(
        "--cache", required=True, metavar="FILE", help="activation cache of this checkpoint"
    )
    p.add_argument("--out", required=True, metavar="FILE", help="influence file to write (.h5)")
    add_settings_arguments(p, InfluenceSettings, skip=("max_sequences",))
    p.add_argument(
        "--random-init",
        type=seed,
        default=None,
        metavar="SEED",
        help="control: same architecture with weights initialised from SEED",
    )
    p.add_argument(
        "--n", type=positive_int, default=None, help="use the first N cache samples (all)"
    )
    add_settings_arguments(p, DeviceSetting)
    add_runtime_arguments(p)
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing influence file at --out"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_trust_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from infoprobe.influence import influence_for_cache, layer_summary

    runtime_from_args(args).apply()
    settings = settings_from_args(InfluenceSettings, args)
    weights = (
        "checkpoint weights"
        if args.random_init is None
        else f"random-init control (seed {args.random_init})"
    )
    print(f"{args.checkpoint} ({weights}) on {args.cache}: {settings.describe()}")
    result = influence_for_cache(
        args.checkpoint,
        args.cache,
        args.out,
        settings=settings,
        random_init_seed=args.random_init,
        n=args.n,
        device=args.device,
        overwrite=args.overwrite,
        progress=not args.quiet,
        trust_code=args.trust_code,
    )
    T = result.T
    print(
        f"n={result.n} samples, T={T}, σ={result.input_scale:.4g}; flow set: g ≥ "
        f"{flow_threshold(T):.4g} (0.25/T)"
    )
    print("layer  g, mean (median): own position   other positions       CLS  | "
          "set size: token  CLS")  # fmt: skip
    for row in layer_summary(result.aggregate, result.scores):
        cells = [f"{row[k]:.3g} ({row[k + '_median']:.3g})" for k in ("own", "others", "cls")]
        print(
            f"{row['layer']:>5}  {cells[0]:>30}  {cells[1]:>16}  {cells[2]:>13}  | "
            f"{row['set_size']:>14.2f}  {row['cls_set_size']:>3.2f}"
        )
    print(f"results: {result.path}")
    return 0
