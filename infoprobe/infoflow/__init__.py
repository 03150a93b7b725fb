"""The InfoFlow engine: information sets, programs, the cost law and predictions.

from infoprobe.infoflow import predict p = predict(make_task("intrinsic-dim", D=3,
T=64), (3, 3), d_model=48) p.verdict, p.exponent(64), p.min_heads, print(p.describe())
sets = p.sets(x)    # bool [L+1, n, T+1, T+1] (layer, sample, token, position) keys =
retrievals(p.program, x)  # per retrieval op: the key it chooses, int [n, Q]
"""

from .arch import Architecture, as_architecture
from .cost import (
    KTH_LAWS,
    Affine,
    Exponent,
    alpha_text,
    decode_alpha,
    kth_law_rank,
    kth_law_tail,
    rate_comparison,
    separation_length,
)
from .errors import (
    ArchitectureError,
    InfoFlowError,
    ProgramError,
    ScoreAccessError,
    SetsFileError,
)
from .execute import Retrieval, SlotOperation, execute, initial_sets, retrievals, slot_operations
from .grid import GridCell, format_grid, grid_figure, prediction_grid
from .predict import EFFICIENT, INEFFICIENT, Prediction, minimum_heads, predict
from .program import AggregateAll, AggregatePositions, Decode, Head, Program, Retrieve
from .schedule import derive_program
from .store import SetsFile, read_sets, write_sets

__all__ = [
    "EFFICIENT",
    "INEFFICIENT",
    "KTH_LAWS",
    "Affine",
    "AggregateAll",
    "AggregatePositions",
    "Architecture",
    "ArchitectureError",
    "Decode",
    "Exponent",
    "GridCell",
    "Head",
    "InfoFlowError",
    "Prediction",
    "Program",
    "ProgramError",
    "Retrieval",
    "Retrieve",
    "ScoreAccessError",
    "SetsFile",
    "SetsFileError",
    "SlotOperation",
    "alpha_text",
    "as_architecture",
    "decode_alpha",
    "derive_program",
    "execute",
    "format_grid",
    "grid_figure",
    "initial_sets",
    "kth_law_rank",
    "kth_law_tail",
    "minimum_heads",
    "predict",
    "prediction_grid",
    "rate_comparison",
    "read_sets",
    "retrievals",
    "separation_length",
    "slot_operations",
    "write_sets",
]
