"""Benchmark: training throughput (model-steps per second) of the trainer's configurations
against the reference trainer: 8 runs of the local backend, eager, one run per worker and
one worker per core, with every position computed in every block (the full forward, which
any hook on the last block gets, and the only forward before the last block was trimmed
to the CLS token).

Workload: the intrinsic-dim quick profile's (2,2) model (D=2, T=16, E=32, FFN 128, batch
256 of fresh samples), 8 runs. Each configuration is measured with its workers running at
the same time, as the local backend runs them: every worker times ``--steps`` training
steps (median, after warm-up; the compilation, if any, is timed apart) and the
configuration's throughput is the sum over workers of members / median step time.
Configurations are measured in interleaved rounds (``--rounds``); medians are reported.

    configuration            workers x threads   members per worker   compiled   last block
    full eager (baseline)    cores x 1           1                    no         every position
    eager (the default)      cores x 1           1                    no         CLS only
    compiled                 cores x 1           1                    yes        CLS only
    ensemble                 cores x 1           8 / cores            no         CLS only
    ensemble compiled        cores x 1           8 / cores            yes        CLS only
    ensemble x8 compiled     1 x cores           8                    yes        CLS only

The table also gives the throughput over a 10k-step run with the compilation counted.
Then the eager ensemble's step is taken apart on one thread, in CPU time (which a busy
machine inflates less than wall time): batch drawing, forward, backward, clipping and
AdamW, and the validation passes spread over the steps; the forward and backward are
profiled once (``torch.profiler``) to give the matrix products' share. The matmul peak
is a large float32 matrix product on all cores, measured before and after the rounds
(the median); a model-step's FLOPs are the matrix products it computes (forward, and
twice that for the backward). The last line is the ratio of the fastest configuration's
throughput to the baseline's, measured in the same run (gate: >= 1.5, goal 3), with its
ratio to the eager default, its model-steps per second and the fraction of the matmul
peak they reach. With ``--device cuda`` (when a GPU is present) the same table is
measured on the GPU with one worker (runs share the device).

    python bench/train_ensemble.py [--steps 30] [--rounds 3] [--device cpu] [--T 16]

``--T 64`` times the same model and recipe at the paper's headline length (the last line
then starts with ``T=64``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.reproduce.claims import CLAIMS
from infoprobe.reproduce.claims.intrinsic_dim import intrinsic_dim_points
from infoprobe.reproduce.grid import RunSpec
from infoprobe.reproduce.runs import torch_threads
from infoprobe.reproduce.timing import time_ensemble, time_point
from infoprobe.train.ensemble import Ensemble, clip_rows
from infoprobe.train.loop import evaluate

RUNS = 8
RUN_STEPS = 10_000


def point(T: int = 16):
    """The quick profile's (2,2) D=2 grid point, at sequence length ``T`` (16: as it is;
    else the same model, recipe and task at that T)."""
    points = CLAIMS["intrinsic-dim"].profile("quick").points
    quick = next(p for p in points if p.label == "(2,2) D=2")
    if T == quick.build_task().T:
        return quick
    (row,) = intrinsic_dim_points([(2, quick.model_config().d_model, quick.train)], T=T,
                                  init_gain={2: quick.model_config().init_gain})[:1]  # fmt: skip
    return row


def step_flops(cfg: ModelConfig, batch: int, trim: bool = True) -> float:
    """FLOPs of the matrix products of one training step of one model: the forward's
    (2 per multiply-add) and twice as many for the backward (input and weight gradients).
    ``trim``: the last block computes its queries, output and FFN for the CLS token only."""
    p, e = cfg.n_ctx + 1, cfg.d_model
    forward = cfg.n_ctx * cfg.d_in * e  # embedding
    for b, h in enumerate(cfg.heads):
        n = cfg.d_head_of(b)
        queries = 1 if trim and b == cfg.n_layers - 1 else p
        forward += 2 * p * e * h * n  # keys and values
        forward += queries * (e * h * n + 2 * h * p * n + h * n * e)  # q, scores, z, out
        forward += 2 * queries * e * cfg.d_mlp
    forward = forward * batch + batch * (e * cfg.d_readout + cfg.d_readout * cfg.d_out)
    return 3 * 2 * forward


def matmul_peak(
    cores: int, clock: Callable[[], float] = time.perf_counter, size: int = 2048
) -> float:
    """FLOP/s of a float32 [size, size] @ [size, size] product on ``cores`` threads, best
    of 5, timed by ``clock`` (wall time; ``time.process_time`` for CPU time)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    with torch_threads(cores):
        a @ b
        times = []
        for _ in range(5):
            start = clock()
            a @ b
            times.append(clock() - start)
    return 2 * size**3 / min(times)


