"""The query-conditioned probe on the demo's workload vs the ridge pass and main's code.

Workload: an activation cache of the demo's architecture (intrinsic-dim D = 2, T = 16,
E = 32, heads (2, 2)) with N = 4096 samples and its random-init control:
``infoprobe probe acts.h5 --probe query --control acts-random-init.h5``, i.e. three query
fits (the probe, the random-init control, the shuffled control) of 51 cells (3 layers ×
17 tokens) × 16 queried positions, hidden 64, up to 100 epochs, patience 10, trained in
one pass (one worker pool, :func:`~infoprobe.probes.query.fit_query_probe_sets`). Pass
the demo's caches with ``--cache``/``--control``; without them an untrained model of the
same architecture is cached (same shapes, but early stopping, and so the time, differs
from a trained model).

Measured in one run:

- the ridge pass (``--probe linear``, same caches, median of 3) and the query probe
  (wall and CPU time, once, in this process);
- the query probe's arithmetic: matmul FLOPs per cell-sample-epoch (forward
  ``2Eh + 2hkS``, training ``4Eh + 6hkS``) over the cell-epochs it trained, against a
  float32 matmul peak (2048², best of 5) measured before and after; and the fused
  kernel's own time per cell-sample on one core (the query probe's shapes, 8 cells), which
  times the cell-epochs bounds the run from below;
- the command on the code before the one engine (a worktree of
  :data:`engine_baseline.BASELINE`), on this code with the kernel and with the engine's
  autograd step (:func:`engine_baseline.engine_table`), the last line the ratio of the
  first to the second.

    python bench/query_probe.py [--cache acts.h5 --control acts-random-init.h5] [--threads 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from cache_common import make_checkpoint, print_environment
from engine_baseline import BASELINE, engine_table
from ridge_workload import matmul_peak_gflops

from infoprobe.hooks import layer_sites, open_cache
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.pipeline.probing import ProbeSettings, probe_cache
from infoprobe.probes import native
from infoprobe.probes.families import family, register
from infoprobe.probes.split import TRAIN, VAL, make_split

TARGET_S = 60.0


def demo_caches(folder: Path, n: int) -> tuple[Path, Path]:
    """Cache an untrained demo-architecture model and its random-init control."""
    checkpoint = make_checkpoint(folder)
    paths = folder / "acts.h5", folder / "acts-random-init.h5"
    for path, seed in zip(paths, (None, 12_345), strict=True):
        cache_checkpoint(
            checkpoint, path, n=n, sites="residual", random_init_seed=seed, progress=False
        )
    return paths


def load_states(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """States ``[n, C, E]`` (layer-major cells) and inputs ``x [n, T, d]`` of a cache."""
    with open_cache(path) as cache:
        sites = layer_sites(cache.n_blocks)
        states = np.stack([cache.acts(s)[()] for s in sites], axis=1)
        return states.reshape(len(states), -1, states.shape[-1]), cache.x[()]


def kernel_us_per_cell_sample(S: int, E: int, k: int, h: int = 64, b: int = 256) -> float:
    """One core's time for the fused kernel's forward and backward per cell and training
    sample, at the query probe's shapes (8 cells, one minibatch; best of 7)."""
    fused = native.kernel()
    if fused is None:
        return float("nan")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    c = 8
    state, off = torch.randn(c, h, b, generator=gen), torch.randn(c, S, h, generator=gen)
    w, bias, y = torch.randn(c, k, h, generator=gen) / 8, torch.zeros(c, k), torch.randn(S, k, b)
    loss = torch.empty(c)
    grads = (torch.empty(c, h, b), torch.empty(c, S, h), torch.empty(c, k, h), torch.empty(c, k))
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(10):
            fused(state, off, w, bias, y, 1e-3, loss, grads)
        best = min(best, (time.perf_counter() - start) / 10)
    torch.set_num_threads(before)
    return best / (c * b) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="the demo's acts.h5 (default: build one)")
    parser.add_argument("--control", type=Path, help="its random-init control cache")
    parser.add_argument("--n", type=int, default=4096, help="samples when building caches")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print_environment()
    with tempfile.TemporaryDirectory() as tmp:
        if args.cache is None:
            args.cache, args.control = demo_caches(Path(tmp), args.n)
            print("workload: untrained demo-architecture model (pass --cache for the demo's)")
        run(args)


