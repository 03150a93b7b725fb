"""Set algebra (hypothesis properties), bad input, a user-declared task, HDF5 and CLI."""

import json
from dataclasses import dataclass
from functools import partial

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infoprobe.cli import main
from infoprobe.infoflow import (
    AggregateAll,
    AggregatePositions,
    ArchitectureError,
    Head,
    InfoFlowError,
    Program,
    ProgramError,
    Retrieve,
    ScoreAccessError,
    SetsFileError,
    as_architecture,
    derive_program,
    execute,
    predict,
    read_sets,
    write_sets,
)
from infoprobe.infoflow.execute import execute_chunk
from infoprobe.tasks import Comparison, ComparisonStructure, Stage, Task, make_task
from infoprobe.tasks.scores import key_projection

TASK_CHOICES = [
    ("intrinsic-dim", {"D": 2}),
    ("pairwise-min", {}),
    ("d-retrieval", {"D": 3}),
    ("fixed-positions", {}),
    ("kth-largest", {"k": 2}),
    ("triangle", {}),
]


@st.composite
def programs_on_samples(draw):
    name, params = draw(st.sampled_from(TASK_CHOICES))
    T = draw(st.integers(min_value=4, max_value=9))
    task = make_task(name, T=T, **params)
    heads = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    arch = as_architecture(heads, d_model=12, pos_encoding=draw(st.booleans()))
    program = derive_program(task.structure(), arch, use_retrieval=draw(st.booleans()))
    x, _ = task.sample(draw(st.integers(1, 6)), np.random.default_rng(draw(st.integers(0, 99))))
    return task, arch, program, x


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs_on_samples())
def test_sets_are_monotone_reflexive_and_bounded(case):
    task, arch, program, x = case
    sets = execute(program, x)
    T = task.T
    assert sets.shape == (arch.n_layers + 1, x.shape[0], T + 1, T + 1)
    np.testing.assert_array_equal(
        sets[0], np.broadcast_to(np.eye(T + 1, dtype=bool), sets[0].shape)
    )
    assert np.all(sets[:-1] <= sets[1:])  # the residual keeps what a token had
    assert sets[:, :, np.arange(T + 1), np.arange(T + 1)].all()
    sizes = sets.sum(axis=3)
    assert sizes.max() <= T + 1
    for layer, heads in enumerate(program.layers, 1):
        # union law: one layer adds at most one earlier set per head and query group
        bound = (1 + len(heads)) * sizes[layer - 1].max(axis=1)
        retrieval_only = all(
            isinstance(op, Retrieve | type(None)) for h in heads for op in (h.data, h.cls)
        )
        if retrieval_only:
            assert np.all(sizes[layer].max(axis=1) <= bound)


@SETTINGS
@given(programs_on_samples())
def test_aggregation_union_laws(case):
    task, _, program, x = case
    sets = execute(program, x)
    T = task.T
    for layer, heads in enumerate(program.layers, 1):
        ops = [h.cls for h in heads]
        union_all = sets[layer - 1].any(axis=1)
        if any(isinstance(op, AggregateAll) for op in ops):
            # global aggregation: I(CLS, l) = union over all tokens of I(s, l-1)
            np.testing.assert_array_equal(sets[layer, :, T], union_all)
        for op in ops:
            if isinstance(op, AggregatePositions):
                pooled = sets[layer - 1][:, list(op.positions)].any(axis=1)
                assert np.all(pooled <= sets[layer, :, T])
        assert np.all(sets[layer] <= union_all[:, None, :] | sets[layer - 1])


@SETTINGS
@given(programs_on_samples(), st.integers(1, 4))
def test_sets_are_deterministic_and_chunk_independent(case, chunk):
    _, _, program, x = case
    np.testing.assert_array_equal(execute(program, x, chunk=chunk), execute(program, x))
    np.testing.assert_array_equal(execute(program, x), execute(program, x.copy()))


# ---- a task the engine has never seen, declared by its structure only -------------------
@dataclass(frozen=True, kw_only=True)
class TwoDirections(Task):
    """F(X) = max_t u^T x(t) + max_t v^T x(t) with fixed u = e_0, v = e_1."""

    name = "user-two-directions"
    T: int = 6
    d: int = 2
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T", minimum=1)

    def _target(self, x):
        return x[:, :, 0].max(axis=1) + x[:, :, 1].max(axis=1)

    def structure(self) -> ComparisonStructure:
        stages = [
            Stage(group="cls", score=partial(key_projection, direction=np.eye(2)[i]), reads_key=1)
            for i in range(2)
        ]
        return ComparisonStructure(
            tuple(
                Comparison(f"dir{i}", order=1, stages=(s,), tuples=self.T)
                for i, s in enumerate(stages)
            )
        )


def test_user_task_gets_predictions_from_its_structure():
    task = TwoDirections()
    assert predict(task, (2,)).verdict == "efficient"
    assert predict(task, (1,)).verdict == "inefficient"
    p = predict(task, (1, 1))
    assert p.verdict == "efficient" and p.min_heads == (1, 1)
    x, _ = task.sample(5, np.random.default_rng(0))
    cls = p.sets(x)[2, :, task.T, : task.T]
    for i in range(5):  # CLS holds exactly the argmax positions of both directions
        expected = {int(np.argmax(x[i, :, 0])), int(np.argmax(x[i, :, 1]))}
        assert set(np.flatnonzero(cls[i])) == expected


