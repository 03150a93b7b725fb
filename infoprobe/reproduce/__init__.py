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

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "LocalBackend": "infoprobe.reproduce.backends",
    "RayBackend": "infoprobe.reproduce.backends",
    "make_backend": "infoprobe.reproduce.backends",
    "plan_workers": "infoprobe.reproduce.backends",
    "CLAIMS": "infoprobe.reproduce.claims",
    "get_claim": "infoprobe.reproduce.claims",
    "Check": "infoprobe.reproduce.grid",
    "Claim": "infoprobe.reproduce.grid",
    "FigureSpec": "infoprobe.reproduce.grid",
    "GridPoint": "infoprobe.reproduce.grid",
    "Profile": "infoprobe.reproduce.grid",
    "ReproduceError": "infoprobe.reproduce.grid",
    "RunSpec": "infoprobe.reproduce.grid",
    "Reproduction": "infoprobe.reproduce.pipeline",
    "estimate": "infoprobe.reproduce.pipeline",
    "reproduce": "infoprobe.reproduce.pipeline",
    "format_summary": "infoprobe.reproduce.results",
    "gather": "infoprobe.reproduce.results",
    "load_results": "infoprobe.reproduce.results",
    "write_results": "infoprobe.reproduce.results",
    "RunOutcome": "infoprobe.reproduce.runs",
    "RunStore": "infoprobe.reproduce.runs",
    "SweepError": "infoprobe.reproduce.runs",
    "execute_run": "infoprobe.reproduce.runs",
    "run_sweep": "infoprobe.reproduce.runs",
    "SweepEstimate": "infoprobe.reproduce.timing",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
