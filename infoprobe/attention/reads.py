"""What a head reads, from its attention patterns alone (no task, no program).

Patterns are ``blocks.{b}.attn.hook_pattern`` ``[n, h, T+1, T+1]`` (sample, head, query,
key). For each head and query group (the data queries 0..T-1, or the CLS query T) this
module names what the head reads, by fixed rules applied to its observed mode
(:mod:`infoprobe.attention.statistics`):

- a position-specific head: the keys of each query's mean row (the fewest keys holding at
  least ``READ_MASS`` of its mass), named as an offset (token t reads t + o, mod T) when
  every data query reads one key at the same offset, as one key set when every query reads
  the same keys (the CLS row: always), else as the key each query reads;
- a content-dependent retrieval: the data keys its argmax falls on;
- global aggregation and diffuse heads: their mode (no key set names them).

So a model with no task gets its heads described (the offset of a position head, the keys
a CLS row reads, content retrieval), and a head matched to a position-specific
aggregation over P that reads a strict subset of P is named as such.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infoprobe.attention.statistics import POSITIONAL, RETRIEVAL, chunks

READ_MASS = 0.9
"""A query's keys: the fewest keys whose mean attention mass (over samples) adds up to at
least 90% of the row (one-hot rows on key k give {k}; rows split evenly over m keys give
all m). The same 90% as the mode rules' cuts, fixed before any model was read."""
READ_RULE = (
    "a position head's keys: the fewest holding 90% of a query's mean row; "
    "a retrieval's: the fewest holding 90% of its argmaxes"
)


@dataclass(frozen=True)
class Reads:
    """What one head reads at one query group: ``text`` (printed), ``keys`` (the key set
    every query of the group reads, sorted; None if the queries differ or the head has no
    key set) and ``offset`` (o with token t reading (t + o) mod T, in (-T/2, T/2]; None if
    not an offset head)."""

    text: str
    keys: tuple[int, ...] | None = None
    offset: int | None = None

    def subset_of(self, positions: Sequence[int]) -> "Reads":
        """These reads, named as a strict subset of ``positions`` when they are one."""
        if self.keys is None or not set(self.keys) < set(positions):
            return self
        text = f"{self.text}: a strict subset of the program's {key_text(positions)}"
        return Reads(text, self.keys, self.offset)


def key_text(keys: Sequence[int]) -> str:
    """Keys as runs, e.g. [0, 1, 2, 3, 5] → "[0-3, 5]"."""
    runs: list[list[int]] = []
    for k in sorted(keys):
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return (
        "["
        + ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
        + "]"
    )


def mean_rows(pattern: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The mean attention row over samples per head and query: pattern
    ``[n, h, T+1, T+1]``, queries int ``[Q]`` → float64 ``[h, Q, T+1]``."""
    p = np.asarray(pattern)
    q = np.asarray(queries, dtype=np.int64)
    total = np.zeros((p.shape[1], q.size, p.shape[3]))
    for part in chunks(p.shape[0]):
        total += p[part][:, :, q].astype(np.float64).sum(axis=0)
    return total / p.shape[0]


def row_keys(row: np.ndarray) -> tuple[int, ...]:
    """The fewest keys holding at least ``READ_MASS`` of the row ``[K]``'s mass, sorted."""
    order = np.argsort(-row, kind="stable")
    need = READ_MASS * row.sum()
    count = int(np.searchsorted(np.cumsum(row[order]), need - 1e-12)) + 1
    return tuple(sorted(int(k) for k in order[: min(count, row.size)]))


def offset_of(keys: Sequence[tuple[int, ...]], queries: np.ndarray, T: int) -> int | None:
    """o such that every query q reads exactly the data key (q + o) mod T, else None."""
    if any(len(k) != 1 or k[0] >= T for k in keys):
        return None
    offsets = {(k[0] - int(q)) % T for k, q in zip(keys, queries, strict=True)}
    if len(offsets) != 1:
        return None
    o = offsets.pop()
    return o - T if o > T // 2 else o


def _positional(keys: list[tuple[int, ...]], queries: np.ndarray, T: int) -> Reads:
    offset = offset_of(keys, queries, T) if queries.size > 1 else None
    if offset is not None:
        return Reads(f"offset {offset:+d}: token t reads (t{offset:+d}) mod T", None, offset)
    if len(set(keys)) == 1:
        return Reads(f"reads keys {key_text(keys[0])}", keys[0])
    if all(len(k) == 1 for k in keys):
        return Reads(f"a fixed key per query: {[k[0] for k in keys]}")
    return Reads("fixed keys, other per query")


def _retrieval(pattern: np.ndarray, head: int, queries: np.ndarray) -> Reads:
    """A content retrieval: the keys its argmax falls on (the fewest holding 90%)."""
    counts = np.zeros(pattern.shape[3])
    for part in chunks(pattern.shape[0]):
        top = np.asarray(pattern[part][:, head][:, queries]).argmax(axis=-1)
        counts += np.bincount(top.ravel(), minlength=pattern.shape[3])
    return Reads(f"retrieves by content from keys {key_text(row_keys(counts))}")


def head_reads(
    pattern: np.ndarray, queries: np.ndarray, modes: Sequence[str], T: int
) -> tuple[Reads, ...]:
    """What each head of one block reads at ``queries`` (int ``[Q]``), given its observed
    ``modes`` ``[h]``: pattern ``[n, h, T+1, T+1]`` → one :class:`Reads` per head."""
    q = np.asarray(queries, dtype=np.int64)
    rows = mean_rows(pattern, q)
    out = []
    for head, mode in enumerate(modes):
        if mode == POSITIONAL:
            out.append(_positional([row_keys(r) for r in rows[head]], q, T))
        elif mode == RETRIEVAL:
            out.append(_retrieval(pattern, head, q))
        else:
            out.append(Reads(mode))
    return tuple(out)
