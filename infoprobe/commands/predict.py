"""``infoprobe predict``: InfoFlow's verdict, exponent, program and predicted sets."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from infoprobe.base import formats
from infoprobe.base.atomic import atomic_output, check_writable, refuse_existing
from infoprobe.base.errors import UsageError
from infoprobe.commands import summary
from infoprobe.commands.argtypes import figure_file, positive_int, positive_int_list, seed
from infoprobe.commands.modelargs import (
    MODEL_OPTIONS,
    add_model_arguments,
    model_config_from_args,
    parse_heads,
)
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.taskargs import add_task_arguments, task_from_args
from infoprobe.infoflow.cost import KTH_LAWS
from infoprobe.infoflow.errors import InfoFlowError
from infoprobe.tasks import ORIENTATIONS, Task

if TYPE_CHECKING:
    from infoprobe.infoflow import Prediction

DESCRIPTION = """\
Predict, from the InfoFlow theory alone (no training), whether an architecture can
approximate a task efficiently: the cheapest program of max retrievals / aggregations
under the heads of each layer, its cost exponent alpha(T) (parameters ~ eps^-alpha),
the verdict (efficient iff alpha is bounded in T) and the minimum heads per layer.
With --samples/--out it also writes the predicted information sets I(t, l) of N task
samples to HDF5 ([L+1, N, T+1, T+1] bool; 0-based, CLS = T; see docs/infoflow.md)."""

EPILOG = """\
examples:
  infoprobe predict --task intrinsic-dim --D 3 --T 64 --heads 2,3 --E 48
  infoprobe predict --task pairwise-min --T 32 --heads 1 --json
  infoprobe predict --task fixed-positions --heads 1 --E 8 --pos-encoding learned
  infoprobe predict --task intrinsic-dim --D 2 --T 8 --heads 2,2 --samples 1000 --out pred.h5
  infoprobe predict --task intrinsic-dim --D 3 --heads 3,3 --E 48 --grid --grid-T 8,16,32,64
  infoprobe predict --cache runs/x/acts.h5 --out runs/x/pred.h5   # sets of a cache's samples
  infoprobe predict --task intrinsic-dim --D 2 --T 8 --heads 2,2 --orientation mirrored,declared
