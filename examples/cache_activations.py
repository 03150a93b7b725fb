"""Cache activations to HDF5 and read them back (user job 3).

Trains a small intrinsic-dim model (or uses --checkpoint), caches the residual stream
and attention patterns of every layer, then reads the file three ways: infoprobe's lazy
reader, TransformerLens's ActivationCache, and plain h5py (no infoprobe needed).

    python examples/cache_activations.py --out runs/example-cache
"""

import argparse
from pathlib import Path

import h5py
import torch

from infoprobe.checkpoint import load_checkpoint
from infoprobe.hooks import open_cache
from infoprobe.model import ModelConfig
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.tasks import make_task
from infoprobe.train import TrainConfig, train_and_save

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="runs/example-cache")
parser.add_argument("--checkpoint", default=None, help="use this checkpoint instead of training")
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--n", type=int, default=4096, help="samples to cache")
args = parser.parse_args()
out = Path(args.out)

# 1. A checkpoint: train a small model unless one is given.
ckpt = args.checkpoint
if ckpt is None:
    ckpt = out / "checkpoint"
    if not ckpt.exists():
        task = make_task("intrinsic-dim", D=2, T=8)
        model_cfg = ModelConfig(d_in=task.d, n_ctx=task.T, d_model=32, heads=(2, 2))
        # threads="auto": the cores other work leaves free (docs/model.md, "Threads")
        cfg = TrainConfig(steps=args.steps, lr=2e-3)
        train_and_save(task, model_cfg, cfg, ckpt, threads="auto")

# 2. Cache every layer's residual stream and attention (resumes if interrupted).
summary = cache_checkpoint(
    ckpt, out / "acts.h5", n=args.n, sites="residual,attention", overwrite=True
)
print(summary)

# 3a. infoprobe's reader: lazy h5py datasets, TransformerLens names and shorthand.
with open_cache(out / "acts.h5") as cache:
    print("samples", cache.n, "hook sites", len(cache.hook_names))
    print("x", cache.x.shape, "y", cache.y.shape)
    resid = cache["resid_post", -1]  # = cache.acts("blocks.1.hook_resid_post")
    print("last residual", resid.shape, cache.axes(resid.name.split("/", 2)[-1]))
    # 3b. A TransformerLens ActivationCache for a slice of samples.
    model = load_checkpoint(ckpt).model
    tl_cache = cache.to_activation_cache(model, slice(0, 16))
    pattern = tl_cache["pattern", 0]  # [sample, head, query, key]
    print("TL cache: pattern of block 0", tuple(pattern.shape))
    # The cache holds exactly what a fresh forward pass computes.
    x = torch.as_tensor(cache.x[:16])
    _, fresh = model.run_with_cache(x, names_filter="blocks.0.attn.hook_pattern")
    assert torch.allclose(fresh["blocks.0.attn.hook_pattern"], pattern, atol=1e-6)

# 3c. Plain h5py: the file describes itself (docs/cache-format.md).
with h5py.File(out / "acts.h5", "r") as f:
    print("schema", f.attrs["schema_version"], "committed", f.attrs["n_committed"])
    print("datasets:", sorted(f["acts"].keys())[:4], "...")