# ---- bad input -------------------------------------------------------------------------
def test_heads_layers_mismatch_and_bad_heads():
    with pytest.raises(ArchitectureError, match="lists 2 layer"):
        as_architecture((2, 2), n_layers=3)
    with pytest.raises(ArchitectureError, match="'heads' must be an integer >= 1"):
        as_architecture((2, 0))
    with pytest.raises(ArchitectureError, match="not divisible"):
        as_architecture((3,), d_model=32)
    with pytest.raises(InfoFlowError, match="n_ctx"):
        from infoprobe.model import ModelConfig

        predict(make_task("pairwise-min", T=8), ModelConfig(d_in=2, n_ctx=9, heads=(1, 1)))
    with pytest.raises(InfoFlowError, match="kth_law"):
        predict(make_task("kth-largest"), (1,), kth_law="nope")


def test_program_with_more_heads_than_the_layer_is_refused():
    task = make_task("d-retrieval", D=3, T=6)
    program = derive_program(task.structure(), as_architecture((3,), d_model=12))
    with pytest.raises(ProgramError, match=r"uses 3 heads at layer 1 .* gives that layer 2"):
        program.check(as_architecture((2,), d_model=12))
    positional = derive_program(
        make_task("fixed-positions").structure(), as_architecture((1,), pos_encoding=True)
    )
    with pytest.raises(ProgramError, match="needs a positional encoding"):
        positional.check(as_architecture((1,)))


def test_score_reading_outside_the_sets_is_refused():
    task = make_task("intrinsic-dim", D=1, T=5)
    structure = task.structure()
    # stage 2 (CLS reads the key's chain [t, p(t)]) scheduled before stage 1 ran
    early = Program(
        layers=((Head(cls=Retrieve(0, 1)),),), decodes=(), aggregated=(), structure=structure
    )
    x, _ = task.sample(3, np.random.default_rng(0))
    with pytest.raises(ScoreAccessError, match="reads 2 input"):
        execute(early, x)
    # a score declaring it reads the query's input at CLS, which has none
    bad = ComparisonStructure(
        (Comparison("bad", 1, stages=(Stage("cls", score=key_projection, reads_query=1),)),)
    )
    program = Program(
        layers=((Head(cls=Retrieve(0, 0)),),), decodes=(), aggregated=(), structure=bad
    )
    with pytest.raises(ScoreAccessError, match="each query"):
        execute_chunk(program, x.astype(float))


def test_bad_inputs_to_sets():
    p = predict(make_task("pairwise-min", T=5), (1, 1))
    with pytest.raises(ValueError, match=r"shape \[n, T=5, d=2\]"):
        p.sets(np.zeros((2, 4, 2)))


# ---- HDF5 ------------------------------------------------------------------------------
def test_sets_file_round_trip_and_errors(tmp_path):
    task = make_task("intrinsic-dim", D=2, T=6)
    p = predict(task, (2, 2))
    x, _ = task.sample(50, np.random.default_rng(1))
    path = tmp_path / "pred.h5"
    write_sets(path, p, x, {"data_seed": 1}, chunk=16)
    back = read_sets(path)
    np.testing.assert_array_equal(back.sets, p.sets(x))
    np.testing.assert_array_equal(back.x, x)
    assert back.task == task.to_dict() and back.arch["heads"] == [2, 2]
    assert back.provenance == {"data_seed": 1} and back.prediction["verdict"] == "efficient"
    assert "layer 1" in back.program
    assert not list(tmp_path.glob("*.tmp-*"))
    with pytest.raises(FileExistsError):
        write_sets(path, p, x, {})
    with h5py.File(path, "a") as f:
        del f.attrs["arch"]
    with pytest.raises(SetsFileError, match="missing root attribute 'arch'"):
        read_sets(path)
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(SetsFileError, match="not an HDF5 file"):
        read_sets(tmp_path / "junk.h5")


# ---- CLI -------------------------------------------------------------------------------
def test_cli_predict_json_and_out(tmp_path, capsys):
    out = tmp_path / "p.h5"
    code = main(["predict", "--task", "intrinsic-dim", "--D", "2", "--T", "8", "--heads", "2,2",
                 "--json", "--samples", "20", "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "efficient" and report["min_heads"] == [2, 2]
    assert read_sets(out).sets.shape == (3, 20, 9, 9)
    assert (
        main(["predict", "--task", "intrinsic-dim", "--D", "3", "--T", "8", "--heads", "2,2"]) == 0
    )
    text = capsys.readouterr().out
    assert "verdict: inefficient" in text and "minimum heads per layer for efficiency: 3,3" in text


def test_cli_grid_and_errors(capsys):
    assert main(["predict", "--task", "pairwise-min", "--heads", "1", "--E", "8", "--grid",
                 "--grid-T", "8,64", "--grid-heads", "1;2"]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "heads \\ T" in table and " X" in table
    assert main(["predict", "--task", "triangle", "--T", "2", "--heads", "1"]) == 2
    printed = capsys.readouterr()  # errors go to stderr, one line, never into stdout
    assert "'T' must be an integer >= 3" in printed.err and printed.out == ""
    assert main(["predict", "--task", "triangle", "--heads", "1", "--samples", "3"]) == 2
    printed = capsys.readouterr()
    assert "--samples and --out go together" in printed.err and printed.out == ""
