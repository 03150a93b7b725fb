"""`infoprobe reproduce`: claims as data, tiny pipelines, engine verdicts, resuming, backends.

Every sweep here is a tiny copy of a claim's quick profile (a few steps, small validation
sets, few grid points) made through the Python API (``Profile.override``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from html import escape as html_escape

import numpy as np
import pytest
import torch

import infoprobe.reproduce.runs as runs_module
from infoprobe.cli import main
from infoprobe.compare.scopes import CAVEAT
from infoprobe.infoflow import predict
from infoprobe.model import InfoFlowTransformer, ModelConfig
from infoprobe.reproduce import (
    CLAIMS,
    FigureSpec,
    LocalBackend,
    RunStore,
    SweepError,
    checks,
    plan_workers,
    reproduce,
    run_sweep,
)
from infoprobe.reproduce.analyses import mean_cls_attention
from infoprobe.reproduce.backends import BackendError
from infoprobe.reproduce.grid import Check, ReproduceError, group_key, group_runs
from infoprobe.reproduce.results import load_results, table_rows
from infoprobe.tasks import task_from_dict

TINY = {"steps": 6, "batch_size": 32, "n_val": 128, "n_test": 128, "eval_every": 3, "warmup": 2}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_profile(name: str, points=(0, 1), seeds: int = 1):
    prof = CLAIMS[name].profile("quick")
    chosen = [i for i in points if i < len(prof.points)]
    return prof.override(train=TINY, analyses={"n": 192}, points=chosen, seeds=seeds)


def serial(**kw):
    return LocalBackend(workers=1, threads=1, **kw)


# ---- claims as data -----------------------------------------------------------------------
def test_quick_profiles_use_the_documented_settings():
    for claim in CLAIMS.values():
        for point in claim.profile("quick").points:
            t = point.train_config(0)
            # the recipe study's recipe: intrinsic-dim D=2 (the study), the same model in
            # argmax-probe, and fixed-positions (the transfer rule, docs/model.md)
            adopted = (claim.name, point.label) in {
                ("argmax-probe", "intrinsic-dim (2,2) T=16"),
                ("fixed-positions", "1 layer, 1 head, learned positions"),
            } or (claim.name == "intrinsic-dim" and point.coords["D"] == 2)
            adopted = adopted or claim.name == "cost-law"  # the whole sweep (its docstring)
            warmup, lr_gain = (1000, (5e-3, 0.5)) if adopted else (100, None)
            assert (t.batch_size, t.weight_decay, t.warmup, t.grad_clip) == (256, 1e-2, warmup, 1.0)
            if lr_gain:
                assert (t.lr, point.model_config().init_gain) == lr_gain
            assert t.n_train is None  # fresh samples every step
            m = point.model_config()
            assert not m.layer_norm and m.d_head is None  # n = E / h
    id_points = {p.label: p for p in CLAIMS["intrinsic-dim"].profile("quick").points}
    d2, d3 = id_points["(2,2) D=2"], id_points["(3,3) D=3"]
    assert (d2.build_task().T, d2.model_config().d_model) == (16, 32)
    assert (d2.train_config(0).lr, d2.train_config(0).steps) == (5e-3, 10_000)
    assert d2.model_config().init_gain == 0.5 and d3.model_config().init_gain == 1.0
    assert (d3.model_config().d_model, d3.train_config(0).lr) == (48, 1e-3)
    tri = CLAIMS["triangle"].profile("quick").points[0]
    assert tri.model_config().heads == (2, 2) and tri.model_config().d_model == 24
    assert tri.train_config(0).steps == 3_000


def test_every_profile_builds_and_states_its_departures():
    for claim in CLAIMS.values():
        extra = {
            "intrinsic-dim": {"headline", "headline-d34"},
            "cost-law": {"separation-pilot", "separation"},
        }.get(claim.name, set())
        assert set(claim.profiles) == {"quick", "paper"} | extra
        for prof in claim.profiles.values():
            specs = claim.runs(prof)
            assert len(specs) == sum(p.seeds or prof.seeds for p in prof.points)
            assert all((p.seeds or prof.seeds) >= 2 for p in prof.points)  # best over >= 2
            assert len({s.run_id for s in specs}) == len(specs)
            for point in prof.points:
                task, cfg = point.build_task(), point.model_config()
                assert (cfg.n_ctx, cfg.d_in, cfg.d_out) == (task.T, task.d, task.d_out)
            for lr in {p.train_config(0).lr for p in prof.points} - {1e-3}:
                said = f"lr {lr:.0e}".replace("e-0", "e-")  # 2e-3 -> "lr 2e-3"
                assert any(said in d for d in prof.departures), (claim.name, said)
        paper_T = max(p.build_task().T for p in claim.profile("paper").points)
        quick_T = max(p.build_task().T for p in claim.profile("quick").points)
        assert paper_T >= quick_T
        if quick_T < paper_T:
            assert any("T" in d for d in claim.profile("quick").departures), claim.name
    assert max(p.build_task().T for p in CLAIMS["intrinsic-dim"].profile("paper").points) == 64


def test_depth_separation_pairs_have_matched_parameter_counts():
    points = [p for p in CLAIMS["depth-separation"].profile("quick").points]
    matched = [p for p in points if p.coords["sweep"] == "T"]
    for T in {p.coords["T"] for p in matched}:
        counts = {
            p.series: sum(x.numel() for x in InfoFlowTransformer(p.model_config()).parameters())
            for p in matched
            if p.coords["T"] == T
        }
        one, two = counts["1 layer"], counts["2 layers"]
        assert abs(one - two) / one < 0.05


def test_run_ids_change_with_any_setting():
    point = CLAIMS["triangle"].profile("quick").points[0]
    assert point.key == dataclasses.replace(point).key
    assert point.key != point.with_train(steps=7).key
    assert (
        point.key != dataclasses.replace(point, model=dataclasses.replace(point.model, d_mlp=8)).key
    )


def test_keys_ignore_later_fields_only_at_their_earlier_value():
    """A run recorded before init_gain / intrinsic-dim's distinct / dtype existed keeps its
    key; compiling is how a run executes, not what it is, so it never enters the key."""
    import hashlib

    points = CLAIMS["intrinsic-dim"].profile("quick").points
    point = next(p for p in points if p.model_config().init_gain == 1.0)
    old_spec = point.spec()
    del old_spec["model"]["init_gain"], old_spec["task"]["params"]["distinct"]
    del old_spec["train"]["dtype"]
    assert "compile" not in old_spec["train"]
    digest = hashlib.sha256(json.dumps(old_spec, sort_keys=True).encode()).hexdigest()
    assert point.key.endswith(digest[:10])
    gain = dataclasses.replace(point, model=dataclasses.replace(point.model, init_gain=0.5))
    distinct = dataclasses.replace(point, task=dataclasses.replace(point.task, distinct=True))
    wide = point.with_train(dtype="float64")
    assert len({point.key, gain.key, distinct.key, wide.key}) == 4


def test_point_seeds_override_the_profile_and_cli_seeds_override_both():
    claim = CLAIMS["intrinsic-dim"]
    prof = claim.profile("quick")
    per_point = {}
    for spec in claim.runs(prof):
        per_point.setdefault(spec.point.label, []).append(spec.seed)
    for point in prof.points:
        expected = point.seeds or prof.seeds
        assert per_point[point.label] == list(range(expected))
    assert {len(v) for v in per_point.values()} == {4, 2}  # D=2: 4 seeds, D=3: 2
    assert len(claim.runs(prof, seeds=1)) == len(prof.points)
    assert len(claim.runs(prof.override(seeds=3))) == 3 * len(prof.points)


def test_plan_workers_never_oversubscribes():
    for cores in (1, 2, 3, 8, 16):
        for n_runs in (1, 2, 5, 40):
            workers, threads = plan_workers(n_runs, cores)
            assert workers * threads <= max(cores, 1) and workers <= n_runs
            assert workers * threads >= min(cores, n_runs)  # no idle core when runs remain
    assert plan_workers(10, 8, device="cuda") == (1, 8)
    assert plan_workers(10, 8, threads=4) == (2, 4)
    with pytest.raises(BackendError, match="workers"):
        plan_workers(3, 2, workers=0)


# ---- the analyses -------------------------------------------------------------------------
def test_cls_attention_matches_a_hand_computed_softmax():
    cfg = ModelConfig(d_in=2, n_ctx=5, d_model=8, heads=(2,), pos_encoding="learned", d_mlp=8)
    model = InfoFlowTransformer(cfg, seed=3).eval()
    x = np.random.default_rng(0).standard_normal((64, 5, 2)).astype(np.float32)
    got = mean_cls_attention(model, x)[0]  # [h, T+1]
    with torch.no_grad():
        xt = torch.as_tensor(x, dtype=torch.float64)
        emb = xt @ model.embed.W_E.double() + model.embed.b_E.double()
        cls = model.embed.cls.double().expand(64, 1, 8)
        resid = torch.cat([emb, cls], 1) + model.pos_embed.W_pos.double()
        attn = model.blocks[0].attn
        for h in range(2):
            q = resid[:, -1] @ attn.W_Q[h].double() + attn.b_Q[h].double()  # CLS query
            k = resid @ attn.W_K[h].double() + attn.b_K[h].double()
            scores = torch.einsum("bn,bkn->bk", q, k) / math.sqrt(4)
            expected = torch.softmax(scores, -1).mean(0).numpy()
            np.testing.assert_allclose(got[h], expected, atol=1e-5)


# ---- tiny pipelines of every claim --------------------------------------------------------
@pytest.mark.parametrize("name", list(CLAIMS))
def test_tiny_pipeline_writes_results_engine_verdicts_and_figures(name, tmp_path):
    seeds = 2 if name == "triangle" else 1
    prof = tiny_profile(name, seeds=seeds)
    lines: list[str] = []
    rep = reproduce(name, profile=prof, backend=serial(), out=tmp_path, log=lines.append)
    n_runs = len(prof.points) * seeds
    assert sum(" start " in ln for ln in lines) == n_runs
    assert sum(" done " in ln for ln in lines) == n_runs

    results = load_results(tmp_path / "results.json")
    assert results["n_finished"] == results["n_runs"] == n_runs
    assert results["departures"] == list(prof.departures)
    for record in results["runs"]:
        val = [h["val_nmse"] for h in record["history"]]
        assert [h["step"] for h in record["history"]] == [3, 6]
        assert record["best_val_nmse"] == min(val)
        assert record["seconds"] > 0 and np.isfinite(record["test_nmse"])
        on_disk = json.loads((tmp_path / "runs" / record["run_id"] / "record.json").read_text())
        assert on_disk == record
        assert (tmp_path / "runs" / record["run_id"] / "checkpoint" / "model.safetensors").is_file()

    rows = {r["config"]: r for r in table_rows(results)}
    printed = rep.summary()
    for config in results["configs"]:
        # The engine, called directly on the stored task and architecture.
        task = task_from_dict(config["config"]["task"])
        pred = predict(task, ModelConfig.from_dict(config["config"]["model"]))
        assert config["engine"]["verdict"] == pred.verdict
        assert config["engine"]["exponent"] == str(pred.exponent)
        assert rows[config["label"]]["InfoFlow"] == pred.verdict
        row_line = next(ln for ln in printed.splitlines() if ln.startswith(config["label"] + " "))
        assert f" {pred.verdict} " in row_line
        # Best over seeds, recomputed from the records.
        mine = [r for r in results["runs"] if r["config_key"] == config["key"]]
        assert len(mine) == seeds
        best = min(mine, key=lambda r: r["best_val_nmse"])
        assert config["best"]["val_nmse"] == best["best_val_nmse"]
        assert config["best"]["seed"] == best["seed"]

    html = (tmp_path / "report.html").read_text()
    # a rate figure is drawn only where its selection has grid points in this profile
    drawn = [
        f
        for f in CLAIMS[name].figures
        if f.kind != "rate"
        or any(all(c["coords"].get(k) == v for k, v in f.where.items()) for c in results["configs"])
    ]
    assert html.count("data:image/png;base64,") == len(drawn)
    for fig in drawn:
        assert (tmp_path / f"{fig.name}.png").read_bytes().startswith(PNG_MAGIC)
    assert (html_escape(CAVEAT) in html) == CLAIMS[name].probes_shown  # the probes' caveat
    assert len(results["checks"]) == len(prof.checks)


def test_argmax_probe_record_covers_every_head_and_rank(tmp_path):
    prof = tiny_profile("argmax-probe", points=(0,))
    results = reproduce("argmax-probe", profile=prof, backend=serial(), out=tmp_path, log=None)
    roles = results.results["runs"][0]["analyses"]["role_probe"]["roles"]
    heads = prof.points[0].model_config().heads
    expected = {(b, h, k) for b, n in enumerate(heads) for h in range(n) for k in (1, 2)}
    assert {(r["block"], r["head"], r["rank"]) for r in roles} == expected
    for role in roles:
        assert role["layer"] == role["block"] + 1
        assert role["ratio"] == pytest.approx(role["nmse"] / role["untrained_nmse"])


# ---- resuming -----------------------------------------------------------------------------
def test_resume_never_retrains_a_finished_run_and_restarts_a_half_run(tmp_path, monkeypatch):
    prof = tiny_profile("head-count", points=(0,), seeds=2)
    specs = CLAIMS["head-count"].runs(prof)
    store = RunStore(tmp_path)
    real_train = runs_module.train
    run_sweep(specs, store, serial())
    paths = [store.record_path(s.run_id) for s in specs]
    before = [(p.read_bytes(), p.stat().st_mtime_ns) for p in paths]

    def must_not_train(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(runs_module, "train", must_not_train)
    summary = run_sweep(specs, store, serial())
    assert summary.skipped == [s.run_id for s in specs] and summary.trained == []
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in paths] == before

    # A run killed after its checkpoint but before its record, with a stale temp file.
    old = json.loads(paths[1].read_text())
    paths[1].unlink()
    paths[1].with_name("record.json.tmp-99999").write_text("{half")
    calls = []

    def counting_train(*args, **kwargs):
        calls.append(args[2].seed)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(runs_module, "train", counting_train)
    summary = run_sweep(specs, store, serial())
    assert calls == [specs[1].seed] and summary.trained == [specs[1].run_id]
    assert (paths[0].read_bytes(), paths[0].stat().st_mtime_ns) == before[0]
    new = json.loads(paths[1].read_text())
    assert new["history"] == old["history"]  # the restarted run is the same run (CPU determinism)


def test_failed_run_is_reported_kept_out_and_retried(tmp_path, monkeypatch):
    prof = tiny_profile("head-count", points=(0,), seeds=2)
    real_train = runs_module.train

    def fail_seed_1(task, model_cfg, cfg, **kw):
        if cfg.seed == 1:
            raise RuntimeError("simulated crash")
        return real_train(task, model_cfg, cfg, **kw)

    monkeypatch.setattr(runs_module, "train", fail_seed_1)
    with pytest.raises(SweepError, match="simulated crash"):
        reproduce("head-count", profile=prof, backend=serial(), out=tmp_path, log=None)
    partial = load_results(tmp_path / "results.json")
    assert partial["n_finished"] == 1 and partial["configs"][0]["missing_seeds"] == [1]
    monkeypatch.setattr(runs_module, "train", real_train)
    rep = reproduce("head-count", profile=prof, backend=serial(), out=tmp_path, log=None)
    assert len(rep.sweep.trained) == 1 and len(rep.sweep.skipped) == 1
    assert rep.results["n_finished"] == 2


# ---- batched ensembles ----------------------------------------------------------------------
def test_groups_hold_only_runs_that_can_train_together():
    claim = CLAIMS["intrinsic-dim"]
    prof = claim.profile("quick").override(seeds=3)
    specs = claim.runs(prof) + claim.runs(prof, device="cpu", compile=True)[:2]
    for size in (1, 2, 3, 50):
        groups = group_runs(specs, size)
        flat = [s for g in groups for s in g]
        assert sorted(s.run_id + str(s.compile) for s in flat) == sorted(
            s.run_id + str(s.compile) for s in specs
        )  # every run exactly once
        for group in groups:
            assert 1 <= len(group) <= size
            assert len({group_key(s) for s in group}) == 1
            shapes = {(s.point.model_config().heads, s.point.model_config().d_model) for s in group}
            assert len(shapes) == 1 and len({s.compile for s in group}) == 1
        if size >= 3:  # all seeds of one config share one group
            assert all(len({s.point.key for s in g}) == 1 for g in groups)
    with pytest.raises(ReproduceError, match=">= 1"):
        group_runs(specs, 0)


def test_ensembled_sweep_equals_runs_alone_and_resumes_run_by_run(tmp_path, monkeypatch):
    prof = tiny_profile("head-count", points=(0,), seeds=3)
    prof = prof.override(train={"dtype": "float64"})
    specs = CLAIMS["head-count"].runs(prof)
    alone, grouped = RunStore(tmp_path / "alone"), RunStore(tmp_path / "grouped")
    run_sweep(specs, alone, serial())
    run_sweep(specs, grouped, serial(ensemble=3))
    for spec in specs:
        a, b = alone.load(spec.run_id), grouped.load(spec.run_id)
        assert a["best_step"] == b["best_step"]
        assert b["best_val_nmse"] == pytest.approx(a["best_val_nmse"], rel=1e-9)
        assert b["test_nmse"] == pytest.approx(a["test_nmse"], rel=1e-9)
    grouped.record_path(specs[2].run_id).unlink()
    trained = []
    real = runs_module.train_ensemble

    def spy(task, model_cfgs, cfgs, **kwargs):
        trained.append([c.seed for c in cfgs])
        return real(task, model_cfgs, cfgs, **kwargs)

    monkeypatch.setattr(runs_module, "train_ensemble", spy)
    summary = run_sweep(specs, grouped, serial(ensemble=3))
    assert summary.trained == [specs[2].run_id]
    assert trained == []  # a group of one trains alone, through train()
    run_sweep(specs, RunStore(tmp_path / "third"), serial(ensemble=2))
    assert trained == [[0, 1]]


# ---- the process pool and the command line ------------------------------------------------
def test_process_pool_gives_the_same_runs_as_serial(tmp_path):
    prof = tiny_profile("head-count", points=(0, 1))
    specs = CLAIMS["head-count"].runs(prof)
    run_sweep(specs, RunStore(tmp_path / "serial"), serial())
    pool = LocalBackend(workers=2, threads=1)
    run_sweep(specs, RunStore(tmp_path / "pool"), pool)
    for spec in specs:
        a = RunStore(tmp_path / "serial").load(spec.run_id)
        b = RunStore(tmp_path / "pool").load(spec.run_id)
        assert a["history"] == b["history"] and a["test_nmse"] == b["test_nmse"]


def test_cli_help_teaches_and_cli_resumes(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for word in (*CLAIMS, "--profile", "--backend", "--ray-address", "examples:", "lr 2e-3"):
        assert word in help_text

    claim = CLAIMS["triangle"]

    def with_checks(*checks: Check) -> None:
        tiny = tiny_profile("triangle", (0,), seeds=2)
        quick = dataclasses.replace(tiny, checks=checks)
        monkeypatch.setitem(
            CLAIMS,
            "triangle",
            dataclasses.replace(claim, profiles={**claim.profiles, "quick": quick}),
        )

    argv = ["reproduce", "triangle", "--out", str(tmp_path), "--workers", "1", "--threads", "1",
            "--no-figures"]  # fmt: skip
    # Checks with known outcomes, so each exit status is asserted exactly.
    with_checks(Check("holds by construction", lambda configs: (True, "yes")))
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(" start ") == 2 and out.count(" done ") == 2
    assert "departs from the paper" in out and "lr 2e-3" in out
    assert "[PASS] (acceptance) holds by construction: yes" in out and "[FAIL]" not in out

    with_checks(Check("fails by construction", lambda configs: (False, "no")))
    assert main(argv) == 1  # resumed: nothing retrained, the acceptance check fails
    again = capsys.readouterr().out
    assert again.count("skip ") == 2 and " start " not in again
    assert "[FAIL] (acceptance) fails by construction: no" in again and "[PASS]" not in again

    with_checks(Check("observed only", lambda configs: (False, "no"), gate=False))
    assert main(argv) == 0  # an observation never sets the exit status
    assert "[FAIL] (observed) observed only" in capsys.readouterr().out

    with_checks(Check("nothing to compare", lambda configs: (None, "not measurable: x")))
    assert main(argv) == 1  # an acceptance that cannot be measured is not a pass
    assert "[n/a ] (acceptance) nothing to compare" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "triangle", "--seeds", "0", "--out", str(tmp_path)])
    assert exit_info.value.code == 2


# ---- the gate functions on inputs with known answers ---------------------------------------
def config(series, best, seed=0, label=None, analyses=None, **coords):
    """One grid point's summary as results.json holds it (best None: no finished run)."""
    return {
        "coords": coords,
        "series": series,
        "label": label or f"{series} {coords}",
        "best": None if best is None else {"val_nmse": best, "seed": seed},
        "runs": [{"seed": seed, "analyses": analyses or {}}],
    }