"""


def _heads_list(text: str) -> list[tuple[int, ...]]:
    """``"1,1;2,2"`` → [(1, 1), (2, 2)]: one or more head vectors, none of them empty."""
    parts = text.split(";")
    if not all(part.strip() for part in parts):
        raise argparse.ArgumentTypeError(
            f"expected head vectors separated by ';' like '1,1;2,2' (none empty), got {text!r}"
        )
    return [parse_heads(part) for part in parts]


def _orientation(text: str) -> str | list[str]:
    """'auto', 'declared', 'mirrored', or a comma list of the last two (one per comparison)."""
    parts = [part.strip() for part in text.split(",")]
    allowed = ("auto", *ORIENTATIONS) if len(parts) == 1 else ORIENTATIONS
    for part in parts:
        if part not in allowed:
            raise argparse.ArgumentTypeError(
                f"expected auto, declared, mirrored or a comma list of declared/mirrored "
                f"(one per comparison), got {text!r}"
            )
    return parts[0] if len(parts) == 1 else parts


CACHE_EXCLUDES = ("task", "samples", "data_seed", "kth_law", "json", "grid", "grid_T",
                  "grid_heads", "plot")  # fmt: skip
"""Options ``--cache`` does not use (it reads the task and architecture from the cache)."""


def _given_without_cache_use(args: argparse.Namespace, parser_defaults: dict) -> list[str]:
    """The options given (set to other than their defaults) that ``--cache`` ignores: the
    task, its parameters, the architecture, the sample and grid options."""
    from infoprobe.commands.taskargs import TASK_SEED, task_parameters

    names = [*CACHE_EXCLUDES, *task_parameters(), TASK_SEED, *MODEL_OPTIONS]
    return [
        "--" + name.replace("_", "-")
        for name in names
        if getattr(args, name, None) != parser_defaults.get(name)
    ]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict",
        help=summary("predict"),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_task_arguments(parser, required=False)
    add_model_arguments(parser)
    g = parser.add_argument_group("prediction")
    g.add_argument(
        "--cache",
        default=None,
        metavar="ACTS.h5",
        help="with --out: predict the sets of exactly the samples of this activation cache "
        "(task and architecture are read from it; what `infoprobe compare` needs)",
    )
    g.add_argument(
        "--kth-law",
        choices=sorted(KTH_LAWS),
        default=None,
        help="k-th retrieval cost law: tail = (T-k-1)/(n+1) (default), rank = (k-1)/n",
    )
    g.add_argument(
        "--orientation",
        type=_orientation,
        default=None,
        metavar="WHICH",
        help="which of two equivalent chains resolves each pairwise comparison: 'declared' "
        "(token t retrieves argmax_s x(t)^T A x(s)), 'mirrored' (argmax_s x(s)^T A x(t): the "
        "same maximum, query and key swapped), one of the two per comparison "
        "('mirrored,declared'), or 'auto' (with --cache: the one the model's heads "
        "implement, read from the cached attention patterns; see docs/infoflow.md). "
        "Default: auto with --cache, declared otherwise",
    )
    g.add_argument("--json", action="store_true", help="print the prediction as JSON")
    g.add_argument(
        "--samples",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --out: number of task samples whose predicted sets are written",
    )
    g.add_argument("--out", default=None, metavar="PRED.h5", help="HDF5 file for the sets")
    g.add_argument(
        "--data-seed",
        type=seed,
        default=None,
        help="samples come from numpy.random.default_rng(DATA_SEED) (default: 0)",
    )
    g.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    grid = parser.add_argument_group("grid", "verdict table over T and heads (--grid)")
    grid.add_argument("--grid", action="store_true", help="print the phase-boundary table")
    grid.add_argument(
        "--grid-T",
        type=positive_int_list,
        default=[8, 16, 32, 64],
        metavar="T1,T2,..",
        help="sequence lengths (default: 8,16,32,64)",
    )
    grid.add_argument(
        "--grid-heads",
        type=_heads_list,
        default=None,
        metavar="H;H;..",
        help="head vectors, e.g. '1,1;2,2;2,3' (default: all up to max+1)",
    )
    grid.add_argument(
        "--plot",
        type=figure_file,
        default=None,
        metavar="GRID.png",
        help="also save the grid as a heat map (the extension names the format)",
    )
    add_runtime_arguments(parser, with_device=False)
    parser.set_defaults(func=run)
    parser.set_defaults(parser_defaults={a.dest: a.default for a in parser._actions})


GRID_FIGURE_FORMAT = "infoprobe.predict-grid-figure"
"""Format marker of a ``--plot`` figure (infoprobe.base.markers.figure_bytes): ``--overwrite``
replaces only a figure carrying it."""


def run(args: argparse.Namespace) -> int:
    from infoprobe.attention.orientation import recorded_orientation
    from infoprobe.infoflow import predict, read_sets, write_sets
    from infoprobe.pipeline.predicting import predict_for_cache

    runtime_from_args(args).apply(torch=False)
    if args.cache is not None:
        if args.out is None:
            raise UsageError("--cache needs --out PRED.h5")
        ignored = _given_without_cache_use(args, args.parser_defaults)
        if ignored:
            raise UsageError(
                f"--cache reads the task, architecture and samples from the cache: drop "
                f"{', '.join(ignored)} (or drop --cache to predict from them)"
            )
        orientation = "auto" if args.orientation is None else args.orientation
        path = predict_for_cache(
            args.cache, args.out, orientation=orientation, overwrite=args.overwrite
        )
        print(f"wrote predicted sets of the samples of {args.cache} to {path}")
        print("orientation:", recorded_orientation(read_sets(path).provenance.get("orientation")))
        return 0
    if args.task is None:
        raise UsageError("give --task NAME (and its parameters), or --cache ACTS.h5 --out PRED.h5")
    if (args.samples is None) != (args.out is None):
        raise UsageError("--samples and --out go together: give both or neither")
    if args.data_seed is not None and args.samples is None:
        raise UsageError("--data-seed seeds the --samples written to --out: give those too")
    if args.plot is not None and not args.grid:
        raise UsageError("--plot saves the --grid table as a heat map: give --grid too")
    if args.grid and args.out is not None:
        raise UsageError("--grid prints a table; --samples/--out write sets: give one of them")
    grid_default = args.parser_defaults["grid_T"]
    if not args.grid and (args.grid_heads is not None or args.grid_T != grid_default):
        raise UsageError("--grid-T and --grid-heads shape the --grid table: give --grid too")
    data_seed = 0 if args.data_seed is None else args.data_seed
    kth_law = "tail" if args.kth_law is None else args.kth_law
    if args.out is not None:  # refuse an output that cannot be written before any work
        out = Path(args.out)
        refuse_existing(out, args.overwrite, "predicted-sets file", kind=formats.PREDICTED_SETS)
        check_writable(out, "predicted-sets file")
    if args.plot is not None:
        refuse_existing(Path(args.plot), args.overwrite, "grid figure", kind=GRID_FIGURE_FORMAT)
        check_writable(Path(args.plot), "grid figure")
    task = task_from_args(args)
    config = model_config_from_args(args, task)
    orientation = "declared" if args.orientation is None else args.orientation
    if orientation == "auto":
        raise UsageError("--orientation auto reads a model's attention: it needs --cache ACTS.h5")
    prediction = predict(task, config, kth_law=kth_law, orientation=orientation)
    if args.grid:
        return _run_grid(args, task, prediction, kth_law)
    print(json.dumps(prediction.to_dict(), indent=2) if args.json else prediction.describe())
    if args.out is not None:
        x, _ = task.sample(args.samples, np.random.default_rng(data_seed))
        provenance = {"data_seed": data_seed, "samples": args.samples,
                      "generator": "numpy.random.default_rng(data_seed)",
                      "orientation": "given: " + ", ".join(prediction.orientation)}  # fmt: skip
        path = write_sets(args.out, prediction, x, provenance,
                          overwrite=args.overwrite, progress=not args.quiet)  # fmt: skip
        if not args.json:
            print(f"wrote predicted sets [L+1, N, T+1, T+1] of {args.samples} samples to {path}")
    return 0


def _run_grid(args: argparse.Namespace, task: Task, prediction: Prediction, kth_law: str) -> int:
    from infoprobe.base.markers import figure_bytes
    from infoprobe.infoflow import as_architecture, format_grid, grid_figure, prediction_grid
    from infoprobe.infoflow.grid import default_heads

    arch = as_architecture(prediction.arch)
    extra = [prediction.min_heads] if prediction.min_heads else []
    heads_list = args.grid_heads or default_heads(arch, extra)
    for heads in heads_list:
        if len(heads) != arch.n_layers:
            raise InfoFlowError(
                f"--grid-heads entry {','.join(map(str, heads))} has {len(heads)} layer(s); "
                f"--heads has {arch.n_layers}"
            )
    cells = prediction_grid(task, arch, args.grid_T, heads_list, kth_law=kth_law)
    if args.json:
        grid = [dataclasses.asdict(cell) for cell in cells]
        print(json.dumps({"prediction": prediction.to_dict(), "grid": grid}, indent=2))
    else:
        print(f"task {task.name} {task.params()} (T varies), E={arch.d_model}, "
              f"positional encoding: {'yes' if arch.positions else 'no'}")  # fmt: skip
        print(format_grid(cells))
    if args.plot:
        fig = grid_figure(cells, title=f"{task.name}: InfoFlow exponent")
        fmt = Path(args.plot).suffix[1:].lower()
        data = figure_bytes(fig, fmt, GRID_FIGURE_FORMAT, dpi=120)
        with atomic_output(
            args.plot, overwrite=args.overwrite, what="grid figure", kind=GRID_FIGURE_FORMAT
        ) as tmp:
            tmp.write_bytes(data)
        print(f"wrote {args.plot}")
    return 0
