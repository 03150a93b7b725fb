"""Compare predicted and observed information sets (user job 2).

Reads a run folder made by `infoprobe run` / `probe-checkpoint` (or the other examples),
compares InfoFlow's predicted sets I_pred(t, l) with the probes' observed sets
I_obs(t, l), and attention rollout's sets with the same observations, per layer.
Violations (observed ∖ predicted) and omissions (predicted ∖ observed) are kept apart.

    python examples/compare_sets.py runs/example-probe
"""

import argparse
from pathlib import Path

import numpy as np

from infoprobe.report.sources import compare_sources, load_sources
from infoprobe.rollout import RolloutConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", help="run folder with pred.h5, probes.h5 and acts.h5")
args = parser.parse_args()
run = Path(args.run)

sources = load_sources(
    run / "pred.h5", run / "probes.h5", cache_path=run / "acts.h5", want_patterns=True
)  # refuses files from different samples/models
infoflow, rollout, _ = compare_sources(sources, RolloutConfig(head_fusion="mean"))

for comparison in (infoflow, rollout):
    print(f"== {comparison.name}")
    for line in comparison.verdicts:
        print("  " + line)

# Per sample, per layer: where the theory and the probes disagree.
pred = sources.predicted[..., : sources.predicted.shape[-1] - 1]  # data positions only
obs = sources.observations.per_sample  # [L+1, n, T+1, T]
for layer in range(pred.shape[0]):
    violations = np.logical_and(obs[layer], ~pred[layer]).sum()
    omissions = np.logical_and(pred[layer], ~obs[layer]).sum()
    print(
        f"layer {layer}: {violations} violations, {omissions} omissions "
        f"over {pred.shape[1]} test samples"
    )
print("Decodable is not the same as used.")
