"""Benchmark: one training step of the hooked model vs the same math without HookPoints.

Both models share the same weights (copied) and see the same batches; steps alternate
between them so machine noise hits both alike. The hooked model computes every position
in every block here (``trim_last_block = False``), as the plain one does, so the ratio is
the HookPoints' cost alone. Prints the median step times and, last,
the ratio hooked / plain (gate: <= 1.15).

    python bench/train_step.py [--steps 300] [--T 16] [--E 32] [--heads 2,2] [--batch 256]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn

from infoprobe.model import InfoFlowTransformer, ModelConfig


class PlainTransformer(nn.Module):
    """The InfoFlow model's forward pass in plain torch: no HookPoints, same parameters."""

    def __init__(self, hooked: InfoFlowTransformer):
        super().__init__()
        self.cfg = hooked.cfg
        self.params = nn.ParameterDict(
            {
                k.replace(".", "__"): nn.Parameter(v.detach().clone())
                for k, v in hooked.named_parameters()
            }
        )
        self.y_mean = hooked.readout.y_mean.clone()
        self.y_scale = hooked.readout.y_scale.clone()

    def p(self, name: str) -> torch.Tensor:
        return self.params[name.replace(".", "__")]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cls = self.p("embed.cls").expand(x.shape[0], 1, -1)
        resid = torch.cat([x @ self.p("embed.W_E") + self.p("embed.b_E"), cls], dim=1)
        for i in range(self.cfg.n_layers):
            a = f"blocks.{i}.attn."
            q = torch.einsum("bpe,hen->bphn", resid, self.p(a + "W_Q")) + self.p(a + "b_Q")
            k = torch.einsum("bpe,hen->bphn", resid, self.p(a + "W_K")) + self.p(a + "b_K")
            v = torch.einsum("bpe,hen->bphn", resid, self.p(a + "W_V")) + self.p(a + "b_V")
            scores = torch.einsum("bqhn,bkhn->bhqk", q, k) / math.sqrt(q.shape[-1])
            z = torch.einsum("bhqk,bkhn->bqhn", torch.softmax(scores, -1), v)
            resid = resid + torch.einsum("bqhn,hne->bqe", z, self.p(a + "W_O")) + self.p(a + "b_O")
            m = f"blocks.{i}.mlp."
            hidden = nn.functional.gelu(resid @ self.p(m + "W_in") + self.p(m + "b_in"))
            resid = resid + hidden @ self.p(m + "W_out") + self.p(m + "b_out")
        h = nn.functional.gelu(resid[:, -1] @ self.p("readout.W_1") + self.p("readout.b_1"))
        return (h @ self.p("readout.W_2") + self.p("readout.b_2")) * self.y_scale + self.y_mean


def step_timer(model: nn.Module, xs, ys):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)

    def step(i: int) -> float:
        start = time.perf_counter()
        loss = ((model(xs[i]) - ys[i]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return time.perf_counter() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--T", type=int, default=16)
    parser.add_argument("--E", type=int, default=32)
    parser.add_argument("--heads", default="2,2")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    cfg = ModelConfig(
        d_in=4, n_ctx=args.T, d_model=args.E, heads=tuple(int(h) for h in args.heads.split(","))
    )
    InfoFlowTransformer.trim_last_block = False  # the same arithmetic as PlainTransformer
    hooked = InfoFlowTransformer(cfg, seed=0)
    plain = PlainTransformer(hooked)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(args.steps, args.batch, args.T, 4, generator=g)
    ys = torch.randn(args.steps, args.batch, 1, generator=g)
    with torch.no_grad():
        diff = (hooked(xs[0]) - plain(xs[0])).abs().max().item()
    assert diff < 1e-5, f"plain and hooked models disagree by {diff}"
    steps = {"hooked": step_timer(hooked, xs, ys), "plain": step_timer(plain, xs, ys)}
    times: dict[str, list[float]] = {"hooked": [], "plain": []}
    for i in range(args.steps):
        order = ("hooked", "plain") if i % 2 else ("plain", "hooked")
        for name in order:
            t = steps[name](i)
            if i >= 10:  # warm-up
                times[name].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, T={args.T} "
        f"E={args.E} heads={cfg.heads} batch={args.batch}, {len(times['plain'])} steps each"
    )
    print(f"median step: hooked {1e3 * med['hooked']:.2f} ms, plain {1e3 * med['plain']:.2f} ms")
    print(f"ratio hooked/plain: {med['hooked'] / med['plain']:.3f}x (gate <= 1.15)")


if __name__ == "__main__":
    main()
