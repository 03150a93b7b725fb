"""``infoprobe cache``: capture a checkpoint's activations at every layer into HDF5.

Two forms: ``infoprobe cache CHECKPOINT --out FILE ...`` writes (or resumes) a cache; the
subcommand ``infoprobe cache info FILE`` prints a cache's contents and provenance.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from infoprobe.base.errors import UsageError
from infoprobe.commands import summary
from infoprobe.commands.argtypes import add_trust_argument
from infoprobe.commands.runtimeargs import add_runtime_arguments, runtime_from_args
from infoprobe.commands.settingsargs import add_settings_arguments, settings_from_args
from infoprobe.hooks.schema import DatasetPlan
from infoprobe.pipeline.cache_settings import DATA_SEED_OFFSET, CacheSettings

if TYPE_CHECKING:
    from infoprobe.hooks import CacheFile

DESCRIPTION = """Run a checkpoint on N fresh samples of its own task and store the inputs, the
targets and the activations of the chosen hook sites in one HDF5 file (format:
docs/cache-format.md). Batches are written as they are computed, so memory stays
bounded; the file's n_committed cursor advances after each batch is on disk. Re-running
the same command on the same --out resumes an interrupted run exactly where it stopped;
a run with another checkpoint, data spec, site set or dtype refuses to touch the file
unless --overwrite.

The subcommand `infoprobe cache info FILE` inspects a cache (`infoprobe cache info
--help`); a checkpoint folder named `info` is given as ./info."""

EXAMPLES = f"""sites (comma-separated, combined as a union):
  residual    blocks.0.hook_resid_pre + resid_mid and resid_post of every block
  attention   attn.hook_pattern, attn.hook_z and hook_attn_out of every block
  layers      the L+1 layer sites (layer 0 = blocks.0.hook_resid_pre, layer k =
              blocks.{{k-1}}.hook_resid_post)
  all         every hook point of the model
  NAME        a TransformerLens hook name, e.g. blocks.1.attn.hook_pattern
  re:REGEX    every hook whose name matches, e.g. 're:hook_resid_(pre|post)$'

examples:
  infoprobe cache runs/id-2-2 --n 20000 --sites residual,attention --cache-batch 512 \\
      --out runs/id-2-2/acts.h5
  infoprobe cache runs/id-2-2 --n 20000 --sites layers --dtype float16 --out acts16.h5
  infoprobe cache runs/id-2-2 --n 20000 --sites residual,attention --random-init 1 \\
      --out runs/id-2-2/acts-random.h5        # control: same samples, untrained weights
  infoprobe cache info runs/id-2-2/acts.h5

The samples are batch b = task.sample(size_b, default_rng([data_seed, b])); the default
data seed is the training seed + {DATA_SEED_OFFSET}, apart from the training streams.
With --inputs X.npy (and --targets Y.npy) they are the file's rows instead; its SHA-256
is in the cache's data spec, so a resume with another file is refused.
Read a cache in Python with infoprobe.hooks.open_cache(path)."""

INFO_DESCRIPTION = """Print what an activation cache holds, without loading its arrays: its
status (complete, or how many samples an interrupted run committed), the header (schema,
infoprobe version, creation time), the checkpoint hash, model config and data spec it
was made from, the hook sites in forward order, and every dataset with its shape,
dtype, size, chunks and axis names. An unfinished cache is reported, not refused."""

INFO_EXAMPLES = """examples:
  infoprobe cache info runs/id-2-2/acts.h5
  infoprobe cache info acts.h5 | grep blocks.1     # one block's datasets

