"""Batched ensembles and compiled steps against runs trained alone by ``train()``.

In float64 an ensemble member equals its single run to 1e-9: the ensemble does the same
arithmetic, only summed in another order. In float32 the weights agree to 1e-5 except the
key biases ``b_K``: a softmax is invariant to adding the same number to every score, so
their true gradient is zero and AdamW turns float rounding into steps of size lr. The
predictions, which do not depend on ``b_K``, agree to 1e-4.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import NonFiniteLossError, TrainConfig, TrainingError
from infoprobe.train.ensemble import EnsembleError, train_ensemble
from infoprobe.train.loop import train
from infoprobe.train.threads import TrainingThreads, free_cores

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = make_task("intrinsic-dim", D=2, T=8)
MODEL = ModelConfig(d_in=4, n_ctx=8, d_model=16, heads=(2, 2), d_mlp=32, d_readout=16)
BASE = TrainConfig(steps=120, batch_size=64, n_val=256, n_test=256, eval_every=40, warmup=10)
EXACT = replace(BASE, dtype="float64")
"""For the bookkeeping tests: float64, where members equal single runs to 1e-9."""


def probe_inputs(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.as_tensor(TASK.sample(256, np.random.default_rng(99))[0], dtype=dtype)


def gauge_free(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights without the key biases (zero true gradient: see the module docstring)."""
    return {k: v for k, v in state.items() if not k.endswith("attn.b_K")}


def assert_same_run(single, member, *, weights: float, preds: float, dtype=torch.float32):
    a, b = single.model.state_dict(), member.model.state_dict()
    if dtype == torch.float32:
        a, b = gauge_free(a), gauge_free(b)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(
            b[name], a[name], atol=weights, rtol=0, msg=lambda m, name=name: f"{name}: {m}"
        )
    x = probe_inputs(dtype)
    with torch.no_grad():
        torch.testing.assert_close(member.model(x), single.model(x), atol=preds, rtol=0)
    assert member.best_step == single.best_step
    assert member.stopped == single.stopped
    assert [h["step"] for h in member.history] == [h["step"] for h in single.history]
    for h1, h2 in zip(single.history, member.history, strict=True):
        assert h2["lr"] == pytest.approx(h1["lr"], rel=1e-12)
        assert h2["val_nmse"] == pytest.approx(h1["val_nmse"], rel=10 * preds)
    assert member.test_nmse == pytest.approx(single.test_nmse, rel=10 * preds)


# Members that differ in every per-member field: seed, lr, weight decay, warm-up, clipping,
# steps, patience and the model's init_gain.
MEMBERS = [
    (MODEL, BASE),
    (MODEL, replace(BASE, seed=1)),
    (MODEL, replace(BASE, lr=3e-3, weight_decay=0.0, warmup=0)),
    (MODEL, replace(BASE, seed=2, grad_clip=0.0, steps=80)),
    (replace(MODEL, init_gain=0.5), replace(BASE, seed=3)),
]


@pytest.mark.parametrize(
    ("dtype", "weights", "preds"),
    [("float64", 1e-9, 1e-9), ("float32", 1e-5, 1e-4)],
)
def test_members_equal_single_runs(dtype, weights, preds):
    models = [m for m, _ in MEMBERS]
    cfgs = [replace(c, dtype=dtype) for _, c in MEMBERS]
    results = train_ensemble(TASK, models, cfgs, progress=False)
    for model_cfg, cfg, member in zip(models, cfgs, results, strict=True):
        single = train(TASK, model_cfg, cfg, progress=False)
        assert_same_run(single, member, weights=weights, preds=preds, dtype=getattr(torch, dtype))


def test_early_stopping_and_fixed_training_set_per_member():
    cfgs = [
        replace(EXACT, steps=300, eval_every=10, patience=1, n_train=128, seed=s) for s in (0, 1)
    ] + [replace(EXACT, steps=300, eval_every=10, n_train=128, seed=4)]
    results = train_ensemble(TASK, MODEL, cfgs, progress=False)
    stopped = [r.stopped for r in results]
    assert any(s.startswith("early stopping") for s in stopped)
    assert stopped[2] == "completed"
    for cfg, member in zip(cfgs, results, strict=True):
        single = train(TASK, MODEL, cfg, progress=False)
        assert_same_run(single, member, weights=1e-9, preds=1e-9, dtype=torch.float64)


