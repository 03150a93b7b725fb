"""Every verdict is printed with alpha at the run's own T and E, and says in words where
the law predicts the same rate for the architectures compared.

Closed form (intrinsic-dim D=2, d=4, heads one short): alpha(T) = max(1, T d / E - 1),
equal to the efficient model's 1 exactly while T d / E <= 2, i.e. T <= 2 E / d."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_bad_input import run_command

from infoprobe.infoflow import predict, rate_comparison, separation_length
from infoprobe.model import ModelConfig
from infoprobe.pipeline.demo import DemoConfig, rate_line
from infoprobe.reproduce import CLAIMS, gather
from infoprobe.reproduce.results import format_summary
from infoprobe.tasks import make_task


def short_alpha(T: int, E: int, d: int = 4) -> float:
    return max(1.0, T * d / E - 1)


def exponents(T: int, E: int) -> dict[str, object]:
    task = make_task("intrinsic-dim", D=2, T=T)
    return {
        str(h): predict(task, ModelConfig(d_in=4, n_ctx=T, d_model=E, heads=h)).exponent
        for h in ((2, 2), (1, 2))
    }


@pytest.mark.parametrize("E", [16, 32])
def test_same_rate_exactly_where_the_closed_form_is_one(E):
    last_equal = 2 * E // 4  # T d / E <= 2
    for T in range(2, 3 * last_equal):
        named = exponents(T, E)
        assert named["(1, 2)"](T) == pytest.approx(short_alpha(T, E))
        text = rate_comparison(named, T)
        if T <= last_equal:
            assert text.endswith(f"(α = 1); it separates for T > {last_equal}"), text
            assert separation_length(list(named.values()), T) == last_equal + 1
        else:
            assert f"(1, 2) α = {short_alpha(T, E):.3g}" in text and "different" in text


def test_never_separating_exponents_are_said_to_be_so():
    named = exponents(8, 32)
    assert rate_comparison({"a": named["(2, 2)"], "b": named["(2, 2)"]}, 8).endswith(
        "it never separates them"
    )


@pytest.mark.parametrize(
    ("T", "words"),
    [
        (
            16,
            [
                "α = 1 at T=16, E=32",
                "same rate for heads 1,2 and the minimum heads 2,2",
                "separates for T > 16",
            ],
        ),
        (
            32,
            [
                "α = 3 at T=32, E=32",
                "different rates: heads 1,2 α = 3, the minimum heads 2,2 α = 1",
            ],
        ),
    ],
)
def test_predict_prints_alpha_at_its_T_and_E(monkeypatch, capsys, T, words):
    argv = ["--task", "intrinsic-dim", "--D", "2", "--T", str(T), "--heads", "1,2"]
    assert run_command(monkeypatch, "predict", argv) == 0
    out = capsys.readouterr().out
    for word in words:
        assert word in out, (word, out)


def test_demo_line_names_both_models_alpha():
    text = rate_line(DemoConfig())
    assert text.startswith("At T=16, E=32, the law predicts the same rate for (2,2) and (1,2)")
    assert "(α = 1); it separates for T > 16: the gap above is a constant factor" in text
    far = rate_line(replace(DemoConfig(), T=32))
    assert far == "At T=32, E=32, the law predicts different rates: (2,2) α = 1, (1,2) α = 3"


def test_reproduce_summary_says_where_the_rates_are_equal():
    claim = CLAIMS["intrinsic-dim"]
    profile = claim.profile("quick")
    text = format_summary(gather(claim, profile, claim.runs("quick"), []))
    rates = [line for line in text.splitlines() if line.startswith("rate: ")]
    # D=2 at E=32: equal up to T = 16; D=3 at E=48: up to T = 2*48/4 = 24
    assert any("D=2" in r and "same rate" in r and "T > 16" in r for r in rates), rates
    assert any("D=3" in r and "same rate" in r and "T > 24" in r for r in rates), rates