@pytest.mark.parametrize(
    "configs, factor, expected",
    [
        ([config("good", 0.01, D=2), config("bad", 0.2, D=2)], 10.0, True),
        ([config("good", 0.05, D=2), config("bad", 0.2, D=2)], 10.0, False),
        ([config("good", 0.01, D=2), config("bad", 0.2, D=2), config("b2", 0.05, D=2)], 10, False),
        ([config("good", 0.01, D=2), config("bad", None, D=2)], 10.0, None),
        ([config("good", 0.01, D=2)], 10.0, None),
        ([config("good", 0.01, D=3), config("bad", 0.5, D=3)], 10.0, None),
    ],
    ids=["passes", "gap-too-small", "one-rival-too-close", "missing-run", "no-rival", "elsewhere"],
)  # fmt: skip
def test_nmse_gap_known_answers(configs, factor, expected):
    passed, detail = checks.nmse_gap(configs, where={"D": 2}, good="good", factor=factor)
    assert passed is expected, detail


@pytest.mark.parametrize(
    "values, floor, expected",
    [
        ({"a": [0.1, 0.5, 0.9]}, 0.8, True),
        ({"a": [0.1, 0.5, 0.9], "b": [0.2, 0.3, 0.85]}, 0.8, True),
        ({"a": [0.1, 0.5, 0.4]}, None, False),
        ({"a": [0.1, 0.5, 0.7]}, 0.8, False),
        ({"a": [0.1, 0.5, 0.9], "b": [0.3, 0.2, 0.9]}, None, False),
        ({"a": [0.1, None, 0.9]}, None, None),
        ({"a": [0.5]}, None, None),
        ({}, None, None),
    ],
    ids=["rises", "two-series", "falls", "below-floor", "one-series-falls", "missing-run",
         "one-point", "no-series"],
)  # fmt: skip
def test_rises_with_known_answers(values, floor, expected):
    Ts = (4, 8, 16)
    configs = [config(s, v, T=T) for s, vs in values.items() for T, v in zip(Ts, vs, strict=False)]
    passed, detail = checks.rises_with(configs, x="T", floor=floor, at=16 if floor else None)
    assert passed is expected, detail


