"""``infoprobe probe``: fit probes on an activation cache and write a results file."""

from __future__ import annotations

import argparse
import math

import numpy as np

from infoprobe.commands import summary
from infoprobe.commands.argtypes import finite_float, positive_int_tuple, split_fractions
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.settingsargs import CliField, add_settings_arguments, settings_from_args
from infoprobe.pipeline.probe_settings import ProbeSettings
from infoprobe.probes.observed import Thresholds
from infoprobe.probes.settings import DEFAULT_ALPHAS, TrainingBudget


def _alpha_range(alphas: tuple[float, ...]) -> str:
    return f"{alphas[0]:g}:{alphas[-1]:g}:{len(alphas)}"


PROBE_FIELDS = {
    "alphas": CliField(
        convert=lambda text: alpha_grid(text),  # defined below
        metavar="LOW:HIGH:COUNT",
        help="ridge λ grid, log-spaced, or a comma-separated list; chosen per probe on validation",
        default_text=_alpha_range(DEFAULT_ALPHAS),
    ),
    "fractions": CliField(
        convert=split_fractions,
        metavar="TRAIN,VAL,TEST",
        help="train,val,test fractions, assigned at random by sample",
    ),
    "split_seed": CliField(metavar="SEED", help="seed of the split and of the shuffled control"),
    "ranks": CliField(convert=positive_int_tuple, metavar="R1,R2,.."),
    "block_size": CliField(metavar="B"),
    "mlp_hidden": CliField(metavar="WIDTH", help="MLP/query probe width"),
}
"""What the command line needs of ProbeSettings' fields beyond their metadata."""
THRESHOLD_FIELDS = {
    "tau": CliField(convert=finite_float, help="R² threshold of the observed sets"),
    "margin": CliField(convert=finite_float, help="selectivity threshold (R² above the controls)"),
    "tau_sample": CliField(
        convert=finite_float,
        help="per-sample membership: the largest error over the sample's own baseline "
        "(the error of predicting the mean on it); compare uses the same rule",
    ),
    "q": CliField(
        convert=finite_float,
        flags=("--fdr",),
        metavar="Q",
        help="false discovery rate of the critic's per-sample sets (Benjamini-Hochberg)",
    ),
}
"""Thresholds' fields (their docs are the class's prose, not an Args: section; their
ranges are checked by Thresholds itself, with its own message)."""
BUDGET_FIELDS = {
    "epochs": CliField(help="MLP/query probe epochs"),
    "batch_size": CliField(
        flags=("--probe-batch",),
        aliases=("--batch-size",),
        dest="probe_batch",
        metavar="B",
        help="MLP/query probe minibatch (samples per optimiser step)",
    ),
    "lr": CliField(help="MLP/query/critic probe learning rate (the critic's default: 1e-2)"),
    "restarts": CliField(
        metavar="R",
        help="more starts a cell gets when its MLP/query/critic fit fails on its validation "
        "samples (docs/probes.md, When a fit fails)",
    ),
}
"""TrainingBudget's fields that are options (``--probe-batch``: not the cache's batch)."""

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
The critic (--probe critic) asks instead whether h(t, l) holds x(s), wherever it came
from: a mixture density of x(s) given the state scores each test sample's own x(s) against
the x(s) of other samples (pointwise V-information, nats), and a rank p-value per sample
gives per-sample sets at false discovery rate --fdr (it needs 10/q test samples: 200 at
the default 0.05). It sees what a head copies by content, which fixed-position probes
cannot follow.
A high score means a probe of this budget recovers x(s); "decodable" is not used.
The cache needs the layer sites (--sites residual); role targets also need
blocks.{b}.attn.hook_pattern (--sites residual,attention).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "probe",
        help=summary("probe"),
        description="Fit linear (ridge), MLP, query-conditioned or critic probes from every "
        "token's "
        "state at every layer to every input position, with controls, and write an HDF5 "
        "results file (scores [layer, token, position], observed sets, provenance).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("cache", help="activation cache (.h5) written by `infoprobe cache`")
    add_settings_arguments(p, ProbeSettings, only=("probe", "targets"), extra=PROBE_FIELDS)
    p.add_argument(
        "--control",
        metavar="CACHE",
        help="random-init cache of the same architecture on the same samples",
    )
    p.add_argument("--out", required=True, help="results file to write (.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    add_settings_arguments(
        p,
        ProbeSettings,
        skip=("probe", "targets", "shuffle_seed", "thresholds", "budget", "device"),
        extra=PROBE_FIELDS,
        after={"block_size": _add_thresholds},
    )
    add_settings_arguments(
        p, TrainingBudget, only=("epochs", "batch_size", "lr", "restarts"), extra=BUDGET_FIELDS
    )
    add_settings_arguments(p, ProbeSettings, only=("device",))
    add_runtime_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _add_thresholds(group: argparse._ArgumentGroup) -> None:
    add_settings_arguments(
        group, Thresholds, only=("tau", "margin", "tau_sample", "q"), extra=THRESHOLD_FIELDS
    )


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


def probe_settings_from_args(args: argparse.Namespace) -> ProbeSettings:
    """The ProbeSettings of the parsed options (``--seed`` seeds the split and the
    shuffled control)."""
    return settings_from_args(
        ProbeSettings,
        args,
        extra=PROBE_FIELDS,
        shuffle_seed=args.split_seed,
        thresholds=settings_from_args(Thresholds, args, extra=THRESHOLD_FIELDS),
        budget=settings_from_args(TrainingBudget, args, extra=BUDGET_FIELDS),
    )


def run(args: argparse.Namespace) -> int:
    from infoprobe.pipeline.probing import fit_lines, layer_summary, run_probe

    runtime_from_args(args).apply()
    settings = probe_settings_from_args(args)
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
        line = f"layer {row['layer']} ({row['site']}): mean {row['score_name']} "
        line += f"{row['mean_score']:.3f}"
        if "cls_observed" in row:
            line += (
                f", positions observed: CLS {row['cls_observed']}, "
                f"typical token {row['token_observed_median']:g}"
            )
        print(line)
    for line in fit_lines(results):
        print(line)
    print(f"results: {args.out}  (scores are probe recoveries; 'decodable' is not used)")
    return 0
