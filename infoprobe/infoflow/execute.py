"""Run a program on real inputs: the predicted information sets of every sample.

Sets are boolean arrays ``[L+1, n, T+1, T+1]`` (layer, sample, token, position), 0-based:
data tokens 0..T-1, CLS = T; layer 0 = the embedding, where I(t, 0) = {t}. Everything is
vectorised over samples and tokens; samples are processed in chunks to bound memory.
"""

import numpy as np
from tqdm.auto import tqdm

from .errors import InfoFlowError, ScoreAccessError
from .program import AggregateAll, AggregatePositions, Program, Retrieve

DEFAULT_CHUNK = 2048


def initial_sets(n: int, T: int) -> np.ndarray:
    """I(t, 0) = {t} for every sample: bool ``[n, T+1, T+1]``."""
    return np.broadcast_to(np.eye(T + 1, dtype=bool), (n, T + 1, T + 1)).copy()


def execute(
    program: Program,
    x: np.ndarray,
    *,
    chunk: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> np.ndarray:
    """Predicted sets of ``program`` on inputs ``x`` float ``[n, T, d]``:
    bool ``[L+1, n, T+1, T+1]``."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise InfoFlowError(f"inputs x must have shape [n, T, d], got {list(x.shape)}")
    n, T, _ = x.shape
    out = np.empty((program.n_layers + 1, n, T + 1, T + 1), dtype=bool)
    starts = range(0, n, max(1, chunk))
    for start in tqdm(starts, desc="predicted sets", disable=not progress, leave=False):
        stop = min(n, start + chunk)
        out[:, start:stop] = execute_chunk(program, x[start:stop].astype(np.float64))
    return out


def execute_chunk(program: Program, x: np.ndarray) -> np.ndarray:
    """:func:`execute` for one chunk (no chunking): ``[c, T, d] -> [L+1, c, T+1, T+1]``."""
    c, T, _ = x.shape
    sets = np.empty((program.n_layers + 1, c, T + 1, T + 1), dtype=bool)
    sets[0] = initial_sets(c, T)
    # chains[i][group]: positions comparison i has gathered, int [c, Q, m]
    chains = {
        i: {
            "data": np.broadcast_to(np.arange(T)[None, :, None], (c, T, 1)),
            "cls": np.zeros((c, 1, 0), dtype=np.int64),
        }
        for i in range(len(program.structure.comparisons))
    }
    rows = np.arange(c)[:, None]
    for layer, heads in enumerate(program.layers, 1):
        prev, new = sets[layer - 1], sets[layer - 1].copy()
        chain_updates = []
        for head in heads:
            for group, queries in (("data", slice(0, T)), ("cls", slice(T, T + 1))):
                op = head.op(group)
                if op is None:
                    continue
                if isinstance(op, AggregateAll):
                    new[:, queries] |= prev.any(axis=1)[:, None, :]
                elif isinstance(op, AggregatePositions):
                    new[:, queries] |= prev[:, list(op.positions)].any(axis=1)[:, None, :]
                else:
                    chosen, grown = retrieve(program, op, group, layer, x, prev, chains)
                    new[:, queries] |= prev[rows, chosen]
                    chain_updates.append((op.comparison, group, grown))
        for i, group, grown in chain_updates:
            chains[i][group] = grown
        sets[layer] = new
    return sets


def retrieve(
    program: Program,
    op: Retrieve,
    group: str,
    layer: int,
    x: np.ndarray,
    prev: np.ndarray,
    chains: dict,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one retrieval stage: (chosen key per query int ``[c, Q]``, the queries' grown
    chains ``[c, Q, m_q + m_k]``). Checks the score reads only inputs in the sets."""
    comparison = program.structure.comparisons[op.comparison]
    stage = comparison.stages[op.stage]
    c, T, _ = x.shape
    q_chain, k_chain = chains[op.comparison][group], chains[op.comparison]["data"]
    where = f"layer {layer}, {comparison.label} stage {op.stage + 1}"
    for side, chain, reads in (
        ("query", q_chain, stage.reads_query),
        ("key", k_chain, stage.reads_key),
    ):
        if reads > chain.shape[2]:
            raise ScoreAccessError(
                f"{where}: the score reads {reads} input(s) of each {side} but its chain holds "
                f"{chain.shape[2]} at this layer (is an earlier stage missing or later?)"
            )
    rows = np.arange(c)[:, None, None]
    q_tokens = np.arange(T)[None, :, None] if group == "data" else np.full((1, 1, 1), T)
    q_pos = q_chain[:, :, : stage.reads_query]
    k_pos = k_chain[:, :, : stage.reads_key]
    if (
        not prev[rows, q_tokens, q_pos].all()
        or not prev[rows, np.arange(T)[None, :, None], k_pos].all()
    ):
        raise ScoreAccessError(
            f"{where}: the score reads an input outside I(query, {layer - 1}) or "
            f"I(key, {layer - 1}); InfoFlow scores may only read inputs in those sets"
        )
    q_in = x[rows, q_pos] if stage.reads_query else None
    scores = stage.score(q_in, x[rows, k_pos])
    n_queries = q_chain.shape[1]
    if scores.ndim != 3 or scores.shape[0] != c or scores.shape[2] != T:
        raise InfoFlowError(
            f"{where}: score must return [n, Q, K] = [{c}, {n_queries}, {T}], "
            f"got {list(scores.shape)}"
        )
    scores = np.broadcast_to(np.asarray(scores, dtype=np.float64), (c, n_queries, T))
    if stage.exclude_self and group == "data":
        scores = scores.copy()
        scores[:, np.arange(T), np.arange(T)] = -np.inf
    if op.rank == 1:
        chosen = np.argmax(scores, axis=2)  # ties: the lowest position
    else:
        chosen = np.argsort(-scores, axis=2, kind="stable")[:, :, op.rank - 1]
    grown = np.concatenate([q_chain, k_chain[np.arange(c)[:, None], chosen]], axis=2)
    return chosen, grown
