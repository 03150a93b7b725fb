"""Probe a Hugging Face BERT encoder (transformers' BertModel) trained on intrinsic-dim.

A model from a real library, with its own module names, post-LayerNorm blocks and
learned absolute positions: the task's tokens enter through ``inputs_embeds`` (a linear
map of each x(t), a CLS vector appended last), a linear readout reads the last token.
The weights are trained here (no pretrained weights can be downloaded on this machine),
so this shows the instruments on a library's architecture, not on a pretrained network.
Needs ``pip install transformers``.

    python examples/hf_bert.py --out runs/hf-bert
"""

import argparse
from pathlib import Path

import torch
from own_model import save_and_probe, train_own_loop  # the loop and the probing, shared
from torch import nn
from transformers import BertConfig, BertModel

from infoprobe.foreign import ForeignConfig, SiteMap
from infoprobe.tasks import make_task

SITES = SiteMap(
    embed="bert.embeddings",  # inputs_embeds + positions, LayerNorm: layer 0
    blocks="bert.encoder.layer.{l}",  # each BertLayer returns the residual stream
    pattern="bert.encoder.layer.{l}.attention.self[1]",  # (context, attention weights)
    n_layers=2,
)


class BertRegressor(nn.Module):
    """x [b, T, d] → y [b, 1] through a BertModel over T tokens and a CLS token (last)."""

    def __init__(self, d: int, width: int = 32, heads: int = 2, depth: int = 2, T: int = 8):
        super().__init__()
        config = BertConfig(
            hidden_size=width,
            num_hidden_layers=depth,
            num_attention_heads=heads,
            intermediate_size=4 * width,
            max_position_embeddings=T + 1,
            vocab_size=1,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            attn_implementation="eager",  # the weights are computed, so they can be read
        )
        self.tokens = nn.Linear(d, width)
        self.cls = nn.Parameter(torch.zeros(width))
        self.bert = BertModel(config, add_pooling_layer=False)
        self.readout = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.tokens(x), self.cls.expand(x.shape[0], 1, -1)], dim=1)
        return self.readout(self.bert(inputs_embeds=h).last_hidden_state[:, -1])


def build(**kwargs) -> BertRegressor:
    """The factory the checkpoint names (``hf_bert:build``)."""
    return BertRegressor(**kwargs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/hf-bert")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--n", type=int, default=4096, help="samples cached and probed")
    args = parser.parse_args()

    task = make_task("intrinsic-dim", D=2, T=8)
    kwargs = {"d": task.d, "width": 32, "heads": 2, "depth": 2, "T": task.T}
    torch.manual_seed(0)
    model = build(**kwargs)
    nmse = train_own_loop(model, task, args.steps, lr=1e-3)
    print(f"trained {args.steps} steps, held-out NMSE {nmse:.3f}")
    config = ForeignConfig(
        factory="hf_bert:build",
        kwargs=kwargs,
        sites=SITES,
        heads=(2, 2),
        d_model=32,
        n_ctx=task.T,
        d_in=task.d,
        pos_encoding="learned",  # BERT adds absolute position embeddings
    )
    save_and_probe(model, task, config, Path(args.out), n=args.n, source=__file__, nmse=nmse,
                   steps=args.steps)  # fmt: skip
