"""Comparison of predicted and observed sets: hand-made cases with known answers, brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from infoprobe.base.errors import CompareInputError
from infoprobe.compare.agreement import SetAgreement, tau_sweep
from infoprobe.compare.auroc import auroc, average_ranks
from infoprobe.compare.core import aggregate_membership, compare
from infoprobe.compare.crosstab import crosstab
from infoprobe.compare.observations import Observations, scope_masks
from infoprobe.compare.provenance import ProvenanceError, check_provenance
from infoprobe.compare.scopes import CAVEAT
from infoprobe.compare.verdicts import headline


def sets_from_lists(members: list[list[int]], size: int) -> np.ndarray:
    out = np.zeros((len(members), size), dtype=bool)
    for row, positions in enumerate(members):
        out[row, positions] = True
    return out


# ----------------------------------------------------------------------------- AUROC


def test_average_ranks_match_scipy_rankdata():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 5, size=(7, 3, 11)).astype(float)  # many ties
    expected = rankdata(values, method="average", axis=-1)
    np.testing.assert_allclose(average_ranks(values), expected)


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.integers(-3, 3), min_size=2, max_size=25),
    labels=st.lists(st.booleans(), min_size=25, max_size=25),
)
def test_auroc_matches_sklearn_with_ties(scores, labels):
    labels = np.array(labels[: len(scores)])
    scores = np.array(scores, dtype=float)
    ours = auroc(scores, labels)
    if labels.all() or not labels.any():
        assert np.isnan(ours)
    else:
        assert ours == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_auroc_grouped_with_left_out_items_matches_sklearn_per_group():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 6, size=(5, 40)).astype(float)
    labels = rng.random((5, 40)) < 0.4
    valid = rng.random((5, 40)) < 0.7
    ours = auroc(scores, labels, valid=valid)
    for g in range(5):
        keep = valid[g]
        expected = roc_auc_score(labels[g][keep], scores[g][keep])
        assert ours[g] == pytest.approx(expected, abs=1e-12)


def test_auroc_rejects_nan_and_shape_mismatch():
    with pytest.raises(CompareInputError, match="NaN"):
        auroc(np.array([0.1, np.nan]), np.array([True, False]))
    with pytest.raises(CompareInputError, match="same shape"):
        auroc(np.zeros(3), np.zeros(4, bool))


# ----------------------------------------------------------------------------- counts

# One layer, one sample, T = 4 data positions + CLS (token 4, position 4).
HAND_PRED = sets_from_lists([[0, 1], [1], [0, 1, 2, 3], [], [0, 4]], 5)
HAND_OBS = sets_from_lists([[0, 2], [0, 1, 2, 3], [], [], [0]], 4)
NAN = float("nan")
HAND_EXPECTED = {  # per token, worked out by hand
    "agree": [1, 1, 0, 0, 1],
    "violations": [1, 3, 0, 0, 0],
    "omissions": [1, 0, 4, 0, 0],  # token 4: CLS position 4 is not compared
    "absent": [1, 0, 0, 4, 3],
    "precision": [0.5, 0.25, NAN, NAN, 1.0],
    "recall": [0.5, 1.0, 0.0, NAN, 1.0],
    "jaccard": [1 / 3, 0.25, 0.0, NAN, 1.0],
    "violation_rate": [0.5, 1.0, NAN, 0.0, 0.0],
    "omission_rate": [0.5, 0.0, 1.0, NAN, 0.0],
}


def hand_comparison():
    pred = HAND_PRED[None, None]  # [1, 1, 5, 5]
    obs = Observations(per_sample=HAND_OBS[None, None])  # [1, 1, 5, 4]
    return compare(pred, obs)


def test_hand_made_counts_per_token():
    per_token = SetAgreement.from_sets(HAND_PRED[:, :4], HAND_OBS)
    for name, expected in HAND_EXPECTED.items():
        np.testing.assert_allclose(getattr(per_token, name), expected, err_msg=name)


def test_hand_made_scopes_split_own_positions_from_the_rest():
    """Own cells (t, t): token 0 agree, 1 agree, 2 omission, 3 absent; CLS has none."""
    result = hand_comparison().per_sample
    own, others = result["own"].per_layer, result["others"].per_layer
    assert [int(c[0]) for c in own._counts()] == [2, 0, 1, 1]
    assert [int(c[0]) for c in others._counts()] == [1, 4, 4, 7]
    whole = SetAgreement.from_sets(HAND_PRED[:, :4], HAND_OBS).pooled(axis=0)
    for o, r, w in zip(own._counts(), others._counts(), whole._counts(), strict=True):
        assert int(o[0]) + int(r[0]) == int(w)
    assert hand_comparison().verdicts[0] == (
        "layer 0: 20.0% of predicted positions observed (1 of 5, per sample), 36.4% of the "
        "rest (4 of 11); own position observed in 66.7%"
    )


def test_scope_masks_cover_every_cell_once():
    masks = scope_masks(5)
    assert masks["own"].shape == (6, 5)
    assert (masks["own"] ^ masks["others"]).all()
    assert masks["own"].sum() == 5 and not masks["own"][5].any()  # CLS has no own position


def test_violations_and_omissions_are_separate():
    """T=3, 4 tokens. Observed ⊂ predicted: omissions only; observed ⊃ predicted: violations."""
    wide = np.zeros((1, 1, 4, 4), bool)
    wide[..., :3] = True  # every token: predicted {0, 1, 2}
    narrow = np.zeros((1, 1, 4, 4), bool)
    narrow[..., 0] = True  # every token: predicted {0}

    def both_scopes(pred, obs):
        parts = compare(pred, Observations(per_sample=obs[..., :3])).per_sample
        return [
            int(parts["own"].per_layer.violations[0] + parts["others"].per_layer.violations[0]),
            int(parts["own"].per_layer.omissions[0] + parts["others"].per_layer.omissions[0]),
        ]

    assert both_scopes(wide, narrow) == [0, 8]
    assert both_scopes(narrow, wide) == [8, 0]


def test_per_sample_counts_match_python_sets():
    rng = np.random.default_rng(2)
    L1, n, T = 3, 6, 5
    pred = rng.random((L1, n, T + 1, T + 1)) < 0.4
    obs = rng.random((L1, n, T + 1, T)) < 0.5
    result = compare(pred, Observations(per_sample=obs)).per_sample
    for scope, keep in (("others", lambda t, s: s != t), ("own", lambda t, s: s == t)):
        part = result[scope]
        for layer in range(L1):
            totals = np.zeros(4, int)
            jaccards = []
            for i in range(n):
                for t in range(T + 1):
                    cells = [s for s in range(T) if keep(t, s)]
                    p = {s for s in cells if pred[layer, i, t, s]}
                    o = {s for s in cells if obs[layer, i, t, s]}
                    counts = [len(p & o), len(o - p), len(p - o), len(cells) - len(p | o)]
                    assert [int(c[layer, i, t]) for c in part.samples._counts()] == counts
                    totals += counts
                    if p | o:
                        jaccards.append(len(p & o) / len(p | o))
            assert [int(c[layer]) for c in part.per_layer._counts()] == totals.tolist()
            assert part.mean_sample_jaccard[layer] == pytest.approx(np.mean(jaccards))


# ----------------------------------------------------------------------------- aggregate


def aggregate_case():
    """T=3, n=2; token 2 is never predicted anything; CLS = token 3.

    others: (0,1) always, (3,2) always; (0,2), (1,2), (2,0), (2,1), (3,0) never;
    (1,0), (3,1) sometimes. own: (0,0), (1,1) always, (2,2) never.
    """
    pred = np.zeros((1, 2, 4, 4), bool)
    pred[0, :, 0, [0, 1]] = True
    pred[0, 0, 1, 0] = True
    pred[0, :, 1, 1] = True
    pred[0, 1, 3, 1] = True
    pred[0, :, 3, 2] = True
    score = np.array([[[0.2, 0.9, 0.5], [100.0, 0.95, 0.1], [0.3, 0.05, 0.4], [0.8, -100.0, 0.7]]])
    return pred, score >= 0.3, score


def test_aggregate_membership_and_three_way_split():
    pred, observed, score = aggregate_case()
    np.testing.assert_allclose(
        aggregate_membership(pred)[0],
        [[1, 1, 0], [0.5, 1, 0], [0, 0, 0], [0, 0.5, 1]],
    )
    result = compare(pred, Observations(aggregate=observed, score=score, tau=0.3)).aggregate
    others, own = result["others"], result["own"]
    assert [int(c[0]) for c in others.per_layer._counts()] == [2, 3, 0, 2]
    assert [int(c[0]) for c in own.per_layer._counts()] == [1, 1, 1, 0]
    assert others.sometimes_observed[0] == 1 and others.sometimes_unobserved[0] == 1
    # always (0.9, 0.7) vs never (0.5, 0.1, 0.3, 0.05, 0.8): 9 of 10 pairs ordered
    assert others.auroc_per_layer[0] == pytest.approx(0.9)


def test_aggregate_verdict_is_used_without_per_sample_sets():
    pred, observed, score = aggregate_case()
    result = compare(pred, Observations(aggregate=observed, score=score))
    assert result.per_sample is None
    assert result.verdicts[0] == (
        "layer 0 (aggregate): 100.0% of always-predicted positions observed (2 of 2); "
        "60.0% of never-predicted positions observed (3 of 5); "
        "1 of 2 sometimes-predicted positions observed; AUROC 0.900; "
        "own position observed in 50.0%"
    )


# ----------------------------------------------------------------------------- AUROC + sweep


def random_case(seed=3, L1=3, n=20, T=6):
    rng = np.random.default_rng(seed)
    pred = rng.random((L1, n, T + 1, T + 1)) < 0.3
    errors = rng.gamma(1.0, 0.3, size=(L1, n, T + 1, T)) + 0.5 * ~pred[..., :T]
    return pred, errors


def test_per_sample_auroc_matches_sklearn_per_layer_and_token_without_own_cells():
    pred, errors = random_case()
    result = compare(pred, Observations(sample_score=errors)).per_sample["others"]
    T = errors.shape[-1]
    others = scope_masks(T)["others"]
    for layer in range(pred.shape[0]):
        labels = pred[layer, ..., :T]
        keep = np.broadcast_to(others, labels.shape)
        expected = roc_auc_score(labels[keep], -errors[layer][keep])
        assert result.auroc_per_layer[layer] == pytest.approx(expected)
        for t in range(T + 1):
            k = others[t]
            expected_t = roc_auc_score(labels[:, t, k].ravel(), -errors[layer][:, t, k].ravel())
            assert result.auroc_per_token[layer, t] == pytest.approx(expected_t)


def test_scores_above_tau_rank_like_negated_errors():
    pred, errors = random_case(seed=8)
    below = compare(pred, Observations(sample_score=errors)).per_sample["others"]
    above = compare(pred, Observations(sample_score=-errors, member_when="above"))
    np.testing.assert_allclose(below.auroc_per_layer, above.per_sample["others"].auroc_per_layer)


def test_tau_sweep_matches_thresholding_at_each_tau():
    pred, errors = random_case(seed=4)
    T = errors.shape[-1]
    taus = [0.05, 0.2, 0.4, 0.8, 2.0]
    sweep = tau_sweep(pred[..., :T], errors, taus, member_when="below")
    for k, tau in enumerate(taus):
        direct = SetAgreement.from_sets(pred[..., :T], errors < tau).pooled(axis=(1, 2))
        for ours, theirs in zip(sweep.agreement._counts(), direct._counts(), strict=True):
            np.testing.assert_array_equal(ours[k], theirs)


def test_tau_sweep_includes_the_fixed_tau_and_agrees_with_observed_sets():
    pred, errors = random_case(seed=5)
    tau = 0.37
    obs = Observations(per_sample=errors < tau, sample_score=errors, tau_sample=tau)
    for part in compare(pred, obs).per_sample.values():
        k = int(np.flatnonzero(part.sweep.taus == tau)[0])
        for ours, theirs in zip(
            part.sweep.agreement._counts(), part.per_layer._counts(), strict=True
        ):
            np.testing.assert_array_equal(ours[k], theirs)


def test_aggregate_sweep_uses_score_at_least_tau_on_definite_cells():
    pred, _, score = aggregate_case()
    result = compare(pred, Observations(score=score), score_taus=[0.15, 0.6, 0.85])
    sweep = result.aggregate["others"].sweep
    # always {0.9, 0.7}, never {0.5, 0.1, 0.3, 0.05, 0.8}
    assert sweep.agreement.agree[:, 0].tolist() == [2, 2, 1]
    assert sweep.agreement.violations[:, 0].tolist() == [3, 1, 0]
    assert sweep.agreement.omissions[:, 0].tolist() == [0, 0, 1]


# ----------------------------------------------------------------------------- two instruments


def test_crosstab_counts_match_python_and_leave_own_cells_out():
    rng = np.random.default_rng(9)
    L1, n, T = 2, 5, 4
    flow = rng.random((L1, n, T + 1, T)) < 0.5
    dec = rng.random((L1, n, T + 1, T)) < 0.3
    table = crosstab(
        Observations("flow", per_sample=flow), Observations("decodability", per_sample=dec)
    )
    for layer in range(L1):
        cells = [
            (flow[layer, i, t, s], dec[layer, i, t, s])
            for i in range(n)
            for t in range(T + 1)
            for s in range(T)
            if s != t
        ]
        assert int(table.both[layer]) == sum(a and b for a, b in cells)
        assert int(table.first_only[layer]) == sum(a and not b for a, b in cells)
        assert int(table.second_only[layer]) == sum(b and not a for a, b in cells)
        assert int(table.neither[layer]) == sum(not a and not b for a, b in cells)
        assert int(table.total[layer]) == len(cells)
    assert table.to_dict()["first"] == "flow"


def test_headline_leads_with_each_instrument_and_its_control():
    pred, errors = random_case(seed=10)
    flow = Observations("flow", sample_score=-errors, member_when="above", word="carried",
                        per_sample=errors < 0.4)  # fmt: skip
    control = Observations("flow (random-init)", sample_score=errors, member_when="above",
                           control_of="flow")  # fmt: skip
    dec = Observations("decodability", sample_score=errors)
    comparisons = {o.instrument: {"infoflow": compare(pred, o)} for o in (flow, control, dec)}
    lines = headline(comparisons)
    layer = 1
    f = comparisons["flow"]["infoflow"].per_sample["others"]
    c = comparisons["flow (random-init)"]["infoflow"].per_sample["others"]
    d = comparisons["decodability"]["infoflow"].per_sample["others"]
    a = f.per_layer

    def ci(scope):
        lo, hi = scope.auroc_per_layer_interval[layer]
        assert lo <= scope.auroc_per_layer[layer] <= hi
        return f"{scope.auroc_per_layer[layer]:.2f} [{lo:.2f}, {hi:.2f}]"

    assert lines[layer] == (
        f"layer 1: flow AUROC {ci(f)} (random-init {ci(c)}); decodability AUROC {ci(d)}; "
        f"{100 * a.agree[layer] / a.n_predicted[layer]:.0f}% of predicted positions carried, "
        f"{100 * a.violations[layer] / a.n_not_predicted[layer]:.0f}% of the rest"
    )


# ----------------------------------------------------------------------------- output, errors


def test_to_dict_is_strict_json_and_carries_verdicts_and_caveat():
    pred, errors = random_case(seed=6)
    obs = Observations(
        per_sample=errors < 0.4,
        sample_score=errors,
        aggregate=errors.mean(axis=1) < 0.5,
        score=1.0 - errors.mean(axis=1),
        tau_sample=0.4,
        provenance={"data_seed": 1},
    )
    data = compare(pred, obs, provenance={"data_seed": 1}).to_dict()
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text)["caveat"] == CAVEAT
    assert len(data["verdicts"]) == pred.shape[0]
    others = np.broadcast_to(scope_masks(6)["others"], errors.shape)
    direct = SetAgreement.from_sets(pred[..., :6], errors < 0.4, others).pooled(axis=(1, 2))
    assert data["per_sample"]["others"]["per_layer"]["agree"] == [int(v) for v in direct.agree]


@pytest.mark.parametrize(
    ("pred_shape", "match"),
    [((2, 20, 7, 7), "L\\+1"), ((3, 20, 8, 8), "T: predicted 7"), ((3, 19, 7, 7), "n samples")],
)
def test_mismatched_shapes_raise_provenance_error(pred_shape, match):
    _, errors = random_case()
    with pytest.raises(ProvenanceError, match=match):
        compare(np.zeros(pred_shape, bool), Observations(sample_score=errors))


def test_bad_observation_arrays_are_refused():
    with pytest.raises(CompareInputError, match="dtype bool"):
        Observations(per_sample=np.zeros((2, 3, 5, 4), dtype=np.int8))
    bad = np.zeros((2, 3, 5, 4))
    bad[1, 2, 0, 3] = np.nan
    with pytest.raises(CompareInputError, match=r"\(1, 2, 0, 3\)"):
        Observations(sample_score=bad)
    with pytest.raises(ProvenanceError, match="samples"):
        Observations(per_sample=np.zeros((2, 3, 5, 4), bool), sample_score=np.zeros((2, 4, 5, 4)))
    with pytest.raises(CompareInputError, match="at least one"):
        Observations()


PROV = {"task": {"name": "intrinsic-dim", "params": {"T": 16, "D": 2}}, "data_seed": 7, "n": 500}


def test_check_provenance_accepts_equal_and_refuses_mismatch(tmp_path):
    cache = tmp_path / "acts.h5"
    same_cache = tmp_path / "sub" / ".." / "acts.h5"
    check_provenance({**PROV, "cache": str(cache)}, {**PROV, "cache": str(same_cache)})
    with pytest.raises(ProvenanceError, match=r"'data_seed': pred\.h5 has 7, probes\.h5 has 8"):
        check_provenance(
            PROV, {**PROV, "data_seed": 8}, pred_source="pred.h5", probe_source="probes.h5"
        )
    other_task = {**PROV, "task": {"name": "intrinsic-dim", "params": {"T": 16, "D": 3}}}
    with pytest.raises(ProvenanceError, match="'task'"):
        check_provenance(PROV, other_task)
    with pytest.raises(ProvenanceError, match="'checkpoint_sha256'"):
        check_provenance({**PROV, "checkpoint_sha256": "ab"}, {**PROV, "checkpoint_sha256": "cd"})
    with pytest.raises(ProvenanceError, match="probe results lacks field 'n'"):
        check_provenance(PROV, {k: v for k, v in PROV.items() if k != "n"})
    assert issubclass(ProvenanceError, ValueError)


def test_observed_sets_with_the_cls_column_equal_sets_without_it():
    pred, errors = random_case(seed=7)
    T = errors.shape[-1]
    with_cls = np.concatenate([errors < 0.4, np.ones((*errors.shape[:-1], 1), bool)], axis=-1)
    a = compare(pred, Observations(per_sample=with_cls)).per_sample["others"].per_layer
    b = compare(pred, Observations(per_sample=errors[..., :T] < 0.4)).per_sample["others"].per_layer
    for x, y in zip(a._counts(), b._counts(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_task_name_matches_task_dict_of_the_same_name():
    named = {**PROV, "task": "intrinsic-dim"}
    check_provenance(PROV, named)
    with pytest.raises(ProvenanceError, match="'task'"):
        check_provenance(PROV, {**PROV, "task": "triangle"})
