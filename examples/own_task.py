"""Bring your own task: define a two-hop retrieval, register it, predict, run.

The task: F(X) = x(s*), s* = argmax_{s != t*} <x(t*), x(s)>, t* = argmax_t a^T x(t).
Registered from Python, it exists in this process only, so the command line is called
in-process (``infoprobe.cli.main``); an entry point makes it visible to every process
(docs/tasks.md, "Your own task").

    python examples/own_task.py --out runs/own-task
"""

import argparse
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path

import numpy as np

from infoprobe.cli import main
from infoprobe.infoflow import predict
from infoprobe.tasks import Comparison, ComparisonStructure, Stage, Task, register_task


def partner_score(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """<x(query), x(key)>: q [n, Q, 1, d], k [n, K, 1, d] -> [n, Q, K]."""
    return q[:, :, 0] @ np.swapaxes(k[:, :, 0], 1, 2)


def first_hop_score(q: None, k: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """a^T x(key), the same for every query: k [n, K, 1, d] -> [n, 1, K]."""
    return (k[:, :, 0] @ direction)[:, None, :]


@register_task
@dataclass(frozen=True, kw_only=True)
class TwoHop(Task):
    """Two-hop retrieval: F(X) = x(s*), s* = argmax_{s != t*} <x(t*), x(s)>, t* = argmax_t
    a^T x(t). x(t) ~ N(0, I_d) i.i.d.; a is a random unit vector fixed by ``seed``.
    Vector target (d_out = d). Needs T >= 2."""

    name = "two-hop"
    T: int = 8
    d: int = 2
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T", minimum=2, why="the second hop needs a token besides t*")
        self._require_int("d", minimum=1)

    @property
    def d_out(self) -> int:
        return self.d

    @cached_property
    def direction(self) -> np.ndarray:
        """The vector a: float64 [d], unit norm."""
        a = self._parameter_rng().standard_normal(self.d)
        return a / np.linalg.norm(a)

    def _target(self, x: np.ndarray) -> np.ndarray:
        """float64 [n, T, d] -> [n, d], vectorised over samples."""
        rows = np.arange(x.shape[0])
        first = np.argmax(x @ self.direction, axis=1)  # t*: [n]
        similarity = np.einsum("nd,nsd->ns", x[rows, first], x)  # <x(t*), x(s)>: [n, T]
        similarity[rows, first] = -np.inf
        return x[rows, np.argmax(similarity, axis=1)]

    def structure(self) -> ComparisonStructure:
        """Each token t finds its partner p(t) = argmax_{s != t} <x(t), x(s)>; then CLS
        retrieves t* and, in t*'s state, x(p(t*)) = x(s*)."""
        return ComparisonStructure(
            comparisons=(
                Comparison(
                    label="two-hop",
                    order=2,
                    tuples=self.T * (self.T - 1),
                    description="t* = argmax_t a^T x(t), then argmax_{s != t*} <x(t*), x(s)>",
                    stages=(
                        Stage(
                            group="data",
                            score=partner_score,
                            reads_query=1,
                            reads_key=1,
                            exclude_self=True,
                            description="each token t retrieves p(t) = argmax_{s != t} "
                            "<x(t), x(s)>",
                        ),
                        Stage(
                            group="cls",
                            score=partial(first_hop_score, direction=self.direction),
                            reads_key=1,
                            description="CLS retrieves t* = argmax_t a^T x(t), and with it "
                            "x(p(t*))",
                        ),
                    ),
                ),
            ),
            combine="the second hop's input itself",
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/own-task")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--n", type=int, default=2048, help="samples cached and probed")
    args = parser.parse_args()

    # The engine reads the declared structure: two layers of one head each suffice.
    p = predict(TwoHop(T=8), (1, 1), d_model=16)
    print(f"Python: {p.verdict}, alpha(8) = {p.exponent(8):g}, minimum heads {p.min_heads}")
    # The command line sees the task in this process, with --T and --d as options.
    main(["predict", "--task", "two-hop", "--T", "8", "--heads", "1,1", "--E", "16"])
    main(["predict", "--task", "two-hop", "--T", "8", "--heads", "2", "--E", "16"])
    # The main job: train, cache, probe, flow, predict, compare, report.
    run = ["run", "--task", "two-hop", "--T", "8", "--heads", "1,1", "--E", "16"]
    sizes = ["--steps", str(args.steps), "--n-cache", str(args.n), "--quiet"]
    code = main([*run, *sizes, "--out", args.out])
    report = Path(args.out) / "report" / "report.html"
    print(f"run exit status {code}; report: {report}")
    raise SystemExit(code)
