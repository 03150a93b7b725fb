"""``infoprobe compare``: predicted vs observed information sets, per layer, in numbers."""

from __future__ import annotations

import argparse

from infoprobe.compare import CAVEAT, Comparison, write_comparisons
from infoprobe.errors import UsageError
from infoprobe.report.sources import compare_sources, load_sources
from infoprobe.rollout import HEAD_FUSIONS, RolloutConfig

DESCRIPTION = """\
Compare InfoFlow's predicted information sets I_pred(t, l) with the sets the probes
observed I_obs(t, l), on the probes' test samples: per layer, recall (predicted positions
that are decodable), violations (decodable positions InfoFlow says cannot be there) and
omissions (predicted, not decodable) reported apart, precision, Jaccard, and the
threshold-free AUROC of the continuous decodability against predicted membership.

The files must come from the same task, data seed, samples and model: the command refuses
mismatched provenance. With --cache (the activation cache the probes were fitted on) the
input samples are compared exactly, and --rollout adds attention rollout (Abnar & Zuidema
2020) as a second predictor. Decodable is not used: see docs/report.md."""

EPILOG = """\
examples:
  infoprobe compare pred.h5 probes.h5
  infoprobe compare pred.h5 probes.h5 --cache acts.h5 --rollout --out comparison.json
  infoprobe compare pred.h5 probes.h5 --cache acts.h5 --rollout --head-fusion max \\
      --rollout-weight 0.7 --rollout-threshold 0.5
"""


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Input files, probe choice and rollout options (shared with ``infoprobe report``)."""
    parser.add_argument("pred", metavar="PRED.h5", help="predicted sets (infoprobe predict --out)")
    parser.add_argument("probes", metavar="PROBES.h5", help="probe results (infoprobe probe)")
    parser.add_argument(
        "--cache",
        metavar="ACTS.h5",
        default=None,
        help="activation cache the probes were fitted on: exact input check, attention "
        "patterns for --rollout and the per-sample view",
    )
    parser.add_argument(
        "--probe",
        choices=("linear", "mlp", "query"),
        default=None,
        help="whose scores to compare (default: the probe the results were run with)",
    )
    parser.add_argument(
        "--score",
        choices=("r2", "selectivity"),
        default="r2",
        help="continuous aggregate score: test R² or R² minus the largest control (default r2)",
    )
    rollout = parser.add_argument_group("attention rollout (second predictor)")
    rollout.add_argument(
        "--rollout", action="store_true", help="also compare attention rollout (needs --cache)"
    )
    rollout.add_argument(
        "--rollout-weight",
        type=float,
        default=0.5,
        metavar="A",
        help="A' = A·attention + (1-A)·identity (default 0.5, as in the paper)",
    )
    rollout.add_argument(
        "--head-fusion", choices=HEAD_FUSIONS, default="mean", help="fuse heads (default mean)"
    )
    rollout.add_argument(
        "--rollout-threshold",
        type=float,
        default=0.25,
        metavar="R",
        help="s is in the set when its rollout weight is >= R/(T+1) (default 0.25)",
    )


def rollout_config_from_args(args: argparse.Namespace) -> RolloutConfig | None:
    """The rollout parameters, or None without --rollout."""
    if not args.rollout:
        return None
    return RolloutConfig(args.rollout_weight, args.head_fusion, args.rollout_threshold)


def print_verdicts(comparisons: list[Comparison]) -> None:
    """Each predictor's verdict per layer, then the caveat."""
    for comparison in comparisons:
        print(f"{comparison.name}:")
        for verdict in comparison.verdicts:
            print(f"  {verdict}")
    print(f"caveat: {CAVEAT}")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare predicted and observed information sets (violations, omissions, AUROC)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--out", metavar="COMPARISON.json", default=None, help="write every number as JSON"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.set_defaults(func=run)


def sources_from_args(args: argparse.Namespace, *, want_patterns: bool):
    """(rollout config or None, loaded :class:`Sources`) from the shared source options."""
    rollout = rollout_config_from_args(args)
    if rollout is not None and args.cache is None:
        raise UsageError("--rollout needs --cache ACTS.h5 (the attention patterns)")
    sources = load_sources(
        args.pred,
        args.probes,
        cache_path=args.cache,
        probe=args.probe,
        score=args.score,
        want_patterns=want_patterns or rollout is not None,
    )
    return rollout, sources


def run(args: argparse.Namespace) -> int:
    rollout, sources = sources_from_args(args, want_patterns=False)
    infoflow, rolled, _ = compare_sources(sources, rollout)
    comparisons = [infoflow] + ([rolled] if rolled is not None else [])
    print(
        f"compared {sources.predicted.shape[1]} test samples, {sources.predicted.shape[0]} layers"
    )
    print_verdicts(comparisons)
    if args.out is not None:
        path = write_comparisons(
            args.out, comparisons, provenance=sources.provenance, overwrite=args.overwrite
        )
        print(f"wrote {path}")
    return 0
