"""Run a program on real inputs: the predicted information sets of every sample.

Sets are boolean arrays ``[L+1, n, T+1, T+1]`` (layer, sample, token, position), 0-based:
data tokens 0..T-1, CLS = T; layer 0 = the embedding, where I(t, 0) = {t}. Everything is
vectorised over samples and tokens; samples are processed in chunks to bound memory.

:func:`retrievals` runs the same code (:func:`run_chunk`) and returns, for every retrieval
operation, the key it chooses per sample and query; :func:`slot_operations` lists every
operation of a program (retrievals and aggregations) with its layer, slot and group.
"""

from dataclasses import dataclass

import numpy as np

from .errors import InfoFlowError, ScoreAccessError
from .program import AggregateAll, AggregatePositions, Operation, Program, Retrieve, op_kind

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
    from tqdm.auto import tqdm  # imported when used: the engine needs no progress bars

    for start in tqdm(starts, desc="predicted sets", disable=not progress, leave=False):
        stop = min(n, start + chunk)
        out[:, start:stop] = execute_chunk(program, x[start:stop].astype(np.float64))
    return out


def execute_chunk(program: Program, x: np.ndarray) -> np.ndarray:
    """:func:`execute` for one chunk (no chunking): ``[c, T, d] -> [L+1, c, T+1, T+1]``."""
    sets, _ = run_chunk(program, x)
    return sets


def run_chunk(
    program: Program, x: np.ndarray
) -> tuple[np.ndarray, dict[tuple[int, int, str], np.ndarray]]:
    """Run ``program`` on one chunk ``x`` float ``[c, T, d]``: the sets
    ``[L+1, c, T+1, T+1]`` and, for every retrieval operation, the key it chooses per
    sample and query, keyed by (layer, slot, group): int ``[c, Q]`` (Q = T for ``"data"``,
    1 for ``"cls"``). The one code path behind :func:`execute` and :func:`retrievals`."""
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
    keys: dict[tuple[int, int, str], np.ndarray] = {}
    rows = np.arange(c)[:, None]
    for layer, heads in enumerate(program.layers, 1):
        prev, new = sets[layer - 1], sets[layer - 1].copy()
        chain_updates = []
        for slot, head in enumerate(heads):
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
                    keys[layer, slot, group] = chosen
        for i, group, grown in chain_updates:
            chains[i][group] = grown
        sets[layer] = new
    return sets, keys


@dataclass(frozen=True)
class SlotOperation:
    """One operation of a program: what head slot ``slot`` (0-based index into
    ``program.layers[layer - 1]``) of layer ``layer`` (1-based; block ``layer - 1``) does
    for the ``group`` queries (``"data"``: tokens 0..T-1, ``"cls"``: token T).

    ``kind`` is ``op_kind(op)`` ("max retrieval", "k-th retrieval (k=2)", "global
    aggregation", "position-specific aggregation"); ``positions`` the fixed set P of a
    position-specific aggregation (None otherwise: a global aggregation reads every
    token); ``comparison``, ``label``, ``stage``, ``rank`` are set for retrievals only
    (``stage`` 0-based); ``description`` is ``program.describe_op(op)``.
    """

    layer: int
    slot: int
    group: str
    op: Operation
    kind: str
    description: str
    positions: tuple[int, ...] | None = None
    comparison: int | None = None
    label: str | None = None
    stage: int | None = None
    rank: int | None = None

    @property
    def block(self) -> int:
        return self.layer - 1

    @property
    def is_retrieval(self) -> bool:
        return isinstance(self.op, Retrieve)


@dataclass(frozen=True, eq=False)
class Retrieval:
    """A retrieval operation of a program and the key it retrieves in every sample.

    ``layer`` 1-based (block ``layer - 1``), ``slot`` 0-based index into
    ``program.layers[layer - 1]``, ``group`` ``"data"`` or ``"cls"``; ``comparison``
    (index into the task's structure) and its ``label``; ``stage`` 0-based; ``rank``
    (1: max retrieval); ``description`` = ``program.describe_op``. ``queries`` int ``[Q]``
    are the query tokens (0..T-1 for ``"data"``, [T] for ``"cls"``) and ``chosen`` int
    ``[n, Q]`` the key position (0..T-1) query ``queries[q]`` retrieves in sample i.
    """

    layer: int
    slot: int
    group: str
    comparison: int
    label: str
    stage: int
    rank: int
    description: str
    queries: np.ndarray
    chosen: np.ndarray

    @property
    def block(self) -> int:
        return self.layer - 1

    @property
    def op(self) -> Retrieve:
        return Retrieve(self.comparison, self.stage, self.rank)


def retrievals(
    program: Program,
    x: np.ndarray,
    *,
    chunk: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> list[Retrieval]:
    """The key every retrieval operation of ``program`` chooses on inputs ``x`` float
    ``[n, T, d]``, per sample and query, in :func:`slot_operations` order. Runs the same
    code as :func:`execute` (chunked over samples, float64, ties to the lowest position)."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise InfoFlowError(f"inputs x must have shape [n, T, d], got {list(x.shape)}")
    n, T, _ = x.shape
    ops = [o for o in slot_operations(program) if o.is_retrieval]
    parts: dict[tuple[int, int, str], list[np.ndarray]] = {
        (o.layer, o.slot, o.group): [] for o in ops
    }
    step = max(1, chunk)
    from tqdm.auto import tqdm

    for start in tqdm(range(0, n, step), desc="retrieved keys", disable=not progress, leave=False):
        stop = min(n, start + step)
        _, keys = run_chunk(program, x[start:stop].astype(np.float64))
        for key, chosen in keys.items():
            parts[key].append(chosen)
    out = []
    for o in ops:
        Q = T if o.group == "data" else 1
        got = parts[o.layer, o.slot, o.group]
        chosen = np.concatenate(got) if got else np.zeros((0, Q), dtype=np.int64)
        queries = np.arange(T) if o.group == "data" else np.array([T])
        out.append(
            Retrieval(
                layer=o.layer,
                slot=o.slot,
                group=o.group,
                comparison=o.comparison,
                label=o.label,
                stage=o.stage,
                rank=o.rank,
                description=o.description,
                queries=queries,
                chosen=chosen.astype(np.int64, copy=False),
            )
        )
    return out


def slot_operations(program: Program) -> list[SlotOperation]:
    """Every non-idle operation of ``program``, layer by layer, slot by slot, data before
    CLS (the order :func:`retrievals` uses)."""
    out = []
    structure = program.structure
    for layer, heads in enumerate(program.layers, 1):
        for slot, head in enumerate(heads):
            for group in ("data", "cls"):
                op = head.op(group)
                if op is None:
                    continue
                common = dict(
                    layer=layer,
                    slot=slot,
                    group=group,
                    op=op,
                    kind=op_kind(op),
                    description=program.describe_op(op),
                )
                if isinstance(op, AggregatePositions):
                    out.append(SlotOperation(**common, positions=tuple(op.positions)))
                elif isinstance(op, Retrieve):
                    out.append(
                        SlotOperation(
                            **common,
                            comparison=op.comparison,
                            label=structure.comparisons[op.comparison].label,
                            stage=op.stage,
                            rank=op.rank,
                        )
                    )
                else:
                    out.append(SlotOperation(**common))
    return out


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
