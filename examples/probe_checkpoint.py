"""Probe a trained checkpoint (user job 1).

Runs the analysis chain on a checkpoint: cache → random-init control → linear probes of
x(s) from every token's state at every layer → InfoFlow's predicted sets on the same
samples → comparison → report. Without --checkpoint it first trains a small model.

    python examples/probe_checkpoint.py --out runs/example-probe
"""

import argparse
from pathlib import Path

from infoprobe.model import ModelConfig
from infoprobe.pipeline import RunSettings, probe_checkpoint
from infoprobe.probes import ProbeResults
from infoprobe.tasks import make_task
from infoprobe.train import TrainConfig, train_and_save

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="runs/example-probe")
parser.add_argument("--checkpoint", default=None)
parser.add_argument("--steps", type=int, default=3000)
parser.add_argument("--n", type=int, default=4096, help="samples cached and probed")
args = parser.parse_args()
out = Path(args.out)

ckpt = args.checkpoint
if ckpt is None:
    ckpt = out.with_name(out.name + "-checkpoint")
    if not ckpt.exists():
        task = make_task("intrinsic-dim", D=2, T=8)
        model_cfg = ModelConfig(d_in=task.d, n_ctx=task.T, d_model=32, heads=(2, 2))
        train_and_save(task, model_cfg, TrainConfig(steps=args.steps, lr=2e-3), ckpt)

summary = probe_checkpoint(ckpt, out, RunSettings(n_cache=args.n), progress=False, log=print)
print("\n".join(summary.lines()))

# The probe results: R² of x(s) decoded from h(t, l), beside its controls.
results = ProbeResults.read(out / "probes.h5")
table = results.to_dataframe()
print(table.head() if hasattr(table, "head") else table[:5])
print("Decodable is not the same as used: the probe shows what is readable, not what is read.")
