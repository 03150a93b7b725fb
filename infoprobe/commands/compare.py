"""``infoprobe compare``: predicted vs observed information sets, per layer, in numbers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from infoprobe.attention.rollout import HEAD_FUSIONS, RolloutConfig
from infoprobe.base.errors import UsageError
from infoprobe.base.fdr import FDR_Q as NULL_Q
from infoprobe.commands import summary
from infoprobe.commands.argtypes import positive_float, unit_float
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.pipeline.probe_settings import PROBES

if TYPE_CHECKING:
    from infoprobe.compare.sources import Compared, Sources

DESCRIPTION = """\
Compare InfoFlow's predicted information sets I_pred(t, l) with the sets two instruments
observe, on the same samples:

  flow          (--influence FILE, from `infoprobe influence`): does token t's state move
                when x(s) moves? Local sensitivity, or resample ablation; a file made
                with --random-init is shown as that instrument's control.
  decodability  (PROBES.h5, from `infoprobe probe`): can a probe recover x(s) from the
                state? Scored per sample against that sample's own baseline.

Per layer and instrument: the threshold-free AUROC of the instrument's score against
predicted membership (the headline), recall (predicted positions observed), violations
(observed where InfoFlow says they cannot be) and omissions (predicted, not observed)
reported apart, precision and Jaccard. Each token's own position is always predicted and
is reported apart. With both instruments, every (sample, token, position) is counted by
what the two saw: flowing but not decodable is compression; decodable without flow
should be near zero.

The files must come from the same task, data seed, samples and model: mismatched
provenance is refused. With --cache the inputs are compared exactly, --rollout adds
attention rollout (Abnar & Zuidema 2020) as a second predictor, and each head's observed
mode is read from the attention patterns beside InfoFlow's program. Observed is not
used: see docs/report.md."""

EPILOG = """\
examples:
  infoprobe compare pred.h5 probes.h5 --influence flow.h5
  infoprobe compare pred.h5 --influence flow.h5 --influence flow-random-init.h5
  infoprobe compare pred.h5 probes.h5 --influence flow.h5 --cache acts.h5 --rollout \\
      --out comparison.json
  infoprobe compare pred.h5 probes.h5 --cache acts.h5 --rollout --head-fusion max \\
      --rollout-weight 0.7 --rollout-threshold 0.5
"""


def open_unit_float(text: str) -> float:
    """A number strictly between 0 and 1 (a false discovery rate)."""
    value = unit_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Input files, probe choice and rollout options (shared with ``infoprobe report``)."""
    parser.add_argument("pred", metavar="PRED.h5", help="predicted sets (infoprobe predict --out)")
    parser.add_argument(
        "probes",
        metavar="PROBES.h5",
        nargs="?",
        default=None,
        help="probe results (infoprobe probe): the decodability instrument",
    )
    parser.add_argument(
        "--beside",
        metavar="PROBES.h5",
        action="append",
        default=[],
        help="probe results of another family from the same cache, compared beside the "
        "main ones as 'decodability (FAMILY probe)' (e.g. the linear probe beside the "
        "critic); repeatable",
    )
    parser.add_argument(
        "--influence",
        metavar="FLOW.h5",
        action="append",
        default=[],
        help="influence file (infoprobe influence): the flow instrument; repeat for its "
        "random-init control or for resample ablation",
    )
    parser.add_argument(
        "--cache",
        metavar="ACTS.h5",
        default=None,
        help="activation cache the instruments were computed on: exact input check, "
        "attention patterns for --rollout, the head table and the per-sample view",
    )
    parser.add_argument(
        "--probe",
        choices=PROBES,
        default=None,
        help="whose scores to compare (default: the probe the results were run with)",
    )
    parser.add_argument(
        "--score",
        choices=("r2", "selectivity"),
        default="r2",
        help="continuous aggregate score: test R² or R² minus the largest control (default r2)",
    )
    parser.add_argument(
        "--null-q",
        type=open_unit_float,
        default=NULL_Q,
        metavar="Q",
        help="null rule beside the fixed thresholds: cells whose scores beat the null "
        "(flow: its random-init control; decodability: the own-sample mean predictor), "
        f"Benjamini–Hochberg at false discovery rate Q over the grid (default {NULL_Q}; "
        "docs/report.md)",
    )
    rollout = parser.add_argument_group("attention rollout (second predictor)")
    rollout.add_argument(
        "--rollout", action="store_true", help="also compare attention rollout (needs --cache)"
    )
    rollout.add_argument(
        "--rollout-weight",
        type=unit_float,
        default=0.5,
        metavar="A",
        help="A' = A·attention + (1-A)·identity (default 0.5, as in the paper)",
    )
    rollout.add_argument(
        "--head-fusion", choices=HEAD_FUSIONS, default="mean", help="fuse heads (default mean)"
    )
    rollout.add_argument(
        "--rollout-threshold",
        type=positive_float,
        default=0.25,
        metavar="R",
        help="s is in the set when its rollout weight is >= R/(T+1); 0 < R <= T+1, as the "
        "weights of a row sum to 1 (default 0.25)",
    )


