"""Achieved GFLOP/s of the all-probes ridge pass vs a measured float32 matmul peak (>= 0.3).

FLOP_min per cell = N_tr·E² (SYRK Gram of the training rows) + 2·N·E·K (cross products of
all rows) + E³/3 + 2·E²·K (factorisation and solve), K = T·d target columns; the
efficiency is FLOP_min · cells / (t · P_peak), with P_peak the best-of-5 float32
``torch.matmul`` rate on 2048² matrices measured in the same run (research/performance.md,
benchmark B4).
"""

from __future__ import annotations

from ridge_workload import make_workload, matmul_peak_gflops, median_time, print_environment

from infoprobe.probes.linear import fit_linear_probes
from infoprobe.probes.split import TRAIN


def main() -> None:
    print_environment()
    work = make_workload()
    n, cells, E = work.states.shape
    K = work.x.shape[1] * work.x.shape[2]
    n_train = int((work.split == TRAIN).sum())
    flop = cells * (n_train * E**2 + 2 * n * E * K + E**3 / 3 + 2 * E**2 * K)

    def run():
        return fit_linear_probes(
            work.source(),
            work.targets(),
            work.split,
            alphas=1.0,
            shuffle_seed=None,
            second_pass=False,
            progress=False,
        )

    peak_before = matmul_peak_gflops()
    t = median_time(run)
    peak = max(peak_before, matmul_peak_gflops())
    achieved = flop / t / 1e9
    print(f"FLOP_min {flop / 1e9:.1f} GFLOP in {t:.2f} s (median of 3) = {achieved:.1f} GFLOP/s")
    print(f"float32 matmul peak (2048², best of 5, before and after): {peak:.1f} GFLOP/s")
    print(f"ratio: {achieved / peak:.2f} (gate >= 0.3)")


if __name__ == "__main__":
    main()