def test_rises_with_floor_needs_a_point_at_the_floor():
    configs = [config("a", v, T=T) for T, v in ((4, 0.1), (8, 0.9))]
    passed, detail = checks.rises_with(configs, x="T", floor=0.8, at=16)
    assert passed is None and "not measurable" in detail


def attention(row):
    return {"cls_attention": {"blocks": [[row]]}}


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([[0.33, 0.34, 0.32, 0.01]], True),
        ([[0.33, 0.34, 0.32, 0.01], [0.3, 0.36, 0.3, 0.04]], True),
        ([[0.6, 0.2, 0.2, 0.0]], False),
        ([[0.33, 0.34, 0.32, 0.01], [0.6, 0.2, 0.2, 0.0]], False),
        ([], None),
    ],
    ids=["near", "two-near", "far", "one-far", "no-grid-point"],
)
def test_cls_attention_near_known_answers(rows, expected):
    configs = [config("s", 0.1, label=f"p{i}", analyses=attention(r)) for i, r in enumerate(rows)]
    passed, detail = checks.cls_attention_near(configs, positions=(0, 1, 2), target=1 / 3, tol=0.05)
    assert passed is expected, detail


def role(block, rank, ratio, head=0):
    return {
        "block": block,
        "head": head,
        "rank": rank,
        "ratio": ratio,
        "name": f"b{block}h{head}r{rank}",
    }


