"""The probe command on this code and on an earlier commit's, side by side (engine benchmarks).

:func:`engine_table` times ``infoprobe probe CACHE --probe P --control CONTROL`` three
ways in one run, each in a fresh process with the same threads: the baseline commit's
code (a git worktree of it), this code with its CPU accelerator (the fused kernel) and
this code with the engine's own autograd step (``INFOPROBE_NATIVE=0``); it prints each
time and the largest difference between the results files. The accelerator stays only
while autograd is more than :data:`KERNEL_RULE` times slower than it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[1]
BASELINE = "f070ed9"
"""The last commit before the one engine: hand-written PyTorch steps beside the kernel."""
KERNEL_RULE = 1.3
"""The kernel stays while the engine's autograd step is more than this times slower."""
PILLARS = ("hooks", "probes", "tasks")


@contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` in a temporary folder, importable with PYTHONPATH."""
    with tempfile.TemporaryDirectory(prefix="infoprobe-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(REPO)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            for pillar in PILLARS:  # the package maps infoprobe.<pillar> to the top level
                link = tree / "infoprobe" / pillar
                if not link.exists():
                    link.symlink_to(Path("..") / pillar)
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)


def probe_seconds(
    cache: Path,
    control: Path,
    probe: str,
    out: Path,
    *,
    tree: Path | None = None,
    kernel: bool = True,
    threads: int = 1,
    device: str = "cpu",
) -> float:
    """Wall seconds of one ``infoprobe probe`` (a fresh process) with ``tree``'s code
    (None: this checkout's), the kernel on or off, on ``device``."""
    env = dict(os.environ, INFOPROBE_NATIVE="1" if kernel else "0")
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "infoprobe", "probe", str(cache), "--probe", probe,
               "--control", str(control), "--threads", str(threads), "--quiet",
               "--device", device, "--out", str(out)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, cwd=tree or REPO)
    return time.perf_counter() - start


def largest_difference(a: Path, b: Path) -> tuple[float, str]:
    """The largest absolute difference between the float datasets of two results files and
    the dataset that holds it (inf where their dataset names or shapes differ)."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names: list[str] = []
        fa.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        largest, where = 0.0, ""
        for name in names:
            if name not in fb or fa[name].shape != fb[name].shape:
                return float("inf"), name
            x, y = fa[name][()], fb[name][()]
            if x.dtype.kind != "f" or not x.size:
                continue
            if not np.array_equal(np.isfinite(x), np.isfinite(y)):
                return float("inf"), name
            both = np.isfinite(x)
            if both.any():
                gap = float(np.abs(x[both] - y[both].astype(x.dtype)).max())
                if gap > largest:
                    largest, where = gap, name
    return largest, where


def engine_table(
    cache: Path, control: Path, probe: str, threads: int, baseline: str = BASELINE
) -> dict[str, float]:
    """Time ``probe`` on the baseline's code, this code with the kernel and without it;
    print the three and the differences; return the seconds by name."""
    with tempfile.TemporaryDirectory() as tmp, baseline_tree(baseline) as tree:
        outs = {name: Path(tmp) / f"{name}.h5" for name in ("baseline", "kernel", "autograd")}
        runs = {"baseline": {"tree": tree}, "kernel": {}, "autograd": {"kernel": False}}
        times = {
            name: probe_seconds(cache, control, probe, outs[name], threads=threads, **kwargs)
            for name, kwargs in runs.items()
        }
        same, same_at = largest_difference(outs["baseline"], outs["kernel"])
        rounding, rounding_at = largest_difference(outs["kernel"], outs["autograd"])
    print(
        f"{probe} probe, {threads} thread(s): {baseline} (before the one engine) "
        f"{times['baseline']:.1f} s; the engine with the kernel {times['kernel']:.1f} s "
        f"(largest difference from {baseline}: {same:.2e} {same_at}); the engine's autograd "
        f"step {times['autograd']:.1f} s ({times['autograd'] / times['kernel']:.2f}x the "
        f"kernel; largest difference {rounding:.2e} in {rounding_at})"
    )
    keep = times["autograd"] > KERNEL_RULE * times["kernel"]
    print(
        f"  kernel: {'stays' if keep else 'may go'} (autograd / kernel "
        f"{times['autograd'] / times['kernel']:.2f}x, rule > {KERNEL_RULE}x keeps it)"
    )
    return times
