"""Benchmark: the batched flow pass vs a per-sample, per-position loop of ``run_with_cache``.

Demo-sized model (intrinsic-dim, D=2, T=16, d=4, E=32, heads (2,2), default d_mlp),
random-init weights, samples of the task. The baseline nudges x(s) of one sample along one
direction at a time and runs ``model.run_with_cache`` on that single sequence (plus one
base forward per sample); the batched pass (finite differences, K=2) does the same work
in a few batched forwards. Both run on the same samples and must agree; the loop is timed
on a subset (``--loop-n``) and the batched pass on the same subset. Also reports seconds
per 1024 samples of each estimator (fd K=2, exact Jacobian, resample R=2) on ``--n``
samples. Prints the ratio loop / batched last (gate >= 20).

    python bench/influence.py [--n 1024] [--loop-n 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from infoprobe.influence import InfluenceSettings, influence, plan_influence
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.tasks import make_task

GATE = 20.0
NAMES = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def loop_scores(model, x: np.ndarray, settings: InfluenceSettings, sigma: float, v: np.ndarray):
    """The baseline: one run_with_cache per (sample, position, direction), same draws."""
    n, T, d = x.shape
    K, eps = settings.directions, settings.epsilon
    B = settings.samples_per_block
    out = np.zeros((len(NAMES), n, T + 1, T))

    def states(seq: np.ndarray) -> list[np.ndarray]:
        with torch.no_grad():
            _, cache = model.run_with_cache(
                torch.tensor(seq[None], dtype=torch.float32), names_filter=NAMES
            )
        return [cache[name][0].double().numpy() for name in NAMES]

    for i in range(n):
        block = i // B
        u = np.random.default_rng([settings.seed, block]).standard_normal((B, T, K, d))
        base = states(x[i])
        for s in range(T):
            for k in range(K):
                moved = x[i].copy()
                moved[s] = x[i, s] + (eps * sigma * u[i - block * B, s, k]).astype(np.float32)
                for layer, h in enumerate(states(moved)):
                    out[layer, i, :, s] += ((h - base[layer]) ** 2).sum(-1) / K
    with np.errstate(divide="ignore", invalid="ignore"):
        g = out / (eps**2 * sigma**2 * v[:, None, :, None])
    return np.where(v[:, None, :, None] > 0, g, 0.0)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--loop-n", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = make_task("intrinsic-dim", T=16, D=2, seed=0)
    cfg = ModelConfig(d_in=task.d, n_ctx=task.T, d_model=32, heads=(2, 2))
    model = InfoFlowTransformer(cfg, seed=0).eval()
    x, _ = task.sample(args.n, np.random.default_rng([0, 2]))
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, intrinsic-dim D=2 "
        f"T={task.T} d={task.d}, E={cfg.d_model}, heads={cfg.heads}, d_mlp={cfg.d_mlp}"
    )
    fd = InfluenceSettings(estimator="fd", directions=2)
    influence(model, x[:8], fd, progress=False)  # warm-up
    influence(model, x[:8], InfluenceSettings(), progress=False)
    for label, settings in (
        ("fd K=2", fd),
        ("jacobian", InfluenceSettings(estimator="jacobian")),
        ("resample R=2", InfluenceSettings(method="resample", resamples=2)),
    ):
        _, seconds = timed(lambda s=settings: influence(model, x, s, progress=False))
        print(f"{label:>13}: {seconds:7.2f} s for {args.n} samples = "
              f"{1024 * seconds / args.n:7.2f} s per 1024 samples")  # fmt: skip
    sub = x[: args.loop_n]
    plan = plan_influence(model, sub, fd)
    batched, t_batched = timed(lambda: influence(model, sub, fd, plan=plan, progress=False))
    looped, t_loop = timed(
        lambda: loop_scores(model, sub, plan.settings, plan.input_scale, plan.state_variance)
    )
    np.testing.assert_allclose(batched.scores, looped, rtol=1e-2, atol=1e-5)
    calls = args.loop_n * (1 + task.T * fd.directions)
    print(
        f"same {args.loop_n} samples, fd K=2: loop of {calls} run_with_cache calls "
        f"{t_loop:.2f} s, batched {t_batched:.3f} s (scores agree)"
    )
    print(f"ratio loop/batched: {t_loop / t_batched:.1f}x (gate >= {GATE:g})")


if __name__ == "__main__":
    main()