@pytest.mark.parametrize(
    "roles, expected",
    [
        ([role(0, 1, 0.5), role(0, 2, 0.9)], True),
        ([role(0, 1, 0.8), role(0, 2, 0.9)], False),
        ([role(0, 1, 0.5), role(0, 2, 0.8)], False),
        ([role(0, 1, 0.5), role(0, 2, 0.9), role(1, 1, 2.0)], True),
        ([role(1, 1, 0.5), role(1, 2, 0.9)], None),
        ([], None),
    ],
    ids=["passes", "rank1-high", "rank2-low", "block1-ignored", "no-block-0", "no-roles"],
)  # fmt: skip
def test_role_ratios_known_answers(roles, expected):
    configs = [config("s", 0.1, task="t", analyses={"role_probe": {"roles": roles}})]
    passed, detail = checks.role_ratios(configs, where={"task": "t"}, rank1_max=0.7, rank2_min=0.85)
    assert passed is expected, detail


@pytest.mark.parametrize(
    "points, expected",
    [
        ([("h=4", 8, 0.1), ("h=1", 8, 0.5), ("h=2", 8, 0.3)], True),
        ([("h=4", 8, 0.1), ("h=1", 8, 0.5), ("h=4", 16, 0.2), ("h=1", 16, 0.6)], True),
        ([("h=4", 8, 0.4), ("h=1", 8, 0.5), ("h=2", 8, 0.3)], False),
        ([("h=4", 8, 0.1), ("h=1", 8, 0.5), ("h=4", 16, 0.7), ("h=1", 16, 0.6)], False),
        ([("h=4", 8, 0.1), ("h=1", 8, None)], None),
        ([("h=4", 8, 0.1)], None),
        ([("h=4", 8, 0.1), ("h=1", 16, 0.5)], None),
        ([("h=4", 8, 0.1), ("h=1", 8, 0.5), ("h=4", 16, 0.2)], None),
        ([("h=1", 8, 0.5)], None),
    ],
    ids=["below-both", "below-at-every-T", "above-one", "above-at-one-T", "missing-run",
         "no-rival", "rival-elsewhere", "no-rival-at-one-T", "no-good-series"],
)  # fmt: skip
def test_series_below_known_answers(points, expected):
    configs = [config(s, v, T=T) for s, T, v in points]
    passed, detail = checks.series_below(configs, x="T", good="h=4", others=["h=1", "h=2"])
    assert passed is expected, detail
    if expected is None:
        assert "not measurable" in detail or "missing" in detail


