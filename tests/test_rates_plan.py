"""Sizing a sweep from its pilot (infoprobe.rates.plan): the rule's numbers by hand, and the
width it predicts against the intervals `infoprobe rates` then prints on simulated sweeps."""

import numpy as np
import pytest
from scipy import stats

from infoprobe.rates import RateRecord, fit_slope, slope_ratio
from infoprobe.rates.plan import plan_sweep, predicted_width

PARAMS = {16: 900, 32: 1800, 64: 3600, 128: 7200, 256: 14400}
DESIGNS = [(16, 256), (16, 64, 256), (16, 32, 64, 128, 256)]
SLOPES = {"(2,2)": -2.0, "(1,2)": -2.0 / 3.0}


def record(arch: str, width: int, seed: int, log_nmse: float) -> RateRecord:
    return RateRecord("intrinsic-dim D=2", 32, arch, width, seed, PARAMS[width],
                      float(np.exp(log_nmse)))  # fmt: skip


def line(arch: str, width: int) -> float:
    return 1.0 + SLOPES[arch] * np.log(PARAMS[width] / PARAMS[16]) - 3.0


def pilot(delta: float) -> list[RateRecord]:
    """Two seeds per point at +delta and -delta about the line: the slopes are exact and
    every point's spread is 2 delta^2 on 1 degree of freedom."""
    return [
        record(arch, w, seed, line(arch, w) + (delta if seed == 0 else -delta))
        for arch in SLOPES
        for w in (16, 256)
        for seed in (0, 1)
    ]


def test_the_rule_by_hand():
    delta = 0.3
    plan = plan_sweep(pilot(delta), PARAMS, DESIGNS, reference="(2,2)", arch="(1,2)")
    assert plan.sigma == pytest.approx(delta * np.sqrt(2.0)) and plan.sigma_df == 4
    assert plan.slope_ref == pytest.approx(-2.0) and plan.ratio == pytest.approx(1 / 3)
    by_hand = {}
    for design in DESIGNS:
        x = np.log([PARAMS[w] for w in design])
        for n in range(2, 13):
            se = plan.sigma / np.sqrt(n * ((x - x.mean()) ** 2).sum())
            t = stats.t.ppf(0.975, n * len(design) - 2)
            width = 2 * t * np.sqrt(se**2 + (se / 3) ** 2) / 2.0
            by_hand[(n, design)] = width
            assert predicted_width(plan.sigma, -2.0, 1 / 3, x, n) == pytest.approx(width)
    fitting = [(2 * n * len(d), -len(d), n, d) for (n, d), w in by_hand.items() if w <= 0.5]
    _, _, n, design = min(fitting)
    assert (plan.chosen.seeds, plan.chosen.widths) == (n, design)
    assert plan.chosen.width <= 0.5 and plan.chosen.runs == 2 * n * len(design)


def test_a_sweep_over_the_run_cap_gets_the_narrowest_affordable_design():
    plan = plan_sweep(pilot(0.8), PARAMS, DESIGNS, reference="(2,2)", arch="(1,2)", max_runs=12)
    affordable = [c for c in plan.candidates if c.runs <= 12]
    assert min(c.width for c in affordable) > 0.5  # the target is out of reach at 12 runs
    assert plan.chosen.width == min(c.width for c in affordable) and plan.chosen.runs <= 12
    assert "12 runs" in plan.reason


def test_a_flat_reference_has_no_denominator():
    records = pilot(0.3)
    flat = [
        RateRecord(r.task, r.T, r.arch, r.width, r.seed, r.n_params,
                   float(np.exp(-3.0 + (0.3 if r.seed else -0.3))))
        if r.arch == "(2,2)" else r
        for r in records
    ]  # fmt: skip
    plan = plan_sweep(flat, PARAMS, DESIGNS, reference="(2,2)", arch="(1,2)")
    assert plan.chosen is None and "contains 0" in plan.reason


def test_the_predicted_width_is_what_rates_then_prints():
    """Sweeps simulated at the chosen design with the pilot's sigma and slopes: the median
    width of the slope-ratio interval `infoprobe rates` computes (draws from each fit's t
    distribution) lies within 20% of the prediction."""
    delta = 0.25
    plan = plan_sweep(pilot(delta), PARAMS, DESIGNS, reference="(2,2)", arch="(1,2)")
    design, n = plan.chosen.widths, plan.chosen.seeds
    rng = np.random.default_rng(0)
    widths = []
    for _ in range(200):
        fits = {
            arch: fit_slope([
                record(arch, w, s, line(arch, w) + rng.normal(0.0, plan.sigma))
                for w in design for s in range(n)
            ])
            for arch in SLOPES
        }  # fmt: skip
        ratio = slope_ratio(fits["(1,2)"], fits["(2,2)"])
        widths.append(ratio.high - ratio.low)
    assert np.median(widths) == pytest.approx(plan.chosen.width, rel=0.2)


def test_the_separation_plan_reads_a_pilot_file_with_the_pilots_own_parameter_counts(tmp_path):
    """`separation_plan` on a records file of the pilot's eight runs: the counts it sizes
    with are those of the pilot's own models (its two widths), the slope is the pilot's."""
    import json

    from infoprobe.rates.params import parameter_counts
    from infoprobe.rates.records import records_file
    from infoprobe.reproduce.claims.cost_law import PILOT, separation_plan

    rng = np.random.default_rng(1)
    records = []
    for point in PILOT.points:
        n_params = parameter_counts(point.model_config())["decoding"]
        slope = SLOPES[point.series]
        for seed in range(2):
            log_nmse = -3.0 + slope * np.log(n_params / 1000) + rng.normal(0, 0.1)
            records.append(RateRecord("intrinsic-dim D=2 d=4", 32, point.series,
                                      point.coords["width"], seed, n_params,
                                      float(np.exp(log_nmse))))  # fmt: skip
    path = tmp_path / "pilot.json"
    path.write_text(json.dumps(records_file(records)))
    plan = separation_plan(path)
    ref = [r for r in records if r.arch == "(2,2)"]
    expected = np.polyfit(np.log([r.n_params for r in ref]), np.log([r.nmse for r in ref]), 1)[0]
    assert plan.slope_ref == pytest.approx(expected)
    assert plan.chosen is not None and plan.chosen.width <= 0.5


def test_the_separation_profile_is_the_plan_of_the_committed_pilot():
    """The separation sweep's seed and width counts are what the sizing rule chooses on
    the pilot's committed results (studies/cost-law-separation/results.json), and every
    pilot run is a run of the sweep (same run keys), so the sweep resumes from them."""
    from pathlib import Path

    from infoprobe.reproduce import CLAIMS
    from infoprobe.reproduce.claims.cost_law import PILOT, SEPARATION, separation_plan

    pilot = Path(__file__).parents[1] / "studies" / "cost-law-separation" / "pilot-results.json"
    plan = separation_plan(pilot)
    assert plan.chosen is not None and plan.chosen.width <= 0.5
    widths = sorted({p.coords["width"] for p in SEPARATION.points})
    assert (plan.chosen.seeds, tuple(plan.chosen.widths)) == (SEPARATION.seeds, tuple(widths))
    assert {p.series for p in SEPARATION.points} == {"(2,2)", "(1,2)"}
    sweep = {s.run_id for s in CLAIMS["cost-law"].runs(SEPARATION)}
    assert {s.run_id for s in CLAIMS["cost-law"].runs(PILOT)} < sweep
    assert len(sweep) == plan.chosen.runs