def test_a_diverging_member_stops_alone_with_its_last_good_state():
    diverging = replace(EXACT, seed=7, lr=1e300, warmup=0, grad_clip=0.0)
    cfgs = [EXACT, diverging, replace(EXACT, seed=1)]
    seen = []
    results = train_ensemble(
        TASK, MODEL, cfgs, progress=False, on_member_done=lambda m, r: seen.append(m)
    )
    with pytest.raises(NonFiniteLossError) as single:
        train(TASK, MODEL, diverging, progress=False)
    bad = results[1]
    assert bad.stopped == single.value.result.stopped
    assert bad.stopped.startswith("non-finite loss at step")
    assert seen[0] == 1 and sorted(seen) == [0, 1, 2]
    # its last good state: the initial weights, as train() keeps them
    torch.testing.assert_close(
        bad.model.state_dict(), single.value.result.model.state_dict(), atol=0, rtol=0
    )
    for m in (0, 2):
        single = train(TASK, MODEL, cfgs[m], progress=False)
        assert_same_run(single, results[m], weights=1e-9, preds=1e-9, dtype=torch.float64)


@pytest.mark.parametrize(
    ("models", "cfgs", "message"),
    [
        ([], [], "M = 0"),
        ([MODEL, MODEL], [BASE, BASE], "duplicate seed 0"),
        ([MODEL, replace(MODEL, heads=(1, 2))], [BASE, replace(BASE, seed=1)], "heads"),
        ([MODEL, MODEL], [BASE, replace(BASE, seed=1, batch_size=32)], "batch_size"),
        ([MODEL], [BASE, replace(BASE, seed=1)], "one model config per member"),
    ],
)
def test_members_that_cannot_form_a_group_are_refused(models, cfgs, message):
    with pytest.raises(EnsembleError, match=message):
        train_ensemble(TASK, models, cfgs, progress=False)


def test_compiled_steps_match_eager():
    cfg = replace(BASE, steps=30, eval_every=10)
    eager = train(TASK, MODEL, cfg, progress=False)
    single = train(TASK, MODEL, replace(cfg, compile=True), progress=False)
    assert_same_run(eager, single, weights=1e-5, preds=1e-4)
    group = train_ensemble(
        TASK, MODEL, [replace(cfg, compile=True, seed=s) for s in (0, 1)], progress=False
    )
    assert_same_run(eager, group[0], weights=1e-5, preds=1e-4)


def test_a_platform_that_cannot_compile_falls_back_to_eager(monkeypatch):
    def broken(fn, *args, **kwargs):
        def call(*a, **k):
            raise RuntimeError("no C++ compiler found")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    cfg = replace(BASE, steps=20, eval_every=10)
    eager = train(TASK, MODEL, cfg, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallback = train(TASK, MODEL, replace(cfg, compile=True), progress=False)
        group = train_ensemble(TASK, MODEL, [replace(cfg, compile=True)], progress=False)
    messages = [str(w.message) for w in caught]
    assert sum("no C++ compiler found" in m for m in messages) == 2
    torch.testing.assert_close(
        fallback.model.state_dict(), eager.model.state_dict(), atol=0, rtol=0
    )
    assert_same_run(eager, group[0], weights=1e-5, preds=1e-4)


@pytest.fixture
def machine(monkeypatch):
    """A machine of 4 cores whose 1-minute load average the test sets."""
    state = {"load": 0.0}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (state["load"], 0.0, 0.0))
    return state


@pytest.mark.parametrize(
    ("load", "own", "free"),
    [(0.0, 0.0, 4), (1.4, 0.0, 3), (1.6, 0.0, 2), (9.0, 0.0, 1), (4.0, 4.0, 4), (5.0, 2.0, 1)],
)
def test_free_cores_are_the_affinity_set_less_the_load_of_other_work(machine, load, own, free):
    machine["load"] = load
    assert free_cores(own) == free


def test_training_threads_follow_the_free_cores_and_restore_the_callers(machine, monkeypatch):
    torch.set_num_threads(1)
    machine["load"] = 1.0
    threads = TrainingThreads("auto")
    assert torch.get_num_threads() == 3
    # other work starts: 2 more busy cores than this process's own use
    clock = iter([10.0, 20.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(time, "process_time", lambda: 0.0)  # this process used no CPU
    threads.wall, threads.cpu = 0.0, 0.0
    machine["load"] = 3.0
    threads.check()
    assert torch.get_num_threads() == 1
    threads.close()
    assert torch.get_num_threads() == 1
    fixed = TrainingThreads(2)
    assert torch.get_num_threads() == 2
    fixed.check()  # a fixed count never changes
    assert torch.get_num_threads() == 2
    fixed.close()
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", [0, -1, "all", 1.5, True])
def test_a_bad_thread_count_is_refused(bad):
    with pytest.raises(TrainingError, match="threads must be"):
        TrainingThreads(bad)


def test_training_restores_the_thread_count_when_a_run_diverges():
    torch.set_num_threads(1)
    diverging = replace(EXACT, steps=20, lr=1e300, warmup=0, grad_clip=0.0)
    with pytest.raises(NonFiniteLossError):
        train(TASK, MODEL, diverging, progress=False, threads=2)
    assert torch.get_num_threads() == 1
    train_ensemble(TASK, MODEL, [replace(diverging, steps=5)], progress=False, threads=2)
    assert torch.get_num_threads() == 1
