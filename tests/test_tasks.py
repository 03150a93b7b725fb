"""infoprobe.tasks: every target against an independent brute-force loop, determinism,
serialisation round trip and validation errors."""

import itertools
import json

import numpy as np
import pytest

from infoprobe.tasks import TASKS, Task, TaskError, make_task, task_from_dict

SMALL = {
    "intrinsic-dim": {"T": 5, "D": 3, "d": 3, "seed": 1},
    "triangle": {"T": 6, "d": 2, "seed": 2},
    "fixed-positions": {"T": 6, "d": 3, "positions": (4, 0, 2), "seed": 3},
    "d-retrieval": {"T": 7, "D": 3, "d": 2, "seed": 4},
    "pairwise-min": {"T": 6, "d": 3, "seed": 5},
    "kth-largest": {"T": 7, "k": 3, "d": 2, "seed": 6},
    "aggregate-decode": {"T": 6, "T0": 3, "d": 2, "m": 5, "seed": 7},
}


def small_batch(task: Task, n: int = 12) -> np.ndarray:
    x, _ = task.sample(n, np.random.default_rng(123))
    return x.astype(np.float64)


def brute_intrinsic_dim(task, sample):
    total = 0.0
    for a in task.matrices:
        pairs = itertools.product(range(task.T), repeat=2)
        kept = [(s, t) for s, t in pairs if s != t or not task.distinct]
        total += max(float(sample[s] @ a @ sample[t]) for s, t in kept)
    return [total]


def brute_triangle(task, sample):
    combos = (
        itertools.combinations(range(task.T), 3)
        if task.distinct
        else itertools.product(range(task.T), repeat=3)
    )
    best = min(float(np.sum((sample[i] + sample[j] + sample[k]) ** 2)) for i, j, k in combos)
    return [best if task.squared else best**0.5]


def brute_fixed_positions(task, sample):
    out = np.zeros(task.d)
    for p in task.positions:
        out += sample[p]
    return list(out)


def brute_d_retrieval(task, sample):
    return [sum(max(float(a @ sample[t]) for t in range(task.T)) for a in task.directions)]


def brute_pairwise_min(task, sample):
    return [
        min(float(sample[s] @ sample[t]) for s in range(task.T) for t in range(task.T) if s != t)
    ]


def brute_kth_largest(task, sample):
    scores = [float(task.direction @ sample[t]) for t in range(task.T)]
    ranked = sorted(range(task.T), key=lambda t: (-scores[t], t))
    return list(sample[ranked[task.k - 1]])


def brute_aggregate_decode(task, sample):
    w, b, c = task.readout
    z = []
    for t in range(task.T0):
        z.extend(sample[t])
    return [sum(c[j] * np.tanh(float(np.dot(w[j], z)) + b[j]) for j in range(task.m))]


BRUTE = {
    "intrinsic-dim": brute_intrinsic_dim,
    "triangle": brute_triangle,
    "fixed-positions": brute_fixed_positions,
    "d-retrieval": brute_d_retrieval,
    "pairwise-min": brute_pairwise_min,
    "kth-largest": brute_kth_largest,
    "aggregate-decode": brute_aggregate_decode,
}


def test_registry_covers_every_task():
    assert set(TASKS) == set(SMALL) == set(BRUTE)


VARIANTS = [(name, {}) for name in sorted(SMALL)] + [
    ("intrinsic-dim", {"distinct": True}),
]


@pytest.mark.parametrize("name, variant", VARIANTS)
def test_target_matches_brute_force(name, variant):
    task = make_task(name, **{**SMALL[name], **variant})
    x = small_batch(task)
    expected = np.array([BRUTE[name](task, sample) for sample in x])
    got = task.target(x)
    assert got.shape == (x.shape[0], task.d_out) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "params", [{"distinct": False}, {"squared": True}, {"distinct": False, "squared": True}]
)
def test_triangle_variants_match_brute_force(params):
    task = make_task("triangle", T=5, d=2, seed=0, **params)
    x = small_batch(task, n=8)
    expected = np.array([brute_triangle(task, sample) for sample in x])
    np.testing.assert_allclose(task.target(x), expected, rtol=1e-5, atol=1e-6)


def test_triangle_repeats_never_larger_than_distinct():
    x = small_batch(make_task("triangle", T=6), n=50)
    distinct = make_task("triangle", T=6).target(x)
    repeats = make_task("triangle", T=6, distinct=False).target(x)
    assert np.all(repeats <= distinct + 1e-6)


def test_triangle_inputs_have_clamped_norms():
    task = make_task("triangle", T=32, d=2)
    x, _ = task.sample(2000, np.random.default_rng(0))
    norms = np.linalg.norm(x, axis=2)
    assert norms.min() >= 0.2 - 1e-5 and norms.max() <= 4.0 + 1e-5
    # the clamp binds in both directions for N(0, 2I): some norms sit on each bound
    assert np.isclose(norms, 0.2, atol=1e-5).any() and np.isclose(norms, 4.0, atol=1e-5).any()
    # the clamp rescales norms only, so the distribution stays centred
    assert abs(float(x.mean())) < 0.02


