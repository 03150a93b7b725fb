"""One runtime setting (device, threads, progress) on every computing command, with a
fixed default thread count so a default run is reproducible."""

import argparse
import os

import pytest

import infoprobe.pipeline.demo as demo_module
import infoprobe.train.save as train_save
from infoprobe.base.errors import UsageError
from infoprobe.base.runtime import Runtime, default_threads, free_cores
from infoprobe.cli import build_parser, main
from infoprobe.commands import COMMANDS

READ_ONLY = {"sets"}
"""Commands that read and write files but compute with no array library."""
TORCH_COMMANDS = {
    "demo", "run", "probe-checkpoint", "train", "cache", "probe", "influence", "reproduce"
}  # fmt: skip
"""Commands that compute with torch: they take --device too."""


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    return dict(sub.choices)


def test_every_computing_command_takes_threads_and_the_torch_ones_device():
    parsers = command_parsers()
    assert set(parsers) == set(COMMANDS)
    for name, parser in parsers.items():
        options = parser._option_string_actions
        if name in READ_ONLY:
            continue
        assert "--threads" in options, f"{name} has no --threads"
        assert ("--device" in options) == (name in TORCH_COMMANDS), name


@pytest.fixture
def busy_machine(monkeypatch):
    """Four cores, three of them busy with other work."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))


def test_default_threads_are_the_affinity_set_whatever_the_load(busy_machine):
    assert default_threads() == 4 and free_cores() == 1
    assert Runtime().thread_count == 4  # fixed: not the load's 1
    assert Runtime(threads="auto").thread_count == "auto"
    assert Runtime(threads=3).thread_count == 3
    for bad in (0, -1, 1.5, True, "two"):
        with pytest.raises(UsageError, match="threads"):
            Runtime(threads=bad)
    with pytest.raises(UsageError, match="device"):
        Runtime(device="gpu")


TRAIN = ["train", "--task", "intrinsic-dim", "--D", "2", "--T", "4", "--E", "8",
         "--heads", "2,2", "--steps", "2", "--quiet"]  # fmt: skip


@pytest.mark.parametrize(("given", "expected"), [([], 4), (["--threads", "auto"], "auto"),
                                                 (["--threads", "2"], 2)])  # fmt: skip
def test_train_uses_a_fixed_thread_count_unless_auto_is_asked(
    busy_machine, monkeypatch, tmp_path, given, expected
):
    seen = {}

    def fake_train(*args, threads=None, **kwargs):
        seen["threads"] = threads
        raise UsageError("stopped here")

    monkeypatch.setattr(train_save, "train_and_save", fake_train)
    assert main([*TRAIN, *given, "--out", str(tmp_path / "ck")]) == 2
    assert seen["threads"] == expected


def test_demo_takes_device_and_threads_and_one_thread_runs_the_models_in_turn(
    monkeypatch, tmp_path
):
    jobs = []

    def fake_model(job):
        jobs.append(job)
        raise UsageError("stopped here")

    monkeypatch.setattr(demo_module, "_one_model", fake_model)
    argv = ["demo", "--device", "cpu", "--threads", "1", "--out", str(tmp_path / "d")]
    assert main(argv) == 2
    (job,) = jobs  # in this process (not a pool of two): one thread cannot be shared
    assert job[-1] == Runtime(device="cpu", threads=1, progress=True)


def test_apply_sets_torch_and_blas_threads():
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    before = torch.get_num_threads()
    with threadpool_limits(limits=None):  # the BLAS limits come back on exit
        try:
            assert Runtime(threads=1).apply() == 1
            assert torch.get_num_threads() == 1
            assert all(pool["num_threads"] == 1 for pool in threadpool_info())
        finally:
            torch.set_num_threads(before)