def run(args: argparse.Namespace) -> None:
    states, x = load_states(args.cache)
    n, C, E = states.shape
    _, S, k = x.shape
    h, settings = 64, ProbeSettings(probe="query")
    print(
        f"workload: {args.cache}, n={n}, {C} cells, E={E}, S={S}, k={k}, hidden {h}, "
        f"up to {settings.budget.epochs} epochs, patience {settings.budget.patience}; "
        f"{torch.get_num_threads()} torch threads"
    )
    peak = matmul_peak_gflops()
    kernel_us = kernel_us_per_cell_sample(S, E, k, h)

    def ridge() -> None:
        probe_cache(args.cache, control_path=args.control, progress=False)

    ridge()
    ridge_times = []
    for _ in range(3):
        start = time.perf_counter()
        ridge()
        ridge_times.append(time.perf_counter() - start)
    t_ridge = statistics.median(ridge_times)

    def query_probe() -> tuple[float, float, list]:
        """Wall and CPU seconds of the query probe, and its three fits."""
        fits = []  # record every query fit of the run (probe, random-init, shuffled)
        original = family("query")

        def recording(*a, **kw):
            fits.extend(original.fit(*a, **kw))
            return fits[-len(a[0]) :]

        register(dataclasses.replace(original, fit_sets=recording))
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            probe_cache(args.cache, control_path=args.control, settings=settings, progress=False)
        finally:
            register(original)
        return time.perf_counter() - wall, time.process_time() - cpu, fits

    t_query, cpu_query, fits = query_probe()
    peak = max(peak, matmul_peak_gflops())

    split = make_split(n)
    n_train, n_val = int((split == TRAIN).sum()), int((split == VAL).sum())
    patience, epochs = settings.budget.patience, settings.budget.epochs
    trained = [np.minimum(f.best_epoch + patience + 1, epochs) for f in fits]  # per cell
    cell_epochs = int(sum(t.sum() for t in trained))
    flop = cell_epochs * (
        n_train * (4 * E * h + 6 * h * k * S) + n_val * (2 * E * h + 2 * h * k * S)
    )
    kernel_floor = cell_epochs * n_train * kernel_us * 1e-6 / args.threads
    for name, t in zip(("probe", "random-init", "shuffled"), trained, strict=True):
        print(
            f"  {name}: a cell trained {t.mean():.1f} epochs on average "
            f"(min {t.min()}, max {t.max()})"
        )
    print(f"ridge pass (linear probes + controls, same caches): {t_ridge:.2f} s (median of 3)")
    print(f"query probe: {t_query:.1f} s wall, {cpu_query:.1f} s CPU, {cell_epochs} cell-epochs")
    print(
        f"matmul FLOPs {flop / 1e9:.0f} GFLOP -> {flop / t_query / 1e9:.1f} GFLOP/s; float32 "
        f"matmul peak {peak:.0f} GFLOP/s: efficiency {flop / t_query / 1e9 / peak:.3f}"
    )
    print(
        f"fused kernel alone: {kernel_us:.2f} µs per cell-sample on one core (S·h = {S * h} "
        f"GELUs with gradients) = {kernel_floor:.1f} s on {args.threads} cores "
        f"({kernel_floor / t_query:.2f} of the query probe's time)"
    )

    print(
        f"query probe / ridge pass: {t_query / t_ridge:.0f}x; "
        f"query probe {t_query:.1f} s (target <= {TARGET_S:g} s on the idle 2-core machine)"
    )
    times = engine_table(args.cache, args.control, "query", args.threads)
    print(f"ratio: {times['baseline'] / times['kernel']:.2f}x ({BASELINE} / the engine)")


if __name__ == "__main__":
    main()
