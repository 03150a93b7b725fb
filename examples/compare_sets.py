"""Compare predicted and observed information sets (user job 2).

Reads a run folder made by `infoprobe run` / `probe-checkpoint` (or the other examples),
compares InfoFlow's predicted sets I_pred(t, l) with the sets two instruments observe,
flow (flow.h5: does the state move with x(s)?) and decodability (probes.h5: can a probe
read x(s)?), and attention rollout's sets with the same observations, per layer.
Violations (observed ∖ predicted) and omissions (predicted ∖ observed) are kept apart,
and each token's own position is reported apart.

    python examples/compare_sets.py runs/example-probe
"""

import argparse
from pathlib import Path

import numpy as np

from infoprobe.attention.rollout import RolloutConfig
from infoprobe.compare.sources import compare_sources, load_sources

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", help="run folder with pred.h5, probes.h5 and acts.h5")
args = parser.parse_args()
run = Path(args.run)

flows = [run / name for name in ("flow.h5", "flow-random-init.h5") if (run / name).exists()]
sources = load_sources(
    run / "pred.h5",
    run / "probes.h5",
    influence_paths=flows,
    cache_path=run / "acts.h5",
    want_patterns=True,
)  # refuses files from different samples/models; aligns every instrument sample by sample
compared = compare_sources(sources, RolloutConfig(head_fusion="mean"))

print("== headline (own positions left out)")
for line in compared.headline():
    print("  " + line)
for instrument, by_predictor in compared.comparisons.items():
    for name, comparison in by_predictor.items():
        print(f"== {name} vs {instrument}")
        for line in comparison.verdicts:
            print("  " + line)

# Per sample, per layer: where the theory and each instrument disagree (own positions out).
T = sources.predicted.shape[-1] - 1
others = ~np.eye(T + 1, T, dtype=bool)
pred = sources.predicted[..., :T] & others  # data positions only
for instrument, obs in sources.instruments.items():
    observed = obs.per_sample & others  # [L+1, n, T+1, T]
    for layer in range(pred.shape[0]):
        violations = np.logical_and(observed[layer], ~pred[layer]).sum()
        omissions = np.logical_and(pred[layer], ~observed[layer]).sum()
        print(
            f"{instrument}, layer {layer}: {violations} violations, {omissions} omissions "
            f"over {pred.shape[1]} samples"
        )
print("Observed is not the same as used.")
