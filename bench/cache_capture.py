"""Capture overhead: forward + filtered capture into memory vs a plain forward (gate <= 1.15).

Same batch, same model, ``torch.inference_mode`` on both sides. The capture side is
``infoprobe.hooks.capture`` with the ``residual,attention`` sites (hooks on those sites
only, stop after the last one); it returns the activations as tensors in memory
(conversion and disk writes are measured by bench/cache_e2e.py). Reported for a wider
model (E = 128, 4 blocks) and for the default model; the gate applies to the default
model, where per-hook overhead weighs most. Unfiltered ``run_with_cache`` is shown for
reference. Both sides run with the allocator setting the command line uses
(``infoprobe.base.allocator.keep_freed_memory``); ``--glibc-defaults`` leaves glibc as it is.

    python bench/cache_capture.py [--batch 512] [--repeats 21] [--glibc-defaults]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from cache_common import (
    default_model,
    default_task,
    interleaved_medians,
    print_environment,
    set_threads,
)

from infoprobe.base.allocator import keep_freed_memory
from infoprobe.hooks import capture, resolve_sites

GATE = 1.15


def measure(model, x: torch.Tensor, repeats: int) -> float:
    """Median time ratio capture / forward; each timed unit loops about 0.1 s of forwards."""
    names = resolve_sites(model.hook_dict, "residual,attention")

    def plain() -> None:
        with torch.inference_mode():
            model(x)

    def unfiltered() -> None:
        with torch.inference_mode():
            model.run_with_cache(x)

    start = time.perf_counter()
    plain()
    calls = max(1, round(0.1 / (time.perf_counter() - start)))
    print(f"  ({calls} forward passes per timed unit)")

    def captured() -> None:
        capture(model, x, names)  # dropped at once, as the cache writer drops each batch

    def repeated(fn):
        def unit() -> None:
            for _ in range(calls):
                fn()

        return unit

    # Each call's output is dropped before the next call: a unit that kept every call's
    # activations alive (a list of results) made the allocator page-fault fresh memory
    # for each of them, which the cache writer, holding one batch at a time, never does.
    units = {
        "plain forward": repeated(plain),
        "filtered capture": repeated(captured),
        "run_with_cache (all)": repeated(unfiltered),
    }
    t = interleaved_medians(units, repeats=repeats, warmup=1)
    everything = t["run_with_cache (all)"] / t["plain forward"]
    print(f"  unfiltered run_with_cache / forward: {everything:.3f} (reference)")
    return t["filtered capture"] / t["plain forward"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--glibc-defaults", action="store_true", help="skip keep_freed_memory")
    args = parser.parse_args()
    set_threads(args.threads)
    print_environment()
    kept = not args.glibc_defaults and keep_freed_memory()
    print(f"allocator: {'freed memory kept (as the command line does)' if kept else 'defaults'}")
    task = default_task()
    x = torch.from_numpy(task.sample(args.batch, np.random.default_rng(0))[0])
    print(f"wide model (E=128, heads 4,4,4,4, d_mlp 512), batch {args.batch}:")
    wide = measure(default_model(task, d_model=128, heads=(4, 4, 4, 4), d_mlp=512), x, args.repeats)
    print(f"  capture / forward: {wide:.3f}")
    print(f"default model (E=32, heads 2,2, d_mlp 128), batch {args.batch}:")
    ratio = measure(default_model(task), x, args.repeats)
    print(f"ratio: {ratio:.3f}x plain forward time (gate <= {GATE})")


if __name__ == "__main__":
    main()