def test_grid_points_leave_the_execution_fields_to_the_runs():
    for claim in CLAIMS.values():
        for prof in claim.profiles.values():
            for point in prof.points:
                assert (point.train.seed, point.train.device, point.train.compile) == (
                    0,
                    "cpu",
                    False,
                )
    point = CLAIMS["triangle"].profile("quick").points[0]
    cfg = point.train_config(3, "cpu", compile=True)
    assert (cfg.seed, cfg.compile) == (3, True)
    assert dataclasses.replace(cfg, seed=0, compile=False) == point.train
    with pytest.raises(ReproduceError, match="set per run"):
        dataclasses.replace(point, train=cfg)
    with pytest.raises(ReproduceError, match="unknown training field"):
        point.with_train(step=5)


def test_unguarded_script_gets_a_hint_not_a_bare_broken_pool(tmp_path):
    """Worker processes import the caller's main module: an unguarded reproduce() call in
    a script kills them; the error must say how to fix it."""
    script = tmp_path / "sweep.py"
    script.write_text(
        "from infoprobe.reproduce import CLAIMS, LocalBackend, reproduce\n"
        f"prof = CLAIMS['triangle'].profile('quick').override(train={TINY!r}, points=[0, 1])\n"
        f"reproduce('triangle', profile=prof, seeds=1, out={str(tmp_path / 'out')!r},\n"
        "          backend=LocalBackend(workers=2, threads=1), figures=False, log=None)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    raised = [line for line in done.stderr.splitlines() if line.startswith("infoprobe.")]
    assert raised and raised[-1].startswith("infoprobe.reproduce.backends.BackendError")
    assert '__name__ == "__main__"' in raised[-1]


def test_figure_specs_are_checked_where_they_are_written():
    with pytest.raises(ReproduceError, match="kind must be one of"):
        FigureSpec("f", "bars", "caption")
    with pytest.raises(ReproduceError, match="needs x"):
        FigureSpec("f", "nmse_vs", "caption")
    with pytest.raises(ReproduceError, match=r"takes no options, got \['x', 'log'\]"):
        FigureSpec("f", "cls_probe", "caption", x="T", log=False)
    with pytest.raises(ReproduceError, match="annotate must be"):
        FigureSpec("f", "nmse_vs", "caption", x="T", annotate="alpha")


def test_every_claim_figure_binds_to_its_builder():
    """Each figure's options are keyword arguments its builder takes (checked by signature)."""
    import inspect

    from infoprobe.reproduce.figures import BUILDERS

    for claim in CLAIMS.values():
        for spec in claim.figures:
            options = spec.options()
            inspect.signature(BUILDERS[spec.kind]).bind({}, **options)
            assert (spec.kind in ("nmse_vs", "rate")) == bool(options)


def test_grid_points_refuse_untyped_or_mismatched_settings():
    point = CLAIMS["triangle"].profile("quick").points[0]
    with pytest.raises(ReproduceError, match="field model must be a ModelConfig, got dict"):
        dataclasses.replace(point, model=point.model.to_dict())
    wrong_T = dataclasses.replace(point.model, n_ctx=point.task.T + 1)
    with pytest.raises(ReproduceError, match=rf"model.n_ctx is {point.task.T + 1} but task"):
        dataclasses.replace(point, model=wrong_T)


def test_load_results_refuses_other_files_and_newer_schemas_by_name(tmp_path):
    from infoprobe.reproduce.grid import ReproduceError
    from infoprobe.reproduce.results import RESULTS_FORMAT, RESULTS_SCHEMA_VERSION

    path = tmp_path / "results.json"
    cases = [
        ("[1, 2]", "expected a JSON object"),
        ("{not json", "not valid JSON"),
        (json.dumps({"format": "infoprobe.run", "schema_version": 1}), "'format'"),
        (
            json.dumps({"format": RESULTS_FORMAT, "schema_version": RESULTS_SCHEMA_VERSION + 1}),
            "schema_version",
        ),
    ]
    for text, match in cases:
        path.write_text(text)
        with pytest.raises(ReproduceError, match=match) as info:
            load_results(path)
        assert str(path) in str(info.value)
    # schema 1 kept its version in format_version and is still read
    path.write_text(json.dumps({"format": RESULTS_FORMAT, "format_version": 1, "configs": []}))
    assert load_results(path)["configs"] == []


def test_the_separation_pilot_sits_where_infoflow_separates_the_architectures():
    """At the pilot's T the engine gives (2,2) alpha 1 and (1,2) alpha 3 (T d / E - 1 with
    T 32, d 4, E 32), so the slope ratio the sweep measures is 1/3, not 1."""
    from infoprobe.infoflow import predict

    prof = CLAIMS["cost-law"].profile("separation-pilot")
    alphas = {}
    for point in prof.points:
        problem, model = point.build_task(), point.model_config()
        assert (problem.T, problem.d, model.d_model) == (32, 4, 32)
        assert model.d_mlp == model.d_readout == point.coords["width"]
        alphas[model.heads] = predict(problem, model).exponent(problem.T)
    assert alphas == {(2, 2): 1, (1, 2): 32 * 4 / 32 - 1}
    assert {p.coords["width"] for p in prof.points} == {16, 256}
    assert sum(p.seeds or prof.seeds for p in prof.points) == 8


def test_results_json_is_kept_when_only_its_time_would_change(tmp_path):
    """A resumed sweep that finished nothing new rewrites no file (studies are committed
    piece by piece: a new `created` alone is churn); any other change is written."""
    import math

    from infoprobe.base.header import make_header
    from infoprobe.reproduce.results import RESULTS_FORMAT, write_results

    results = {**make_header(RESULTS_FORMAT, 2), "configs": [{"nmse": math.nan, "n": 1}]}
    path = write_results(results, tmp_path)
    before = path.read_bytes()
    later = {**results, "created": "2099-01-01T00:00:00Z"}
    assert write_results(later, tmp_path) == path and path.read_bytes() == before
    changed = {**later, "configs": [{"nmse": 0.5, "n": 1}]}
    write_results(changed, tmp_path)
    assert json.loads(path.read_text()) == changed
