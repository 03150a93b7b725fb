"""Benchmark: predicted information sets for N = 100,000 samples, T = 64, L = 2.

Vectorised engine (``Prediction.sets``) vs a straightforward per-sample Python
interpreter of the same program (Python sets, one sample and one token at a time),
timed on a subset and extrapolated to N. Both are checked to agree on the subset.
Prints the ratio (medians) last.

    python bench/predict_sets.py [--n 100000] [--subset 200] [--repeats 3]
"""

import argparse
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_info

from infoprobe.infoflow import AggregateAll, AggregatePositions, predict
from infoprobe.tasks import make_task

GATE = 50.0


def per_sample_sets(program, x):
    """The baseline: interpret the program sample by sample, token by token."""
    n, T, _ = x.shape
    out = np.zeros((program.n_layers + 1, n, T + 1, T + 1), dtype=bool)
    comps = program.structure.comparisons
    for i in range(n):
        sample = x[i : i + 1].astype(np.float64)
        sets = [{t} for t in range(T + 1)]
        chains = {c: {"data": [[t] for t in range(T)], "cls": [[]]} for c in range(len(comps))}
        history = [sets]
        for heads in program.layers:
            new = [set(s) for s in sets]
            updates = []
            for head in heads:
                for group, queries in (("data", range(T)), ("cls", [T])):
                    op = head.op(group)
                    if op is None:
                        continue
                    if isinstance(op, AggregateAll):
                        for q in queries:
                            for s in sets:
                                new[q] |= s
                        continue
                    if isinstance(op, AggregatePositions):
                        for q in queries:
                            for p in op.positions:
                                new[q] |= sets[p]
                        continue
                    stage = comps[op.comparison].stages[op.stage]
                    keys = chains[op.comparison]["data"]
                    grown = []
                    for qi, q in enumerate(queries):
                        q_chain = chains[op.comparison][group][qi]
                        scores = []
                        for s in range(T):
                            qx = (
                                sample[:, None, q_chain[: stage.reads_query]]
                                if stage.reads_query
                                else None
                            )
                            kx = sample[:, None, keys[s][: stage.reads_key]]
                            value = float(stage.score(qx, kx)[0, 0, 0])
                            if stage.exclude_self and group == "data" and s == q:
                                value = -np.inf
                            scores.append(value)
                        ranked = sorted(range(T), key=lambda s: (-scores[s], s))
                        chosen = ranked[op.rank - 1]
                        new[q] |= sets[chosen]
                        grown.append(q_chain + keys[chosen])
                    updates.append((op.comparison, group, grown))
            for c, group, grown in updates:
                chains[c][group] = grown
            sets = new
            history.append(sets)
        for layer, layer_sets in enumerate(history):
            for t, members in enumerate(layer_sets):
                out[layer, i, t, sorted(members)] = True
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--subset", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    task = make_task("intrinsic-dim", D=2, T=64, d=4)
    p = predict(task, (2, 2), d_model=32)
    x, _ = task.sample(args.n, np.random.default_rng(0))
    print(f"task {task.to_dict()} heads (2, 2); N={args.n}, T=64, L=2")
    print("thread pools:", [(i["internal_api"], i["num_threads"]) for i in threadpool_info()])

    fast = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        sets = p.sets(x)
        fast.append(time.perf_counter() - start)
    sub = x[: args.subset]
    slow = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        baseline = per_sample_sets(p.program, sub)
        slow.append((time.perf_counter() - start) / args.subset)
    if not np.array_equal(baseline, sets[:, : args.subset]):
        raise SystemExit("per-sample baseline and vectorised sets disagree")
    t_fast, t_slow = statistics.median(fast), statistics.median(slow) * args.n
    print(f"vectorised: {t_fast:.2f} s for {args.n} samples (median of {args.repeats})")
    print(f"per-sample: {statistics.median(slow) * 1e3:.2f} ms/sample on {args.subset} samples "
          f"-> {t_slow:.1f} s extrapolated to {args.n}")  # fmt: skip
    print(f"ratio: {t_slow / t_fast:.1f}x (gate >= {GATE:g}x)")


if __name__ == "__main__":
    main()
