"""``infoprobe probe``: fit probes on an activation cache and write a results file."""

from __future__ import annotations

import argparse
import math

import numpy as np

from infoprobe.commands.argtypes import (
    device,
    finite_float,
    positive_float,
    positive_int,
    positive_int_list,
    seed,
    split_fractions,
)
from infoprobe.pipeline.probing import PROBES, TARGETS, ProbeSettings, layer_summary, run_probe
from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.observed import (
    DEFAULT_MARGIN,
    DEFAULT_TAU,
    DEFAULT_TAU_SAMPLE,
    Thresholds,
)

EXAMPLES = """examples:
  infoprobe probe acts.h5 --control random-init.h5 --out probes.h5
  infoprobe probe acts.h5 --targets roles --control random-init.h5 --out roles.h5
  infoprobe probe acts.h5 --probe query --epochs 50 --out query.h5

For every layer l, token t and input position s the probe decodes x(s) from h(t, l) and
reports R² (pooled over the d coordinates of x(s)), NMSE and identification accuracy on a
held-out test split, beside the same probe on shuffled (state, target) pairs and on the
--control cache (a random-init model of the same architecture on the same samples:
`infoprobe cache CHECKPOINT --random-init SEED`). Observed sets use R² >= --tau and
R² - shuffled control >= --margin; the file keeps the continuous scores so thresholds can be swept.
Role targets decode x at the key each head attends to most (rank 1) and second most
(rank 2), beside the same probe from h(t, 0) (the conditional baseline).
A high score means a probe of this budget recovers x(s); "decodable" is not used.
The cache needs the layer sites (--sites residual); role targets also need
blocks.{b}.attn.hook_pattern (--sites residual,attention).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe",
        help="probe which input positions each token's state encodes, per layer",
        description="Fit linear (ridge), MLP or query-conditioned probes from every token's "
        "state at every layer to every input position, with controls, and write an HDF5 "
        "results file (scores [layer, token, position], observed sets, provenance).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("cache", help="activation cache (.h5) written by `infoprobe cache`")
    p.add_argument("--probe", choices=PROBES, default="linear", help="probe family (linear)")
    p.add_argument(
        "--targets",
        choices=TARGETS,
        default="positions",
        help="x(s) at every position, or role targets from attention (positions)",
    )
    p.add_argument(
        "--control",
        metavar="CACHE",
        help="random-init cache of the same architecture on the same samples",
    )
    p.add_argument("--out", required=True, help="results file to write (.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--alphas",
        type=alpha_grid,
        default=alpha_grid("1e-3:1e5:17"),
        metavar="LOW:HIGH:COUNT",
        help="ridge λ grid, log-spaced, or a comma-separated list (1e-3:1e5:17)",
    )
    p.add_argument(
        "--split",
        type=split_fractions,
        default="0.7,0.15,0.15",
        help="train,val,test fractions, assigned at random by sample (%(default)s)",
    )
    p.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="seed of the split and shuffled control (%(default)s)",
    )
    p.add_argument(
        "--ranks",
        type=positive_int_list,
        default="1,2",
        help="attention ranks of role targets, 1 = most attended key (1,2)",
    )
    p.add_argument(
        "--tau", type=finite_float, default=DEFAULT_TAU, help=f"R² threshold ({DEFAULT_TAU})"
    )
    p.add_argument(
        "--margin",
        type=finite_float,
        default=DEFAULT_MARGIN,
        help=f"selectivity threshold ({DEFAULT_MARGIN})",
    )
    p.add_argument(
        "--tau-sample",
        type=finite_float,
        default=DEFAULT_TAU_SAMPLE,
        help=f"per-sample error threshold ({DEFAULT_TAU_SAMPLE})",
    )
    p.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help="samples per streamed block (default: about 64 MiB)",
    )
    p.add_argument("--hidden", type=positive_int, default=64, help="MLP/query probe width (64)")
    p.add_argument("--epochs", type=positive_int, default=100, help="MLP/query probe epochs (100)")
    p.add_argument(
        "--batch-size", type=positive_int, default=256, help="MLP/query probe batch (256)"
    )
    p.add_argument(
        "--lr", type=positive_float, default=1e-3, help="MLP/query probe learning rate (1e-3)"
    )
    p.add_argument("--device", type=device, default="cpu", help="torch device (cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def alpha_grid(text: str) -> tuple[float, ...]:
    """The ridge λ grid: ``LOW:HIGH:COUNT`` (COUNT log-spaced values from LOW to HIGH,
    0 < LOW <= HIGH, COUNT >= 1) or a comma-separated list of values > 0."""
    parts = text.split(":")
    if len(parts) == 3:
        try:
            low, high, count = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected LOW:HIGH:COUNT like 1e-3:1e5:17, got {text!r}"
            ) from None
        if not (math.isfinite(low) and math.isfinite(high)) or not 0 < low <= high or count < 1:
            raise argparse.ArgumentTypeError(
                f"expected LOW:HIGH:COUNT with finite 0 < LOW <= HIGH and COUNT >= 1, got {text!r}"
            )
        return tuple(float(a) for a in np.logspace(np.log10(low), np.log10(high), count))
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LOW:HIGH:COUNT or comma-separated values, got {text!r}"
        ) from None
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected finite values > 0, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    settings = ProbeSettings(
        probe=args.probe,
        targets=args.targets,
        alphas=args.alphas,
        fractions=args.split,
        split_seed=args.seed,
        shuffle_seed=args.seed,
        ranks=tuple(args.ranks),
        block_size=args.block_size,
        thresholds=Thresholds(tau=args.tau, margin=args.margin, tau_sample=args.tau_sample),
        mlp_hidden=args.hidden,
        budget=TrainingBudget(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr),
        device=args.device,
    )
    results = run_probe(
        args.cache,
        args.out,
        control_path=args.control,
        settings=settings,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    print(
        f"{args.probe} probes, {args.targets} targets, T={results.T}, d={results.d}, "
        f"{len(results.test_index)} test samples"
        + ("" if args.control else "  (no --control: random-init baseline not reported)")
    )
    for row in layer_summary(results):
        line = f"layer {row['layer']} ({row['site']}): mean R² {row['mean_r2']:.3f}"
        if "cls_observed" in row:
            line += (
                f", positions passing τ: CLS {row['cls_observed']}, "
                f"typical token {row['token_observed_median']:g}"
            )
        print(line)
    print(f"results: {args.out}  (scores are probe recoveries; 'decodable' is not used)")
    return 0
