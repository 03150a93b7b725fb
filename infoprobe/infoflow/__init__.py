"""The InfoFlow engine: information sets, programs, the cost law and predictions.

from infoprobe.infoflow import predict p = predict(make_task("intrinsic-dim", D=3,
T=64), (3, 3), d_model=48) p.verdict, p.exponent(64), p.min_heads, print(p.describe())
sets = p.sets(x)    # bool [L+1, n, T+1, T+1] (layer, sample, token, position) keys =
retrievals(p.program, x)  # per retrieval op: the key it chooses, int [n, Q]
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "Architecture": "infoprobe.infoflow.arch",
    "as_architecture": "infoprobe.infoflow.arch",
    "KTH_LAWS": "infoprobe.infoflow.cost",
    "Affine": "infoprobe.infoflow.cost",
    "Exponent": "infoprobe.infoflow.cost",
    "alpha_text": "infoprobe.infoflow.cost",
    "decode_alpha": "infoprobe.infoflow.cost",
    "kth_law_rank": "infoprobe.infoflow.cost",
    "kth_law_tail": "infoprobe.infoflow.cost",
    "rate_comparison": "infoprobe.infoflow.cost",
    "separation_length": "infoprobe.infoflow.cost",
    "ArchitectureError": "infoprobe.infoflow.errors",
    "InfoFlowError": "infoprobe.infoflow.errors",
    "ProgramError": "infoprobe.infoflow.errors",
    "ScoreAccessError": "infoprobe.infoflow.errors",
    "SetsFileError": "infoprobe.infoflow.errors",
    "Retrieval": "infoprobe.infoflow.execute",
    "SlotOperation": "infoprobe.infoflow.execute",
    "execute": "infoprobe.infoflow.execute",
    "initial_sets": "infoprobe.infoflow.execute",
    "retrievals": "infoprobe.infoflow.execute",
    "slot_operations": "infoprobe.infoflow.execute",
    "GridCell": "infoprobe.infoflow.grid",
    "format_grid": "infoprobe.infoflow.grid",
    "grid_figure": "infoprobe.infoflow.grid",
    "prediction_grid": "infoprobe.infoflow.grid",
    "EFFICIENT": "infoprobe.infoflow.predict",
    "INEFFICIENT": "infoprobe.infoflow.predict",
    "Prediction": "infoprobe.infoflow.predict",
    "minimum_heads": "infoprobe.infoflow.predict",
    "predict": "infoprobe.infoflow.predict",
    "AggregateAll": "infoprobe.infoflow.program",
    "AggregatePositions": "infoprobe.infoflow.program",
    "Decode": "infoprobe.infoflow.program",
    "Head": "infoprobe.infoflow.program",
    "Program": "infoprobe.infoflow.program",
    "Retrieve": "infoprobe.infoflow.program",
    "derive_program": "infoprobe.infoflow.schedule",
    "SetsFile": "infoprobe.infoflow.store",
    "read_sets": "infoprobe.infoflow.store",
    "write_sets": "infoprobe.infoflow.store",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
