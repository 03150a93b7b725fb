"""The command line keeps freed memory in the process: a freed batch is reused, not
returned to the kernel and faulted back in by the next one."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
import numpy as np
from infoprobe.base.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
start = resident()
batch = np.ones(48 * 2**20 // 8)  # 48 MiB, written to: above glibc's largest mmap threshold
del batch
freed = resident()
batch = np.ones(48 * 2**20 // 8)  # the next batch
again = resident()
print(freed - start, again - start)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_batch_stays_in_the_process_and_the_next_one_reuses_it():
    def resident_growth(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                             text=True, check=True)  # fmt: skip
        freed, again = map(int, out.stdout.split())
        return freed, again

    batch = 48 * 2**20
    freed, again = resident_growth("default")
    assert freed < batch / 4  # glibc gave the batch back to the kernel
    freed, again = resident_growth("keep")
    assert freed > batch * 3 / 4  # kept after it was freed
    assert again < freed + batch / 4  # and the next batch is served from it


def test_the_command_line_asks_for_it(monkeypatch):
    import infoprobe.cli as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1))
    argv = ["predict", "--task", "intrinsic-dim", "--D", "2", "--T", "8", "--heads", "2,2"]
    assert cli.main(argv) == 0
    assert calls == [1]