def rollout_config_from_args(args: argparse.Namespace) -> RolloutConfig | None:
    """The rollout parameters, or None without --rollout."""
    if not args.rollout:
        return None
    return RolloutConfig(args.rollout_weight, args.head_fusion, args.rollout_threshold)


def print_comparison(compared: Compared) -> None:
    """The headline per layer, each comparison's verdicts, then the caveat."""
    from infoprobe.compare.scopes import CAVEAT

    print("headline (own positions left out):")
    for line in compared.headline():
        print(f"  {line}")
    from infoprobe.compare.predictors import display_name

    for instrument, by_predictor in compared.comparisons.items():
        for name, comparison in by_predictor.items():
            print(f"{display_name(name)} vs {instrument}:")
            for verdict in comparison.verdicts:
                print(f"  {verdict}")
    if compared.heads is not None:
        print("observed program:")
        for line in compared.heads.lines():
            print(f"  {line}")
    print(f"caveat: {CAVEAT}")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help=summary("compare"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(parser)
    add_runtime_arguments(parser, with_device=False)
    parser.add_argument(
        "--out", metavar="COMPARISON.json", default=None, help="write every number as JSON"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.set_defaults(func=run)


def sources_from_args(
    args: argparse.Namespace, *, want_patterns: bool
) -> tuple[RolloutConfig | None, Sources]:
    """(rollout config or None, loaded :class:`Sources`) from the shared source options."""
    from infoprobe.compare.sources import load_sources

    rollout = rollout_config_from_args(args)
    if rollout is not None and args.cache is None:
        raise UsageError("--rollout needs --cache ACTS.h5 (the attention patterns)")
    if args.probes is None and not args.influence:
        raise UsageError("nothing to compare: give PROBES.h5 and/or --influence FLOW.h5")
    sources = load_sources(
        args.pred,
        args.probes,
        influence_paths=args.influence,
        cache_path=args.cache,
        probe=args.probe,
        score=args.score,
        want_patterns=want_patterns or rollout is not None,
        beside=args.beside,
    )
    return rollout, sources


def run(args: argparse.Namespace) -> int:
    from infoprobe.compare.files import write_comparisons
    from infoprobe.compare.fit_flags import flag_lines, flagged_fits
    from infoprobe.compare.sources import compare_sources

    runtime_from_args(args).apply()
    rollout, sources = sources_from_args(args, want_patterns=args.cache is not None)
    compared = compare_sources(sources, rollout, null_q=args.null_q)
    print(
        f"compared {sources.predicted.shape[1]} samples, {sources.predicted.shape[0]} layers, "
        f"instruments: {', '.join(sources.instruments)}"
    )
    for note in sources.notes:
        print(f"note: {note}")
    print_comparison(compared)
    flags = flagged_fits(sources.predicted, sources.instruments)
    for line in flag_lines(flags):
        print(line)
    if args.out is not None:
        path = write_comparisons(
            args.out,
            compared.comparisons,
            extra={**compared.extra(), "flagged_fits": flags},
            provenance=sources.provenance,
            overwrite=args.overwrite,
        )
        print(f"wrote {path}")
    return 0
