"""All-probes ridge with a λ path vs a per-probe loop of sklearn ``RidgeCV`` (gate >= 100x).

Both search the same 13-value grid logspace(-2, 4). ``RidgeCV`` picks λ per probe by
efficient leave-one-out on the training rows (an SVD per probe); the batched path picks λ
per probe on the validation split from one eigendecomposition per cell and scores the test
split in closed form. RidgeCV is timed on >= 100 probes and extrapolated. Selection
agreement (held-out vs leave-one-out) is reported, not gated.
"""

from __future__ import annotations

import time

import numpy as np
from ridge_workload import make_workload, median_time, print_environment
from sklearn.linear_model import RidgeCV

from infoprobe.probes.linear import fit_linear_probes
from infoprobe.probes.split import TRAIN

GRID = tuple(float(a) for a in np.logspace(-2, 4, 13))
TIMED_CELLS = (0, 20, 40, 65)  # 4 cells x 32 positions = 128 probes


def main() -> None:
    print_environment()
    work = make_workload()
    T = work.x.shape[1]
    print(
        f"workload: N={len(work.x)}, cells={work.n_cells}, E={work.states.shape[2]}, "
        f"T={T}, d={work.x.shape[2]}, probes={work.n_probes}, |grid|={len(GRID)}"
    )

    def batched(alphas):
        return fit_linear_probes(
            work.source(),
            work.targets(),
            work.split,
            alphas=alphas,
            shuffle_seed=None,
            second_pass=False,
            progress=False,
        )

    t_path = median_time(lambda: batched(GRID))
    t_one = median_time(lambda: batched(GRID[6]))
    fit = batched(GRID)

    train = work.split == TRAIN
    per_probe, same = [], []
    for c in TIMED_CELLS:
        for s in range(T):
            start = time.perf_counter()
            model = RidgeCV(alphas=GRID).fit(work.states[train, c], work.x[train, s])
            per_probe.append(time.perf_counter() - start)
            same.append(np.isclose(model.alpha_, fit.alpha[c, s]))
    t_loop = float(np.median(per_probe)) * work.n_probes
    print(
        f"RidgeCV loop: {len(per_probe)} probes timed, median "
        f"{1e3 * np.median(per_probe):.1f} ms/probe -> {t_loop:.1f} s for {work.n_probes}"
    )
    print(
        f"batched, 13-value λ path: {t_path:.2f} s; one λ: {t_one:.2f} s "
        f"(path/one = {t_path / t_one:.2f}, target <= 1.5)"
    )
    print(f"same λ chosen as RidgeCV (validation vs LOO): {100 * np.mean(same):.0f}% of probes")
    print(f"ratio: {t_loop / t_path:.1f}x (gate >= 100x)")


if __name__ == "__main__":
    main()
