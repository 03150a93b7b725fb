"""Both instruments on the hand-set model, whose information sets are known per sample.

Head 0 retrieves x(p(t)) by content (a different key in every sample), head 1 copies
x(0) into every token. Flow must carry both; fixed-position linear probes decode x(0)
but cannot decode the content-retrieved x(p(t)) (flowed but not decodable); and next to
nothing is decodable without flowing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from handset import handset_model, near_ties, true_partners

from infoprobe.compare.crosstab import crosstab
from infoprobe.compare.instruments import flow
from infoprobe.compare.observations import Observations
from infoprobe.hooks import capture, layer_sites
from infoprobe.influence import flow_threshold, influence
from infoprobe.probes.linear import ProbeTargets, fit_linear_probes
from infoprobe.probes.observed import corrected_errors
from infoprobe.probes.split import TEST, make_split

T, D = 8, 4


pytestmark = pytest.mark.usefixtures("one_thread")


def instruments(value_rank):
    model = handset_model(T=T, d=D, value_rank=value_rank)
    x = np.random.default_rng(0).standard_normal((2000, T, D)).astype(np.float32)
    split = make_split(len(x), seed=0)
    test = np.flatnonzero(split == TEST)
    names = layer_sites(1)
    states = capture(model, torch.as_tensor(x), names)
    cells = np.concatenate([states[n].numpy() for n in names], axis=1)  # [n, 2(T+1), E]
    fit = fit_linear_probes(
        lambda: iter([(0, cells)]),
        ProbeTargets(values=x, inputs=x, true_index=np.arange(T)),
        split,
        shuffle_seed=None,
        progress=False,
    )
    errors = fit.per_sample_error.reshape(len(test), 2, T + 1, T).transpose(1, 0, 2, 3)
    ratio = corrected_errors(errors, x[test])
    decodable = Observations("decodability", per_sample=ratio < 0.5, sample_score=ratio)
    result = influence(model, x[test], progress=False)
    flowed = flow(result.scores, result.aggregate, threshold=flow_threshold(T))
    return x[test], flowed, decodable


@pytest.mark.parametrize("value_rank", [None, 1])
def test_nothing_is_decodable_without_flow_and_retrieval_flows_undecoded(value_rank):
    x, flowed, decodable = instruments(value_rank)
    table = crosstab(flowed, decodable)
    # Decodable without flow: near zero, not zero. At layer 0 a near-mean prediction on a
    # sample near the mean passes by chance; at layer 1 the probe also uses the selection
    # itself (x(s) lost token t's comparison, a half-space a linear map can exploit a
    # little) although x(s) does not move the state. Measured: 2 and 82 of 19200 cells.
    assert (table.second_only / table.total).max() < 0.005
    assert table.first_only[1] > 20 * table.second_only[1]
    partner = true_partners(x)  # [n, T+1]
    clean = ~near_ties(x)
    rows, tokens = np.nonzero(clean[:, :T] & (partner[:, :T] != 0))
    keys = partner[rows, tokens]
    # the content-retrieved key flows into its query at layer 1 ...
    assert flowed.per_sample[1, rows, tokens, keys].mean() == 1.0
    # ... but a fixed-position probe cannot read it (a different key in every sample)
    assert decodable.per_sample[1, rows, tokens, keys].mean() < 0.05
    # the position-specific head's x(0) both flows and decodes, in every token
    assert flowed.per_sample[1, :, 1:, 0].all()
    assert decodable.per_sample[1, :, 1:, 0].mean() > 0.99
