"""Probe a Transformer infoprobe did not build (your own PyTorch code).

A pre-LayerNorm Transformer written with torch's nn.MultiheadAttention, trained by its
own loop on intrinsic-dim, saved as a checkpoint whose JSON names this file's ``build``
as the factory and where its states live (the site map); then every instrument runs on
it: cache, probes, flow, InfoFlow's prediction, the observed program, the report.

    python examples/own_model.py --out runs/own-model
    infoprobe probe-checkpoint runs/own-model/checkpoint --trust-code --out runs/own-model/probe-cli
"""

import argparse
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn

from infoprobe import save_checkpoint
from infoprobe.foreign import ForeignConfig, SiteMap
from infoprobe.pipeline import RunSettings, probe_checkpoint
from infoprobe.tasks import make_task


class Block(nn.Module):
    """h → h + attn(ln1(h)) → h + ffn(ln2(h)); ``attn`` returns (output, per-head weights)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ffn = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a = self.ln1(h)
        out, _ = self.attn(a, a, a, need_weights=True, average_attn_weights=False)
        h = h + out
        return h + self.ffn(self.ln2(h))


class MyTransformer(nn.Module):
    """x [b, T, d] → y [b, 1]: tokens embedded, a CLS token appended last, readout on it."""

    def __init__(self, d: int, width: int = 32, heads: int = 2, depth: int = 2):
        super().__init__()
        self.embed = nn.Linear(d, width)
        self.cls = nn.Parameter(torch.zeros(width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.embed(x), self.cls.expand(x.shape[0], 1, -1)], dim=1)
        for block in self.blocks:
            h = block(h)
        return self.head(h[:, -1])


def build(**kwargs) -> MyTransformer:
    """The factory the checkpoint names (``own_model:build``)."""
    return MyTransformer(**kwargs)


def train_own_loop(model: nn.Module, task, steps: int, lr: float = 2e-3) -> float:
    """Your own training loop (AdamW on fresh batches); returns the held-out NMSE."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x, y = (torch.as_tensor(a) for a in task.sample(256, rng))
        loss = ((model(x) - y) ** 2).mean() / y.var()
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = (torch.as_tensor(a) for a in task.sample(4096, np.random.default_rng(1)))
    with torch.no_grad():
        return float(((model.eval()(x) - y) ** 2).mean() / y.var())


def save_and_probe(model, task, config: ForeignConfig, out: Path, *, n: int, source: str,
                   nmse: float, steps: int) -> None:  # fmt: skip
    """Save the checkpoint with the factory's file ``source`` beside its weights, then run
    every instrument on it (what ``infoprobe probe-checkpoint`` does); print the summary.
    ``nmse`` and ``steps``: what your training measured, recorded in the checkpoint."""
    metrics = {"val_nmse": nmse, "test_nmse": nmse, "best_step": steps}
    ckpt = save_checkpoint(out / "checkpoint", model, task, config=config, metrics=metrics,
                           overwrite=True)  # fmt: skip
    for code in {Path(source).resolve(), Path(__file__).resolve()}:  # the factory's code
        shutil.copy(code, ckpt / code.name)  # travels with the weights
    print(f"checkpoint: {ckpt}")
    # our own code, beside our own weights: trusted, so infoprobe may import and call it
    summary = probe_checkpoint(ckpt, out / "probe", RunSettings(n_cache=n), overwrite=True,
                               progress=False, trust_code=True)  # fmt: skip
    print("\n".join(summary.lines()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/own-model")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--n", type=int, default=4096, help="samples cached and probed")
    args = parser.parse_args()

    task = make_task("intrinsic-dim", D=2, T=8)
    kwargs = {"d": task.d, "width": 32, "heads": 2, "depth": 2}
    torch.manual_seed(0)
    model = build(**kwargs)
    nmse = train_own_loop(model, task, args.steps)
    print(f"trained {args.steps} steps, held-out NMSE {nmse:.3f}")

    # Where the states live: layer 0 enters block 0, layer l+1 leaves block l, and each
    # block's nn.MultiheadAttention returns its per-head pattern as output element 1.
    sites = SiteMap(embed="blocks.0:input", blocks="blocks.{l}", pattern="blocks.{l}.attn[1]",
                    n_layers=2)  # fmt: skip
    config = ForeignConfig(factory="own_model:build", kwargs=kwargs, sites=sites, heads=(2, 2),
                           d_model=32, n_ctx=task.T, d_in=task.d)  # fmt: skip
    save_and_probe(model, task, config, Path(args.out), n=args.n, source=__file__, nmse=nmse,
                   steps=args.steps)  # fmt: skip