Read the same in Python with infoprobe.hooks.open_cache(path, allow_incomplete=True);
`h5dump -H FILE` shows the raw HDF5 layout (docs/cache-format.md)."""

SUBCOMMANDS = ("info",)
"""Words that select a subcommand of `infoprobe cache`; any other first argument is the
CHECKPOINT of the write form."""


def _add_write_options(p: argparse.ArgumentParser) -> None:
    """The options of the write form (``infoprobe cache CHECKPOINT --out FILE ...``)."""
    p.add_argument("--out", metavar="FILE", help="HDF5 file to write or resume (required)")
    add_settings_arguments(p, CacheSettings)
    add_runtime_arguments(p)
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out instead of resuming it"
    )
    p.add_argument(
        "--durable",
        action="store_true",
        help="fsync every batch before advancing the cursor, so committed samples "
        "also survive a power loss (slower; a killed process never needs it)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_trust_argument(p)
    add_inputs_arguments(p, "--n")


def add_inputs_arguments(p: argparse.ArgumentParser, n_option: str) -> None:
    """``--inputs X`` and ``--targets Y``: the user's own samples instead of a task's
    (``n_option``: the option giving how many rows are cached)."""
    p.add_argument(
        "--inputs",
        metavar="X",
        default=None,
        help="cache these inputs instead of the task's samples: x float32 [n, T, d] as .npy, "
        f"or the dataset/tensor 'x' of an .h5 or .safetensors file (the first min({n_option}, "
        "n) rows); needed for a checkpoint saved without a task",
    )
    p.add_argument(
        "--targets",
        metavar="Y",
        default=None,
        help="targets of --inputs: y [n] or [n, d_out] (.npy, or 'y' in .h5/.safetensors); "
        "without it /targets/y holds NaN",
    )


class _CheckpointOrSubcommand(argparse._SubParsersAction):
    """The first positional of `infoprobe cache`: a subcommand word (``info``) hands the
    rest to that subcommand's parser; anything else is the CHECKPOINT of the write form,
    and the rest is parsed as write options (so options may come before or after it)."""

    def __init__(self, *args, options: argparse.ArgumentParser | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.options = options
        self.choices = None  # any word is accepted: an unknown one is the CHECKPOINT

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values[0] in self._name_parser_map:
            super().__call__(parser, namespace, values, option_string)
            return
        if any(v in ("-h", "--help") for v in values[1:]):
            parser.print_help()
            parser.exit()
        namespace.checkpoint = values[0]
        _, extras = self.options.parse_known_args(values[1:], namespace)
        if extras:
            parser.error(
                f"unrecognized arguments: {' '.join(extras)} (the write form takes one "
                "CHECKPOINT; to inspect a cache use `infoprobe cache info FILE`)"
            )


def usage(prog: str) -> str:
    """The usage of both forms, the write form's from its own options (so none is left out)."""
    form = argparse.ArgumentParser(prog=prog)
    form.add_argument("checkpoint", metavar="CHECKPOINT")
    _add_write_options(form)
    write = form.format_usage().removeprefix("usage: ").rstrip()
    return f"{write}\n       {prog} info FILE"


def register(subparsers: argparse._SubParsersAction) -> None:
    prog = f"{subparsers._prog_prefix} cache"
    p = subparsers.add_parser(
        "cache",
        help=summary("cache"),
        usage=usage(prog),
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_write_options(p)
    options = type(p)(prog=p.prog, usage=p.usage, add_help=False)
    _add_write_options(options)
    forms = p.add_subparsers(
        action=_CheckpointOrSubcommand,
        options=options,
        dest="cache_command",
        metavar="CHECKPOINT | info",
        required=True,
        title="positional arguments",
        help="the checkpoint folder to cache, or the subcommand:",
    )
    info = forms.add_parser(
        "info",
        prog=f"{p.prog} info",
        help="print a cache's status, provenance, sites and datasets",
        usage="infoprobe cache info FILE",
        description=INFO_DESCRIPTION,
        epilog=INFO_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("file", metavar="FILE", help="activation cache (.h5) to inspect")
    info.set_defaults(func=run_info_command)
    p.set_defaults(func=run)


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape))


def dataset_table(datasets: list[DatasetPlan], with_layout: bool = False) -> str:
    """A text table of datasets: HDF5 path, shape, dtype, MB (+ chunks and axes)."""
    width = max(len(d.path) for d in datasets) + 2
    head = f"  {'dataset':<{width}}{'shape':<18}{'dtype':<9}{'MB':>9}"
    lines = [head + ("  chunks        axes" if with_layout else "")]
    for d in datasets:
        line = f"  {d.path:<{width}}{_shape(d.shape):<18}{d.dtype:<9}{d.nbytes / 1e6:>9.1f}"
        if with_layout:
            line += f"  {_shape(d.chunks):<14}{','.join(d.axes)}"
        lines.append(line)
    total = sum(d.nbytes for d in datasets) / 1e6
    lines.append(f"  {'total':<{width}}{'':<18}{'':<9}{total:>9.1f}")
    return "\n".join(lines)