def test_large_triangle_chunks_agree_with_single_samples():
    task = make_task("triangle", T=64)
    x, y = task.sample(300, np.random.default_rng(1))  # more samples than one chunk holds
    singles = np.concatenate([task.target(x[i : i + 1]) for i in (0, 150, 299)])
    np.testing.assert_array_equal(y[[0, 150, 299]], singles)


def test_kth_largest_with_k1_is_argmax_retrieval():
    task = make_task("kth-largest", T=9, k=1, d=3, seed=2)
    x = small_batch(task, n=20)
    best = np.argmax(x @ task.direction, axis=1)
    np.testing.assert_allclose(task.target(x), x[np.arange(20), best], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sampling_is_deterministic_and_shaped(name):
    task = make_task(name, **SMALL[name])
    x1, y1 = task.sample(16, np.random.default_rng(7))
    x2, y2 = make_task(name, **SMALL[name]).sample(16, np.random.default_rng(7))
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (16, task.T, task.d) and x1.dtype == np.float32
    assert y1.shape == (16, task.d_out) and y1.dtype == np.float32
    assert np.isfinite(y1).all()
    x3, _ = task.sample(16, np.random.default_rng(8))
    assert not np.array_equal(x1, x3)


def test_task_seed_fixes_parameters_not_samples():
    a = make_task("intrinsic-dim", T=4, D=2, seed=0)
    b = make_task("intrinsic-dim", T=4, D=2, seed=1)
    assert not np.allclose(a.matrices, b.matrices)
    np.testing.assert_array_equal(a.matrices, make_task("intrinsic-dim", T=4, D=2).matrices)
    xa, _ = a.sample(4, np.random.default_rng(3))
    xb, _ = b.sample(4, np.random.default_rng(3))
    np.testing.assert_array_equal(xa, xb)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_to_dict_round_trip_through_json(name):
    task = make_task(name, **SMALL[name])
    spec = json.loads(json.dumps(task.to_dict()))
    assert spec["name"] == name
    assert set(spec["params"]) == set(type(task).param_names())
    assert "seed" in spec["params"]
    again = task_from_dict(spec)
    assert again == task and hash(again) == hash(task)
    assert again.to_dict() == task.to_dict()


def test_needs_positions_flags():
    flagged = {name for name, cls in TASKS.items() if cls.needs_positions}
    assert flagged == {"fixed-positions", "aggregate-decode"}


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("no-such-task", {}, "valid tasks: aggregate-decode, d-retrieval"),
        ("intrinsic-dim", {"Q": 3}, "valid parameters: T, D, d, distinct, seed"),
        ("triangle", {"T": 2}, "'T' must be an integer >= 3"),
        ("triangle", {"distinct": "yes"}, "'distinct' must be true or false"),
        ("pairwise-min", {"T": 1}, "'T' must be an integer >= 2"),
        ("kth-largest", {"T": 3, "k": 4}, "needs T >= k = 4"),
        ("kth-largest", {"k": 0}, "'k' must be an integer >= 1"),
        ("fixed-positions", {"T": 3, "positions": (0, 5)}, "positions [0, 5] are 0-based"),
        ("fixed-positions", {"positions": (1, 1)}, "distinct positions"),
        ("fixed-positions", {"positions": ()}, "non-empty"),
        ("aggregate-decode", {"T": 3, "T0": 4}, "T >= T0 = 4"),
        ("d-retrieval", {"D": 2.5}, "'D' must be an integer"),
        ("d-retrieval", {"seed": -1}, "'seed' must be an integer >= 0"),
        ("intrinsic-dim", {"T": True}, "'T' must be an integer"),
    ],
)
def test_bad_input_raises_task_error_naming_the_field(name, params, fragment):
    with pytest.raises(TaskError) as info:
        make_task(name, **params)
    assert isinstance(info.value, ValueError)
    assert fragment in str(info.value)


def test_bad_spec_and_bad_inputs():
    with pytest.raises(TaskError, match="keys 'name'"):
        task_from_dict({"params": {}})
    with pytest.raises(TaskError, match="'params' must be a mapping"):
        task_from_dict({"name": "triangle", "params": [1]})
    task = make_task("pairwise-min", T=4, d=2)
    with pytest.raises(TaskError, match=r"shape \[n, T=4, d=2\], got \[3, 5, 2\]"):
        task.target(np.zeros((3, 5, 2)))
    with pytest.raises(TaskError, match="integer >= 0"):
        task.sample(-1, np.random.default_rng(0))
    with pytest.raises(TaskError, match=r"numpy\.random\.Generator"):
        task.sample(2, 0)


def test_numpy_integers_are_accepted_and_normalised():
    task = make_task("d-retrieval", T=np.int64(5), D=np.int32(2))
    assert type(task.T) is int and task == make_task("d-retrieval", T=5, D=2)
    assert json.dumps(task.to_dict())