def cpu_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU time of ``fn()`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def breakdown(members: int, repeats: int, T: int = 16) -> dict[str, float]:
    """CPU seconds per step of an eager ``members``-member ensemble on one thread, by
    piece, and the matrix products' share of the forward and backward."""
    p = point(T)
    task = p.build_task()
    cfgs = [
        dataclasses.replace(p.train_config(s, "cpu", False), steps=10**9, eval_every=10**9)
        for s in range(members)
    ]
    with torch_threads(1):
        group = Ensemble(task, [p.model_config()] * members, cfgs)
        stack = group.stack
        x, y = group.draw()

        def forward():  # with the graph for the backward, as in training
            return group.losses(stack.flat, stack.buffers, x, y)

        def forward_backward():
            loss = group.losses(stack.flat, stack.buffers, x, y)
            return torch.autograd.grad(loss.sum(), [stack.flat])[0]

        grad, ones = forward_backward(), torch.ones(members, 1)

        def optimiser():
            stack.adamw_step(clip_rows(grad, ones), 2, ones * 1e-3, ones * 1e-2)

        member = group.active[0]
        model = member.tracker.result.model
        pieces = {
            "batch drawing": cpu_seconds(group.draw, repeats),
            "forward": cpu_seconds(forward, repeats),
            "forward + backward": cpu_seconds(forward_backward, repeats),
            "clipping + AdamW": cpu_seconds(optimiser, repeats),
        }
        val = cpu_seconds(lambda: evaluate(model, member.data.x_val, member.data.y_val), 3)
        pieces["validation"] = members * val / p.train_config(0).eval_every
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                forward_backward()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMMS)
    backward = pieces.pop("forward + backward") - pieces["forward"]
    order = ("batch drawing", "forward", "backward", "clipping + AdamW", "validation")
    pieces = {k: backward if k == "backward" else pieces[k] for k in order}
    return {**pieces, "matmul share of forward + backward": gemm / total}


GEMMS = {"aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm", "aten::matmul"}


def configurations(cores: int, device: str) -> dict[str, dict]:
    if device.startswith("cuda"):
        return {
            BASELINE: setting(1, cores, 1, False, trim=False),
            "eager": setting(1, cores, 1, False),
            "compiled": setting(1, cores, 1, True),
            "ensemble x8": setting(1, cores, 8, False),
            "ensemble x8 compiled": setting(1, cores, 8, True),
        }
    per = max(1, RUNS // cores)
    return {
        BASELINE: setting(cores, 1, 1, False, trim=False),
        "eager (the default)": setting(cores, 1, 1, False),
        "compiled": setting(cores, 1, 1, True),
        "ensemble": setting(cores, 1, per, False),
        "ensemble compiled": setting(cores, 1, per, True),
        "ensemble x8 compiled": setting(1, cores, 8, True),
    }


BASELINE = "full eager (baseline)"


def setting(workers: int, threads: int, members: int, compile: bool, trim: bool = True) -> dict:
    """One configuration: ``workers`` processes of ``threads`` threads, each training
    ``members`` runs (an ensemble when more than one); ``trim``: the default forward (the
    last block for the CLS token only), else every position in every block."""
    return {
        "workers": workers,
        "threads": threads,
        "members": members,
        "compile": compile,
        "trim": trim,
    }


def worker(
    members: int, threads: int, compile: bool, steps: int, device: str, trim: bool, T: int = 16
) -> dict:
    """Time one worker's training steps: {"step": s, "compile": s, "members": M}."""
    InfoFlowTransformer.trim_last_block = trim
    p = point(T)
    if members == 1:
        t = time_point(p, threads=threads, device=device, steps=steps, compile=compile)
    else:
        group = [RunSpec("bench", "quick", p, s, device, threads, compile) for s in range(members)]
        t = time_ensemble(group, steps=steps)
    return {"step": t.step_seconds, "compile": t.compile_seconds, "members": members}


def measure(setting: dict, steps: int, device: str, T: int = 16) -> dict:
    """Run the setting's workers at the same time; its throughput and compile time."""
    args = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps({**setting, "steps": steps, "device": device, "T": T}),
    ]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(setting["workers"])
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    rate = sum(r["members"] / r["step"] for r in results)
    compile_s = max(r["compile"] for r in results)
    runs_per_worker = RUNS / (setting["workers"] * setting["members"])
    step = statistics.median(r["step"] for r in results)
    # a 10k-step run per member, compilation counted once per worker and group
    wall = runs_per_worker * (RUN_STEPS * step + compile_s)
    return {"rate": rate, "compile": compile_s, "with_compile": RUNS * RUN_STEPS / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per worker")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--no-compile", action="store_true", help="leave out the compiled configurations"
    )
    parser.add_argument(
        "--T",
        type=int,
        default=16,
        help="sequence length of the model (default 16; 64: the paper's headline cell)",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        w = json.loads(args.worker)
        result = worker(
            w["members"], w["threads"], w["compile"], w["steps"], w["device"], w["trim"], w["T"]
        )
        print(json.dumps(result))
        return
    settings = configurations(args.cores, args.device)
    if args.no_compile:
        settings = {k: v for k, v in settings.items() if not v["compile"]}
    measured: dict[str, list[dict]] = {name: [] for name in settings}
    peaks = [matmul_peak(args.cores)]
    for r in range(args.rounds):
        for name, setting in settings.items():
            measured[name].append(measure(setting, args.steps, args.device, args.T))
            print(
                f"round {r + 1}: {name}: {measured[name][-1]['rate']:.1f} model-steps/s "
                f"(load average {load_average()})"
            )
    peaks.append(matmul_peak(args.cores))
    rows = {
        name: {
            k: statistics.median(m[k] for m in runs) for k in ("rate", "compile", "with_compile")
        }
        for name, runs in measured.items()
    }
    base = rows[BASELINE]["rate"]
    print(
        f"\n{RUNS} runs of the (2,2) D=2 quick model at T={args.T} on {args.device}, "
        f"{args.cores} cores"
    )
    print(
        f"{'configuration':24s} {'model-steps/s':>14s} {'x baseline':>10s} {'compile s':>10s}"
        f" {'10k-step runs, compile counted':>31s}"
    )
    for name, row in rows.items():
        print(
            f"{name:24s} {row['rate']:14.1f} {row['rate'] / base:10.2f} {row['compile']:10.1f}"
            f" {row['with_compile']:24.1f} ({row['with_compile'] / base:.2f}x)"
        )
    p = point(args.T)
    flops = step_flops(p.model_config(), p.train_config(0).batch_size)
    if not args.device.startswith("cuda"):
        members = max(1, RUNS // args.cores)
        pieces = breakdown(members, repeats=max(5, args.steps // 3), T=args.T)
        share = pieces.pop("matmul share of forward + backward")
        step = sum(pieces.values())
        one = matmul_peak(1, time.process_time)
        print(f"\neager ensemble of {members}, one thread, CPU ms per step (of {1e3 * step:.1f})")
        for name, seconds in pieces.items():
            print(f"  {name:18s} {1e3 * seconds:7.2f}  {seconds / step:6.1%}")
        print(
            f"  matrix products: {share:.0%} of forward + backward; the step reaches "
            f"{members * flops / step / one:.0%} of one core's matmul peak "
            f"({one / 1e9:.0f} GFLOP/s in CPU time)"
        )
    peak = statistics.median(peaks)
    best = max(rows, key=lambda n: rows[n]["rate"])
    rate = rows[best]["rate"]
    eager = next(rows[n]["rate"] for n in rows if n.startswith("eager"))
    flops = step_flops(p.model_config(), p.train_config(0).batch_size, settings[best]["trim"])
    print(f"fastest: {best}; load average {load_average()}")
    print(
        f"T={args.T}: fastest / baseline model-steps per second: {rate / base:.2f} "
        f"({rate / eager:.2f}x "
        f"the eager default; {best}: {rate:.1f} model-steps/s of {flops / 1e9:.2f} GFLOP, "
        f"{rate * flops / peak:.0%} of the {peak / 1e9:.0f} GFLOP/s matmul peak of "
        f"{args.cores} cores)"
    )


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as /proc/loadavg gives them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
