"""The subcommands of ``infoprobe``, one module each, in the order users meet them (the
pipeline's order). :data:`COMMANDS` is their index: the module that registers each and the
one-line summary both ``infoprobe --help`` and the module's own parser show, so the top-level
help and ``--version`` need no command module, and ``infoprobe CMD`` imports only CMD's.
"""

from typing import NamedTuple


class Command(NamedTuple):
    module: str
    """The module of ``infoprobe.commands`` whose ``register(subparsers)`` adds it."""
    summary: str
    """Its one-line help."""


COMMANDS = {
    "demo": Command("demo", "the curated small run: (2,2) vs (1,2) heads"),
    "run": Command("run", "train, cache, probe, predict, compare and report in one folder"),
    "probe-checkpoint": Command(
        "probe_checkpoint", "cache, probe, predict, compare and report an existing checkpoint"
    ),
    "train": Command("train", "train a model on a task and write a checkpoint"),
    "predict": Command(
        "predict",
        "InfoFlow verdict, exponent, program and predicted sets for a task + architecture",
    ),
    "sets": Command("sets", "your own per-sample sets, to compare with instead of InfoFlow's"),
    "cache": Command("cache", "capture activations at every layer into a resumable HDF5 cache"),
    "probe": Command("probe", "probe which input positions each token's state encodes, per layer"),
    "influence": Command(
        "influence", "measure flow: does h(t, l) move when x(s) moves (sensitivity, resampling)"
    ),
    "compare": Command(
        "compare", "compare predicted and observed information sets (violations, omissions, AUROC)"
    ),
    "report": Command("report", "write summary.json, PNG figures and a self-contained report.html"),
    "spread": Command(
        "spread", "one comparison over several training seeds: each run's AUROC and the spread"
    ),
    "reproduce": Command(
        "reproduce", "re-run one of the paper's claims (sweeps, InfoFlow beside the measurement)"
    ),
    "rates": Command(
        "rates", "fit cost-law exponents (log NMSE against log parameters) beside alpha"
    ),
}


def summary(name: str) -> str:
    """The one-line help of command ``name``."""
    return COMMANDS[name].summary
