"""Batched MLP probes vs a per-probe torch loop (gate: >= 15x at held-out R² within 0.01).

Workload: n samples, C cells of width E, S targets of k coordinates; cell c sees the
targets s ≡ c (mod C) through a random tanh map, so some probes decode well and most do
not. Both sides get the same budget: hidden width, Adam, learning rate, epochs, batch
size, patience, the same initial weights (copied from the batched module) and the same
minibatch order, so their held-out R² agree up to float rounding.

- batched: ``infoprobe.probes.mlp.fit_mlp_probes`` on all C·S probes (median of repeats,
  including standardisation and test predictions);
- loop: one ``nn.Sequential(Linear, GELU, Linear)`` per probe with its own Adam, trained
  on pre-standardised tensors, early stopping on validation; ``--loop-probes`` probes
  (spread over all cells) are timed and the median per-probe time is extrapolated to
  C·S probes.

Then, unless ``--no-engine``, ``infoprobe probe --probe mlp`` on the demo's workload
(:mod:`query_probe`'s caches, or ``--cache``/``--control``) on the code before the one
engine, this code with the kernel and with autograd (:func:`engine_baseline.engine_table`).

    python bench/mlp_probes.py [--cells 8] [--targets 32] [--epochs 15] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from engine_baseline import engine_table
from query_probe import demo_caches
from torch import nn

from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.metrics import pooled_r2
from infoprobe.probes.mlp import BatchedMLP, fit_mlp_probes

GATE_RATIO = 15.0
GATE_R2 = 0.01


def make_workload(n: int, cells: int, targets: int, width: int, k: int, seed: int = 0):
    """States ``X [n, C, E]`` and targets ``Y [n, S, k]`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, targets, k))
    X = np.empty((n, cells, width))
    for c in range(cells):
        seen = Y[:, c::cells].reshape(n, -1)
        mixing = rng.normal(size=(seen.shape[1], width)) / np.sqrt(seen.shape[1])
        X[:, c] = np.tanh(2 * seen @ mixing) + 0.1 * rng.normal(size=(n, width))
    return X.astype(np.float32), Y.astype(np.float32)


def standardise(values: np.ndarray, train: np.ndarray) -> torch.Tensor:
    mean = values[train].astype(np.float64).mean(0)
    scale = values[train].astype(np.float64).std(0)
    return torch.tensor(((values - mean) / np.where(scale > 0, scale, 1)).astype(np.float32))


def train_one_probe(
    x: torch.Tensor,
    y: torch.Tensor,
    splits: tuple[np.ndarray, np.ndarray, np.ndarray],
    init: dict[str, torch.Tensor],
    args: argparse.Namespace,
) -> torch.Tensor:
    """One probe, trained alone: returns standardised test predictions ``[n_test, k]``."""
    train, val, test = splits
    probe = nn.Sequential(
        nn.Linear(*init["w_in"].shape[::-1]), nn.GELU(), nn.Linear(*init["w_out"].shape[::-1])
    )
    with torch.no_grad():
        probe[0].weight.copy_(init["w_in"])
        probe[0].bias.copy_(init["b_in"])
        probe[2].weight.copy_(init["w_out"])
        probe[2].bias.copy_(init["b_out"])
    probe.to(x.device)
    optimizer = torch.optim.Adam(probe.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    x_train, y_train, x_val, y_val = x[train], y[train], x[val], y[val]
    best, best_epoch, best_state = float("inf"), -1, None
    for epoch in range(args.epochs):
        order = torch.randperm(len(train), generator=generator).to(x.device)
        for start in range(0, len(train), args.batch_size):
            idx = order[start : start + args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            ((probe(x_train[idx]) - y_train[idx]) ** 2).mean().backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = float(((probe(x_val) - y_val) ** 2).mean())
        if val_loss < best:
            best, best_epoch = val_loss, epoch
            best_state = {name: v.clone() for name, v in probe.state_dict().items()}
        if epoch - best_epoch >= args.patience:
            break
    probe.load_state_dict(best_state)
    with torch.no_grad():
        return probe(x[test])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--width", type=int, default=32, help="E, state width")
    parser.add_argument("--coords", type=int, default=4, help="k, coordinates per target")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="batched fits (median)")
    parser.add_argument("--loop-probes", type=int, default=24, help="probes timed in the loop")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache", type=Path, help="the demo's acts.h5 for the engine table")
    parser.add_argument("--control", type=Path, help="its random-init control cache")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine table")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    C, S, k = args.cells, args.targets, args.coords
    X, Y = make_workload(args.samples, C, S, args.width, k)
    order = np.random.default_rng(1).permutation(args.samples)
    n_eval = args.samples * 3 // 20
    splits = (
        np.sort(order[2 * n_eval :]),
        np.sort(order[:n_eval]),
        np.sort(order[n_eval : 2 * n_eval]),
    )
    print(
        f"workload: n={args.samples} (train {len(splits[0])}), C={C} cells, S={S} targets, "
        f"E={args.width}, k={k}, hidden={args.hidden}, {C * S} probes; Adam lr={args.lr}, "
        f"{args.epochs} epochs, batch {args.batch_size}, patience {args.patience}; "
        f"{torch.get_num_threads()} torch threads, device {args.device}"
    )

    budget = TrainingBudget(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        patience=args.patience,
        seed=args.seed,
    )
    device = torch.device(args.device)
    x_all = standardise(X, splits[0]).to(device)
    y_all = standardise(Y, splits[0]).to(device)
    y_scale = torch.tensor(Y[splits[0]].std(0), device=device)
    y_mean = torch.tensor(Y[splits[0]].mean(0), device=device)
    init_module = BatchedMLP(range(C), S, args.width, args.hidden, k, seed=args.seed)
    chosen = [(i % C, (i * 7 + i // C) % S) for i in range(args.loop_probes)]
    per_repeat = -(-len(chosen) // args.repeats)

    # interleaved: each repeat times one batched fit, then its share of the looped probes
    batched_wall, batched_cpu, loop_wall, loop_cpu, deltas = [], [], [], [], []
    for repeat in range(args.repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fit = fit_mlp_probes(
            X, Y, *splits, hidden=args.hidden, budget=budget, device=args.device, progress=False
        )
        batched_wall.append(time.perf_counter() - wall)
        batched_cpu.append(time.process_time() - cpu)
        for c, s in chosen[repeat * per_repeat : (repeat + 1) * per_repeat]:
            init = {name: p.detach()[c, s] for name, p in init_module.named_parameters()}
            wall, cpu = time.perf_counter(), time.process_time()
            pred = train_one_probe(x_all[:, c], y_all[:, s], splits, init, args)
            loop_wall.append(time.perf_counter() - wall)
            loop_cpu.append(time.process_time() - cpu)
            pred = pred * y_scale[s] + y_mean[s]
            r2_loop = float(pooled_r2(Y[splits[2], s], pred.cpu()))
            deltas.append(abs(r2_loop - float(fit.r2[c, s])))
    t_batched, t_batched_cpu = statistics.median(batched_wall), statistics.median(batched_cpu)
    t_loop = statistics.median(loop_wall) * C * S
    t_loop_cpu = statistics.median(loop_cpu) * C * S
    print(
        f"batched: {t_batched:.2f} s wall, {t_batched_cpu:.2f} s CPU for {C * S} probes "
        f"(median of {args.repeats}; cells trained {fit.engine.group} at a time)"
    )
    print(
        f"loop: {t_loop / (C * S) * 1e3:.1f} ms/probe wall "
        f"({t_loop_cpu / (C * S) * 1e3:.1f} ms CPU), median of {len(loop_wall)} timed probes "
        f"-> {t_loop:.1f} s wall, {t_loop_cpu:.1f} s CPU extrapolated to {C * S} probes"
    )
    print(
        f"CPU-time ratio (less sensitive to other load on the machine): "
        f"{t_loop_cpu / t_batched_cpu:.1f}x"
    )
    r2 = fit.r2
    print(
        f"held-out R² (batched): median {np.median(r2):.3f}, max {r2.max():.3f}; "
        f"|ΔR²| batched vs loop on the timed probes: max {max(deltas):.2e} "
        f"(gate <= {GATE_R2}) -> {'ok' if max(deltas) <= GATE_R2 else 'FAIL'}"
    )
    if not args.no_engine:  # the demo's workload on main's code, the kernel and autograd
        with tempfile.TemporaryDirectory() as tmp:
            cache, control = args.cache, args.control
            if cache is None:
                cache, control = demo_caches(Path(tmp), 4096)
            engine_table(cache, control, "mlp", args.threads or 1)
    ratio = t_loop / t_batched
    print(f"ratio: {ratio:.1f}x (gate >= {GATE_RATIO:g}x)")


if __name__ == "__main__":
    main()
