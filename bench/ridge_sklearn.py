"""All-probes ridge vs a per-probe loop of sklearn ``Ridge(alpha)`` (target: >= 20x faster).

The baseline fits ``Ridge(alpha).fit`` + ``predict`` + ``r2_score`` per (layer, token,
position) probe on the same train/test rows; it is timed on >= 100 probes and
extrapolated to all probes. The batched path streams the states once, solves every probe
with one eigendecomposition per cell, and scores the test split in closed form. The
timed probes must agree in test R² within 1e-4.
"""

from __future__ import annotations

import time

import numpy as np
from ridge_workload import make_workload, median_time, print_environment
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score

from infoprobe.probes.linear import fit_linear_probes
from infoprobe.probes.split import TEST, TRAIN

ALPHA = 1.0
TIMED_CELLS = (0, 20, 40, 65)  # 4 cells x 32 positions = 128 probes


def main() -> None:
    print_environment()
    work = make_workload()
    T = work.x.shape[1]
    print(
        f"workload: N={len(work.x)}, cells={work.n_cells}, E={work.states.shape[2]}, "
        f"T={T}, d={work.x.shape[2]}, probes={work.n_probes}"
    )

    def batched():
        return fit_linear_probes(
            work.source(),
            work.targets(),
            work.split,
            alphas=ALPHA,
            shuffle_seed=None,
            second_pass=False,
            progress=False,
        )

    t_batched = median_time(batched)
    fit = batched()

    train, test = work.split == TRAIN, work.split == TEST
    per_probe, delta = [], []
    for c in TIMED_CELLS:
        for s in range(T):
            start = time.perf_counter()
            model = Ridge(alpha=ALPHA).fit(work.states[train, c], work.x[train, s])
            pred = model.predict(work.states[test, c])
            r2 = r2_score(work.x[test, s], pred, multioutput="variance_weighted")
            per_probe.append(time.perf_counter() - start)
            delta.append(abs(r2 - fit.r2[c, s]))
    t_loop = float(np.median(per_probe)) * work.n_probes
    print(
        f"sklearn Ridge loop: {len(per_probe)} probes timed, median "
        f"{1e3 * np.median(per_probe):.1f} ms/probe -> {t_loop:.1f} s for {work.n_probes}"
    )
    print(f"batched all-probes ridge: {t_batched:.2f} s (median of 3)")
    print(f"max |dR2| on the timed probes: {max(delta):.2e} (gate <= 1e-4)")
    ratio = t_loop / t_batched
    print(f"ratio: {ratio:.1f}x (gate >= 20x)")


if __name__ == "__main__":
    main()
