"""`infoprobe reproduce --estimate`: the queue simulation, the evaluation count, the
projection's arithmetic, and the CLI. No wall-clock time is asserted: timings are replaced
by known values where the arithmetic is checked."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from test_reproduce import tiny_profile

import infoprobe.reproduce.timing as timing_module
from infoprobe.cli import main
from infoprobe.model import ModelConfig
from infoprobe.reproduce import CLAIMS, estimate
from infoprobe.reproduce.timing import (
    PointTiming,
    evaluations,
    format_duration,
    sweep_wall_seconds,
    time_point,
)
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
from infoprobe.train.loop import train


def brute_force_wall(durations: list[float], workers: int) -> float:
    """Event-by-event simulation: at each moment a free slot takes the next run in order."""
    clock, running, queue = 0.0, [], list(durations)
    while queue or running:
        while queue and len(running) < workers:
            running.append(clock + queue.pop(0))
        clock = min(running)
        running.remove(clock)
    return clock


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_queue_simulation_matches_an_event_loop(workers):
    for durations in itertools.islice(itertools.permutations([5.0, 1.0, 3.0, 2.0, 8.0]), 0, 120, 7):
        got = sweep_wall_seconds(list(durations), workers)
        assert got == pytest.approx(brute_force_wall(list(durations), workers))
    assert sweep_wall_seconds([2.0] * 7, 3) == pytest.approx(math.ceil(7 / 3) * 2.0)
    assert sweep_wall_seconds([4.0, 1.0], 8) == pytest.approx(4.0)
    assert sweep_wall_seconds([], 2) == 0.0


@pytest.mark.parametrize("steps, eval_every", [(6, 3), (7, 3), (5, 10)])
def test_evaluation_count_is_what_training_does(steps, eval_every):
    task = make_task("intrinsic-dim", T=4, D=1, d=2)
    cfg = TrainConfig(
        steps=steps, batch_size=16, n_val=64, n_test=32, eval_every=eval_every, warmup=1
    )
    model = ModelConfig(d_in=2, n_ctx=4, d_model=8, heads=(1,), d_mlp=8, d_readout=4)
    result = train(task, model, cfg, progress=False)
    assert evaluations(cfg) == pytest.approx(len(result.history) + 32 / 64)


def test_run_time_is_steps_times_step_plus_evaluations_times_pass():
    t = PointTiming("x", step_seconds=0.01, eval_seconds=0.5, steps=1000, evaluations=4.5)
    assert t.run_seconds == pytest.approx(1000 * 0.01 + 4.5 * 0.5)


def test_estimate_projects_every_config_once_with_the_planned_queue(monkeypatch):
    prof = tiny_profile("triangle", points=(0, 1, 2), seeds=2)
    timed = []

    def fake_time_point(point, *, threads, device, steps, compile):
        timed.append((point.key, threads, device))
        step = 0.01 * (len(timed))  # distinct, known costs per config
        return PointTiming(point.label, step, 0.1, 6, 2.0)

    monkeypatch.setattr(timing_module, "time_point", fake_time_point)
    result = estimate("triangle", profile=prof, workers=2, threads=1, log=None)
    keys = [p.key for p in prof.points]
    assert [k for k, _, _ in timed] == keys  # each config timed once, in sweep order
    assert all(threads == 1 and device == "cpu" for _, threads, device in timed)
    per_run = [6 * 0.01 * (i + 1) + 2.0 * 0.1 for i in range(3)]
    in_order = [per_run[i] for i in range(3) for _ in range(2)]  # runs: config x seeds
    assert result.wall_seconds == pytest.approx(brute_force_wall(in_order, 2))
    assert result.runs == "6 runs (3 configs x 2 seeds)" and result.workers == 2
    table = result.table()
    assert all(p.label in table for p in prof.points) and "6 runs (3 configs x 2 seeds)" in table


def test_estimate_times_each_ensemble_group_once_and_counts_compilation(monkeypatch):
    prof = tiny_profile("triangle", points=(0, 1), seeds=3)
    timed = []

    def fake_time_ensemble(group, *, steps):
        timed.append([s.seed for s in group])
        return PointTiming("g", 0.05, 0.1, 6, 2.0, members=len(group), compile_seconds=7.0)

    def fake_time_point(point, *, threads, device, steps, compile):
        timed.append(["alone", compile])
        return PointTiming("p", 0.02, 0.1, 6, 2.0, compile_seconds=3.0 if compile else 0.0)

    monkeypatch.setattr(timing_module, "time_ensemble", fake_time_ensemble)
    monkeypatch.setattr(timing_module, "time_point", fake_time_point)
    result = estimate(
        "triangle", profile=prof, workers=1, threads=1, ensemble=2, compile=True, log=None
    )
    # per config: seeds (0, 1) as one ensemble, seed 2 alone; each distinct group timed once
    assert timed == [[0, 1], ["alone", True], [0, 1], ["alone", True]]
    group = 7.0 + 6 * 0.05 + 2 * 2.0 * 0.1
    alone = 3.0 + 6 * 0.02 + 2.0 * 0.1
    assert result.wall_seconds == pytest.approx(2 * (group + alone))


def test_time_ensemble_runs_real_steps():
    prof = tiny_profile("triangle", points=(0,), seeds=2)
    group = CLAIMS["triangle"].runs(prof)
    t = timing_module.time_ensemble(group, steps=2)
    assert t.members == 2 and t.step_seconds > 0 and t.eval_seconds > 0
    assert t.compile_seconds == 0.0 and t.steps == prof.points[0].train.steps


def test_time_point_runs_real_steps_and_leaves_global_threads_alone():
    import torch

    before = torch.get_num_threads()
    point = tiny_profile("fixed-positions", points=(0,)).points[0]
    t = time_point(point, threads=1, steps=2)
    assert torch.get_num_threads() == before
    assert t.step_seconds > 0 and t.eval_seconds > 0
    assert t.steps == point.train.steps and t.label == point.label


def test_format_duration_units():
    assert format_duration(90) == "1.5 min"
    assert format_duration(7200) == "2.0 h"
    assert format_duration(3 * 86400) == "3.0 days"


def test_cli_estimate_prints_the_table_and_trains_nothing(tmp_path, monkeypatch, capsys):
    claim = CLAIMS["fixed-positions"]
    small = dataclasses.replace(
        claim, profiles={**claim.profiles, "quick": tiny_profile("fixed-positions", (0,))}
    )
    monkeypatch.setitem(CLAIMS, "fixed-positions", small)
    monkeypatch.chdir(tmp_path)
    code = main(["reproduce", "fixed-positions", "--estimate", "--workers", "1", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ms/step" in out and "1 runs (1 configs x 1 seeds)" in out
    assert not any(tmp_path.iterdir())  # nothing written