def _file_datasets(cache: CacheFile) -> list[DatasetPlan]:
    return [
        DatasetPlan(
            path,
            ds.shape,
            str(ds.dtype),
            ds.chunks or ds.shape,
            tuple(str(a) for a in ds.attrs.get("axes", ())),
        )
        for path, ds in cache.datasets()
    ]


def run_info(path: str) -> int:
    from infoprobe.hooks import open_cache

    with open_cache(path, allow_incomplete=True) as cache:
        h = cache.header
        print(
            f"{path}: infoprobe activation cache, schema {h['schema_version']}, written by "
            f"infoprobe {h['infoprobe_version']} on {h['created']}"
        )
        if cache.complete:
            print(f"status: complete, {cache.n} samples")
        else:
            print(
                f"status: INCOMPLETE, {cache.n} of {cache.n_total} samples committed; "
                "re-run the same `infoprobe cache` command to resume"
            )
        print(
            f"activations: {cache.dtype}, {len(cache.hook_names)} sites, batch size "
            f"{h['batch_size']}, {cache.n_blocks} blocks"
        )
        print(f"checkpoint sha256: {cache.checkpoint_sha256 or '(none)'}")
        extra = {
            k: v
            for k, v in cache.provenance.items()
            if k not in ("checkpoint_sha256", "model_config", "data_spec")
        }
        for key, value in extra.items():
            print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
        print(f"model config: {json.dumps(cache.model_config, sort_keys=True)}")
        print(f"data spec: {json.dumps(cache.spec, sort_keys=True)}")
        print("hook sites (in forward order):")
        for name in cache.hook_names:
            print(f"  {name}")
        print(dataset_table(_file_datasets(cache), with_layout=True))
    return 0


def _announce_existing(out: str, overwrite: bool) -> None:
    from infoprobe.hooks import CacheError, read_header

    if overwrite:
        return
    try:
        header = read_header(out, allow_incomplete=True)
    except CacheError:
        return  # absent or unusable: write_cache reports it
    if header["n_committed"] >= header["n"]:
        print(f"{out} is already complete; checking it matches this run")
    else:
        print(f"resuming {out} at sample {header['n_committed']} of {header['n']}")


def run_info_command(args: argparse.Namespace) -> int:
    """`infoprobe cache info FILE`."""
    return run_info(args.file)


def run(args: argparse.Namespace) -> int:
    """`infoprobe cache CHECKPOINT --out FILE ...`: write or resume a cache."""
    if not args.out:
        raise UsageError("--out FILE is required to write a cache")
    from infoprobe.pipeline.caching import checkpoint_cache_job

    runtime_from_args(args).apply()
    settings = settings_from_args(CacheSettings, args)
    if args.targets is not None and args.inputs is None:
        raise UsageError("--targets needs --inputs (the targets of those inputs)")
    job = checkpoint_cache_job(
        args.checkpoint,
        trust_code=args.trust_code,
        inputs=args.inputs,
        targets=args.targets,
        **settings.job_options(),
    )
    plan, spec = job.plan, job.provenance["data_spec"]
    weights = (
        "trained weights"
        if settings.random_init_seed is None
        else f"random-init control (seed {settings.random_init_seed})"
    )
    source = (
        f"task {spec['task']['name']}, data seed {spec['data_seed']}"
        if spec.get("inputs") is None
        else f"inputs {spec['inputs']['file']} (SHA-256 {spec['inputs']['sha256'][:12]}…)"
    )
    print(f"checkpoint {args.checkpoint} ({weights}), {source}")
    print(
        f"estimated size: {plan.nbytes / 1e6:.1f} MB for {plan.n} samples × "
        f"{len(plan.hook_names)} sites ({plan.dtype}) → {args.out}"
    )
    _announce_existing(args.out, args.overwrite)
    summary = job.run(
        args.out, overwrite=args.overwrite, progress=not args.quiet, durable=args.durable
    )
    rate = summary.n_written / summary.seconds if summary.seconds > 0 else float("inf")
    print(
        f"wrote {summary.n_written} samples (resumed at {summary.resumed_from}) in "
        f"{summary.seconds:.1f} s ({rate:,.0f} samples/s) → {summary.path}"
    )
    print(dataset_table(list(plan.datasets)))
    return 0
