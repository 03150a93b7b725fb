"""The cost-law fit: planted exponents recovered, intervals at their nominal coverage,
the exclusion rule, and bad records refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from test_bad_input import assert_refused, run_command

from infoprobe.rates import (
    DID_NOT_TRAIN_NMSE,
    RateError,
    RateRecord,
    fit_rates,
    fit_slope,
    load_records,
    parameter_counts,
    records_file,
    slope_ratio,
)

WIDTHS = (16, 64, 256, 1024)


def planted(
    slope: float,
    rng: np.random.Generator,
    *,
    seeds: int = 3,
    noise: float = 0.2,
    arch: str = "(2,2)",
    alpha: float | None = 1.0,
    intercept: float = 1.0,
) -> list[RateRecord]:
    """Records with log NMSE = intercept + slope log P + N(0, noise^2), P = 50 w."""
    out = []
    for w in WIDTHS:
        for s in range(seeds):
            p = 50 * w
            log_nmse = intercept + slope * np.log(p) + noise * rng.standard_normal()
            out.append(RateRecord("t", 32, arch, w, s, p, float(np.exp(log_nmse)), alpha))
    return out


def test_fit_equals_an_independent_least_squares_line():
    records = planted(-0.4, np.random.default_rng(0))
    fit = fit_slope(records)
    x = np.log([r.n_params for r in records])
    y = np.log([r.nmse for r in records])
    slope, intercept = np.polyfit(x, y, 1)
    assert fit.slope == pytest.approx(slope, rel=1e-10)
    assert fit.intercept == pytest.approx(intercept, rel=1e-10)
    # the classical interval: b ± t se(b), se from the residuals (scipy's linregress)
    reg = stats.linregress(x, y)
    half = stats.t(len(x) - 2).ppf(0.975) * reg.stderr
    assert (fit.low, fit.high) == pytest.approx((slope - half, slope + half), rel=1e-9)
    assert fit.predicted_slope == -2.0  # alpha 1, NMSE ~ eps^2


def test_planted_exponent_recovered_and_t_interval_covers_at_its_nominal_rate():
    rng = np.random.default_rng(1)
    true = -0.5
    draws = 400
    covered = sum(fit_slope(planted(true, rng)).covers(true) for _ in range(draws))
    # 95 % nominal: a binomial(400, 0.95) count lies in [368, 392] with prob > 0.999
    assert 368 <= covered <= 392
    big = fit_slope(planted(true, rng, seeds=50, noise=0.05))
    assert big.slope == pytest.approx(true, abs=0.01)


def test_seed_bootstrap_covers_near_nominal_with_many_seeds():
    rng = np.random.default_rng(2)
    true = -0.3
    covered = [
        fit_slope(planted(true, rng, seeds=10), interval="bootstrap", seed=i).covers(true)
        for i in range(150)
    ]
    assert 0.85 <= np.mean(covered) <= 0.99


def test_bootstrap_needs_enough_seeds():
    with pytest.raises(RateError, match="needs >= 5 seeds, got 3"):
        fit_slope(planted(-0.3, np.random.default_rng(0)), interval="bootstrap")


def test_slope_ratio_against_the_alpha_ratio():
    rng = np.random.default_rng(3)
    ok = 0
    for _ in range(200):
        fast = fit_slope(planted(-0.6, rng, alpha=1.0))
        slow = fit_slope(planted(-0.2, rng, arch="(1,2)", alpha=3.0))
        r = slope_ratio(slow, fast)
        assert r.ratio == pytest.approx(slow.slope / fast.slope)
        assert r.predicted == pytest.approx(1 / 3)
        ok += r.low <= 1 / 3 <= r.high
    assert 0.88 <= ok / 200 <= 0.99


def test_fit_rates_pairs_each_architecture_with_the_smallest_alpha():
    rng = np.random.default_rng(4)
    records = planted(-0.2, rng, arch="(1,2)", alpha=3.0) + planted(-0.6, rng, alpha=1.0)
    table = fit_rates(records)
    assert [f.arch for f in table.fits] == ["(1,2)", "(2,2)"]
    (ratio,) = table.ratios
    assert (ratio.arch, ratio.reference) == ("(1,2)", "(2,2)")


def test_exclusion_rule_drops_and_counts_runs_that_did_not_train():
    rng = np.random.default_rng(5)
    clean = planted(-0.4, rng)
    bad = [
        RateRecord("t", 32, "(2,2)", 64, 7, 3200, DID_NOT_TRAIN_NMSE, 1.0),
        RateRecord("t", 32, "(2,2)", 256, 8, 12800, 0.99, 1.0),
        RateRecord("t", 32, "(2,2)", 16, 9, 800, float("nan"), 1.0),
        RateRecord("t", 32, "(2,2)", 16, 10, 800, 0.01, 1.0, diverged=True),
    ]
    fit = fit_slope(clean + bad)
    assert fit.excluded == {"did not train": 2, "diverged": 2}
    assert fit.n_runs == len(clean)
    assert fit.slope == pytest.approx(fit_slope(clean).slope)
    # just under the threshold is kept
    kept = fit_slope([*clean, RateRecord("t", 32, "(2,2)", 64, 11, 3200, 0.8999, 1.0)])
    assert kept.n_runs == len(clean) + 1


def test_fewer_than_three_widths_refused():
    records = [r for r in planted(-0.4, np.random.default_rng(6)) if r.width in (16, 64)]
    with pytest.raises(RateError, match=r"needs runs at >= 3 parameter counts, got 2"):
        fit_slope(records)
    # exclusion can bring a group below three widths: said with the count
    rng = np.random.default_rng(6)
    records = [r for r in planted(-0.4, rng) if r.width != 1024]
    records += [RateRecord("t", 32, "(2,2)", 1024, 0, 51200, 0.95, 1.0)]
    with pytest.raises(RateError, match=r"after excluding 1 run"):
        fit_slope(records[:6] + records[-1:])


def test_parameter_counts_match_the_layers_they_name():
    from infoprobe.model import ModelConfig

    E, w, r = 8, 24, 12
    cfg = ModelConfig(d_in=3, n_ctx=5, d_model=E, heads=(1, 1), d_mlp=w, d_readout=r)
    counts = parameter_counts(cfg)
    ffn = E * w + w + w * E + E  # W_in, b_in, W_out, b_out
    readout = E * r + r + r * 1 + 1
    assert counts["decoding"] == ffn + readout
    assert counts["ffn"] == 2 * ffn
    assert counts["total"] > counts["ffn"] + readout


# ---- records files -----------------------------------------------------------------------
def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(json.dumps(content))
    return path


def test_records_file_round_trip(tmp_path):
    records = planted(-0.4, np.random.default_rng(7))
    path = write(tmp_path, "r.json", records_file(records))
    assert load_records([path]) == records


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"nmse": 0.0}, "field 'nmse': expected > 0 \\(NaN: diverged\\)"),
        ({"nmse": -0.1}, "field 'nmse': expected > 0 \\(NaN: diverged\\)"),
        ({"nmse": None}, "field .nmse. is missing: width 64 seed 0 was not trained"),
        ({"width": "64"}, "field 'width': expected int"),
        ({"n_params": 0}, "field 'n_params': expected >= 1"),
        ({"alpha": 0}, "field 'alpha': expected > 0"),
    ],
)
def test_bad_record_refused_by_name(tmp_path, edit, message):
    content = records_file(planted(-0.4, np.random.default_rng(8)))
    content["records"][3].update(edit)
    path = write(tmp_path, "r.json", content)
    with pytest.raises(RateError, match=rf"r.json: records\[3\]: {message}"):
        load_records([path])


def test_mixed_tasks_in_one_fit_refused(tmp_path):
    """Two files that put different tasks under one (task, T, arch): their alphas differ."""
    rng = np.random.default_rng(9)
    a = write(tmp_path, "a.json", records_file(planted(-0.4, rng, alpha=1.0)))
    other = [r.__class__(**{**r.__dict__, "seed": r.seed + 10, "alpha": 3.0})
             for r in planted(-0.4, rng)]  # fmt: skip
    b = write(tmp_path, "b.json", records_file(other))
    with pytest.raises(RateError, match="records disagree on alpha"):
        fit_rates(load_records([a, b]))


def test_the_same_run_twice_refused(tmp_path):
    content = records_file(planted(-0.4, np.random.default_rng(10)))
    a = write(tmp_path, "a.json", content)
    b = write(tmp_path, "b.json", content)
    with pytest.raises(RateError, match="the same run appears more than once"):
        load_records([a, b])


# ---- the command -------------------------------------------------------------------------
def test_rates_command_prints_the_fit_and_writes_figures(monkeypatch, capsys, tmp_path):
    rng = np.random.default_rng(11)
    records = planted(-0.6, rng, alpha=1.0) + planted(-0.2, rng, arch="(1,2)", alpha=3.0)
    path = write(tmp_path, "r.json", records_file(records))
    out = tmp_path / "fig"
    assert run_command(monkeypatch, "rates", [str(path), "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    x = np.log([r.n_params for r in records if r.arch == "(1,2)"])
    y = np.log([r.nmse for r in records if r.arch == "(1,2)"])
    (slow,) = [f for f in printed["fits"] if f["arch"] == "(1,2)"]
    assert slow["slope"] == pytest.approx(np.polyfit(x, y, 1)[0])
    assert slow["predicted_slope"] == pytest.approx(-2 / 3)
    assert printed["ratios"][0]["predicted"] == pytest.approx(1 / 3)
    assert json.loads((out / "summary.json").read_text())["format"] == "infoprobe.rates"
    assert (out / "rates_t_T32.png").read_bytes()[:4] == b"\x89PNG"
    # the same folder again: refused without --overwrite, replaced with it
    assert run_command(monkeypatch, "rates", [str(path), "--out", str(out)]) == 2
    assert run_command(monkeypatch, "rates", [str(path), "--out", str(out), "--overwrite"]) == 0


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda c: c["records"][0].update(nmse=0), ["records[0]", "'nmse'", "> 0"]),
        (lambda c: c["records"][1].update(nmse=None), ["records[1]", "not trained"]),
        (
            lambda c: c.update(records=[r for r in c["records"] if r["width"] <= 64]),
            [">= 3 parameter counts, got 2"],
        ),
        (lambda c: c["records"][2].update(alpha=7.0), ["disagree on alpha"]),
        (lambda c: c.update(format="infoprobe.other"), ["'format'", "infoprobe.rates.records"]),
    ],
)
def test_rates_command_refuses_bad_records(monkeypatch, capsys, tmp_path, edit, words):
    content = records_file(planted(-0.4, np.random.default_rng(12)))
    edit(content)
    path = write(tmp_path, "r.json", content)
    argv = [str(path), "--out", str(tmp_path / "fig")]
    assert_refused(monkeypatch, capsys, tmp_path, "rates", argv, words)


def test_cost_law_checks_fit_the_sweeps_own_runs(tmp_path):
    """A tiny cost-law sweep (aggregate-decode T0 = 4 and 6, three widths, one seed, six
    steps): no run trains, so the exclusion rule leaves nothing to fit and the check is
    not measurable, never passed. With NMSE planted in the same results, the checks'
    slope ratio equals the ratio of two independent least-squares slopes over the NMSE
    and the decoding parameters counted from each model's own weights."""
    import copy

    from test_reproduce import serial, tiny_profile

    from infoprobe.reproduce import reproduce
    from infoprobe.reproduce.checks import slope_ratios_cover, slope_ratios_narrow

    prof = tiny_profile("cost-law", points=range(6), seeds=1)
    rep = reproduce("cost-law", profile=prof, backend=serial(), out=tmp_path, log=None)
    configs = rep.results["configs"]
    passed, detail = slope_ratios_cover(configs, where={"task": "aggregate-decode"})
    assert passed is None and "excluding 3 run(s) {'did not train': 3}" in detail
    assert all(c["passed"] is None for c in rep.results["checks"])
    assert "rates: no fit yet (" in rep.summary()
    assert "Fitted rates (infoprobe rates)" in (tmp_path / "report.html").read_text()

    planted = copy.deepcopy(configs)
    rng = np.random.default_rng(13)
    slopes = {}
    for series, slope in (("T0=4", -0.5), ("T0=6", -0.2)):
        mine = [c for c in planted if c["series"] == series]
        x = [np.log(parameter_counts(p.model_config())["decoding"])
             for p in prof.points if p.series == series]  # fmt: skip
        for c, log_p in zip(mine, x, strict=True):
            c["runs"][0]["val_nmse"] = float(np.exp(slope * log_p + 0.05 * rng.standard_normal()))
        y = [np.log(c["runs"][0]["val_nmse"]) for c in mine]
        slopes[series] = np.polyfit(x, y, 1)[0]
    passed, detail = slope_ratios_cover(planted, where={"task": "aggregate-decode"})
    assert passed in (True, False)
    assert f"slope ratio {slopes['T0=6'] / slopes['T0=4']:.3g} [" in detail
    assert "(alpha ratio 0.5)" in detail  # alpha 1 at T0 = 4, 2 at T0 = 6
    low, high = (float(v) for v in detail.split(" [", 1)[1].split("]", 1)[0].split(", "))
    for bound in (0.5 * (high - low), 2.0 * (high - low)):
        passed, said = slope_ratios_narrow(planted, where={"task": "aggregate-decode"},
                                           width=bound)  # fmt: skip
        assert passed is (high - low <= bound)
        printed = float(said.split("T0=6/T0=4 ", 1)[1].split(" (bound", 1)[0])
        assert printed == pytest.approx(high - low, rel=0.02) and f"(bound {bound:g})" in said


def test_the_documented_records_file_reads(tmp_path):
    """The example in docs/rates.md is a valid records file, read field by field."""
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "rates.md").read_text()
    block = doc.split("```json\n", 1)[1].split("```", 1)[0]
    (tmp_path / "r.json").write_text(block)
    first, second = load_records([tmp_path / "r.json"])
    assert (first.task, first.T, first.arch, first.width, first.n_params) == (
        "intrinsic-dim D=2 d=4",
        32,
        "(1,2)",
        64,
        6369,
    )
    assert second.n_params_total == 29697 and second.alpha == 3.0


def test_an_interval_does_not_depend_on_the_other_fits_beside_it():
    rng = np.random.default_rng(14)
    fast, slow = planted(-0.6, rng, alpha=1.0), planted(-0.2, rng, arch="(1,2)", alpha=3.0)
    other = [RateRecord("u", 8, "a", r.width, r.seed, r.n_params, r.nmse, 1.0) for r in fast]
    alone = fit_rates(slow + fast).ratios[0]
    beside = fit_rates(other + slow + fast).ratios[0]
    assert (alone.low, alone.high) == (beside.low, beside.high)
