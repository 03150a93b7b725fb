"""Reproduce the paper's six claims: sweeps of training runs, InfoFlow's prediction beside
each measurement, figures and a report section.

    from infoprobe.reproduce import CLAIMS, estimate, reproduce

    if __name__ == "__main__":  # worker processes import the calling script
print(estimate("intrinsic-dim", profile="paper").table())  # timed, nothing trained
r = reproduce("intrinsic-dim", profile="quick")  # resumable, run by run
print(r.summary())  # table + checks         small =
CLAIMS["triangle"].profile("quick").override(train={"steps": 50}, points=[0])
reproduce("triangle", profile=small, seeds=1, out="tmp/tri")

Claims (``CLAIMS``): intrinsic-dim, triangle, depth-separation, fixed-positions, argmax-
probe, head-count; each with a ``quick`` (2-core CPU) and a ``paper`` profile.
"""

from infoprobe.reproduce.backends import LocalBackend, RayBackend, make_backend, plan_workers
from infoprobe.reproduce.claims import CLAIMS, get_claim
from infoprobe.reproduce.grid import (
    Check,
    Claim,
    FigureSpec,
    GridPoint,
    Profile,
    ReproduceError,
    RunSpec,
)
from infoprobe.reproduce.pipeline import Reproduction, estimate, reproduce
from infoprobe.reproduce.results import format_summary, gather, load_results, write_results
from infoprobe.reproduce.runs import RunOutcome, RunStore, SweepError, execute_run, run_sweep
from infoprobe.reproduce.timing import SweepEstimate

__all__ = [
    "CLAIMS",
    "Check",
    "Claim",
    "FigureSpec",
    "GridPoint",
    "LocalBackend",
    "Profile",
    "RayBackend",
    "ReproduceError",
    "Reproduction",
    "RunOutcome",
    "RunSpec",
    "RunStore",
    "SweepError",
    "SweepEstimate",
    "estimate",
    "execute_run",
    "format_summary",
    "gather",
    "get_claim",
    "load_results",
    "make_backend",
    "plan_workers",
    "reproduce",
    "run_sweep",
    "write_results",
]
