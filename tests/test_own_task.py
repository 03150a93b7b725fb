"""Users' own tasks: registered from Python or through an entry point, found by name by the
Python API and the command line, predicted as derived by hand, run end to end; classes that
break the task contract are refused with one line naming the class and the field."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pytest
from distribution import installed_distribution
from quick_reports import blank_figures

from infoprobe.checkpoint import load_checkpoint
from infoprobe.cli import build_parser, main
from infoprobe.infoflow import InfoFlowError, Retrieve, predict
from infoprobe.tasks import (
    RESERVED_PARAMETERS,
    TASKS,
    Comparison,
    ComparisonStructure,
    Stage,
    Task,
    TaskError,
    discover_plugins,
    make_task,
    register_task,
    task_class,
    task_from_dict,
    unregister_task,
)
from infoprobe.tasks.plugins import GROUP


def key_projection(q, k, direction):
    """direction^T x(key), the same for every query: k [n, K, 1, d] -> [n, 1, K]."""
    return (k[:, :, 0] @ direction)[:, None, :]


def retrieval(label: str, direction: np.ndarray, words: str) -> Comparison:
    stage = Stage(
        group="cls",
        score=partial(key_projection, direction=direction),
        description=f"CLS retrieves {words}",
    )
    return Comparison(label=label, order=1, tuples=1, stages=(stage,))


@dataclass(frozen=True, kw_only=True)
class MaxPlusMin(Task):
    """F(X) = max_t a^T x(t) + scale * min_t b^T x(t): two different first-order
    retrievals (a, b random unit vectors from ``seed``). Scalar target."""

    name = "max-plus-min"
    T: int = 8
    d: int = 2
    scale: float = 1.0
    seed: int = 0

    def _validate(self) -> None:
        self._require_int("T", minimum=1)
        self._require_int("d", minimum=1)
        if not np.isfinite(self.scale):
            raise self._fail("scale", "a finite float", self.scale)

    @cached_property
    def directions(self) -> np.ndarray:
        a = self._parameter_rng().standard_normal((2, self.d))
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    def _target(self, x):
        a, b = self.directions
        return (x @ a).max(axis=1) + self.scale * (x @ b).min(axis=1)

    def structure(self) -> ComparisonStructure:
        a, b = self.directions
        return ComparisonStructure(
            comparisons=(
                retrieval("max[a]", a, "argmax_t a^T x(t)"),
                retrieval("min[b]", -b, "argmin_t b^T x(t)"),
            ),
            combine="max + scale * min",
        )


@pytest.fixture
def registered():
    """MaxPlusMin registered for one test, then removed (TASKS lists the built-ins again)."""
    assert register_task(MaxPlusMin) is MaxPlusMin
    yield MaxPlusMin
    unregister_task("max-plus-min")


# ---- registered from Python ------------------------------------------------------------
def test_a_registered_task_is_found_by_name(registered):
    assert task_class("max-plus-min") is MaxPlusMin and TASKS["max-plus-min"] is MaxPlusMin
    task = make_task("max-plus-min", T=5, scale=0.5, seed=3)
    assert task_from_dict(json.loads(json.dumps(task.to_dict()))) == task
    register_task(MaxPlusMin)  # the same class again: nothing happens
    x, y = task.sample(6, np.random.default_rng(1))
    a, b = task.directions
    by_hand = [max(a @ s for s in xs) + 0.5 * min(b @ s for s in xs) for xs in x.astype(float)]
    assert np.allclose(y[:, 0], by_hand, atol=1e-5)


def test_prediction_is_the_program_derived_by_hand(registered):
    task, E = MaxPlusMin(T=8), 16
    two = predict(task, (2,), d_model=E)
    # one layer, two heads: CLS retrieves argmax a^T x and argmin b^T x in one layer; the
    # readout decodes a one-token chain: alpha = max(1 (retrieval), d/E - 1) = 1
    assert two.verdict == "efficient" and two.exponent(8) == 1 and two.exponent(1000) == 1
    assert [(h.data, h.cls) for h in two.program.layers[0]] == [
        (None, Retrieve(0, 0)),
        (None, Retrieve(1, 0)),
    ]
    assert two.min_heads == (2,) and two.comparison_number == 2
    # one head: only one CLS slot, so global aggregation takes it; the readout then decodes
    # all T tokens: alpha = T*d/E - 1, which grows
    one = predict(task, (1,), d_model=E)
    assert one.verdict == "inefficient" and one.program.aggregated == (0, 1)
    assert one.exponent(64) == pytest.approx(64 * 2 / E - 1)
    # the predicted sets: CLS holds itself and the two retrieved tokens after layer 1
    x, _ = task.sample(20, np.random.default_rng(2))
    sets = two.sets(x)
    a, b = task.directions
    expected = np.zeros((20, 9), bool)
    rows = np.arange(20)
    expected[rows, 8] = True
    expected[rows, np.argmax(x @ a, axis=1)] = True
    expected[rows, np.argmin(x @ b, axis=1)] = True
    assert np.array_equal(sets[1, :, 8], expected)
    assert np.array_equal(sets[1, :, :8], sets[0, :, :8])  # data tokens retrieve nothing


def test_cli_predict_builds_options_from_the_registered_task(registered, capsys):
    code = main(
        [
            "predict",
            "--task",
            "max-plus-min",
            "--T",
            "6",
            "--scale",
            "2.5",
            "--heads",
            "2",
            "--E",
            "16",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "task: max-plus-min {'T': 6, 'd': 2, 'scale': 2.5, 'seed': 0}" in out
    assert "verdict: efficient" in out and "α = 1 at T=6, E=16" in out
    assert "CLS: CLS retrieves argmax_t a^T x(t) [max[a], stage 1, max retrieval]" in out
    assert "CLS: CLS retrieves argmin_t b^T x(t) [min[b], stage 1, max retrieval]" in out


def test_tiny_run_of_a_registered_task(registered, tmp_path, capsys, monkeypatch):
    """The main job end to end; the report's figures are blank PNGs (drawing them is most
    of a report's time, and tests/test_report.py checks them)."""
    out = tmp_path / "run"
    argv = [
        "run",
        "--task",
        "max-plus-min",
        "--T",
        "5",
        "--heads",
        "2",
        "--E",
        "8",
        "--d-mlp",
        "16",
        "--d-readout",
        "8",
        "--steps",
        "10",
        "--batch-size",
        "32",
        "--n-val",
        "64",
        "--n-test",
        "64",
        "--n-cache",
        "100",
        "--no-rollout",
        "--quiet",
        "--out",
        str(out),
    ]
    with blank_figures():
        assert main(argv) == 0
    assert "InfoFlow: efficient" in capsys.readouterr().out
    assert (out / "report" / "report.html").is_file()
    checkpoint = load_checkpoint(out / "checkpoint")  # its stored task is found by name
    assert checkpoint.task == MaxPlusMin(T=5)


# ---- refused at registration ---------------------------------------------------------
def task_variant(name="bad-task", body=None, base=MaxPlusMin, decorate=True, **fields):
    """A subclass of ``base`` called ``name`` with ``fields`` (name -> (type, default))
    and methods ``body``; a frozen kw_only dataclass unless ``decorate`` is False."""
    namespace = {"name": name, "__annotations__": {}, **(body or {})}
    for field, (kind, default) in fields.items():
        namespace["__annotations__"][field] = kind
        namespace[field] = default
    cls = type("Bad", (base,), namespace)
    return dataclass(frozen=True, kw_only=True)(cls) if decorate else cls


def plain_task(**options):
    """A Task subclass with fields T, d, seed, made a dataclass with ``options``."""
    namespace = {
        "name": "bad-task",
        "__annotations__": {"T": int, "d": int, "seed": int},
        "T": 4,
        "d": 2,
        "seed": 0,
    }
    return dataclass(**options)(type("Bad", (Task,), namespace))


def batch_mean(self, x):
    return (x @ self.directions[0]).max(axis=1) - (x @ self.directions[0]).max(axis=1).mean()


def bad_reads(self):
    stage = Stage("cls", score=partial(key_projection, direction=self.directions[0]), reads_key=2)
    return ComparisonStructure((Comparison("pair-of-keys", 2, stages=(stage,)),))


REFUSED = {
    "not a task": (lambda: dict, "class: expected a subclass of infoprobe.tasks.Task"),
    "not frozen": (
        lambda: plain_task(kw_only=True),
        "class: expected a @dataclass(frozen=True, kw_only=True), got a class that is not frozen",
    ),
    "positional fields": (
        lambda: plain_task(frozen=True),
        "fields ['T', 'd', 'seed'] that are not keyword-only",
    ),
    "kebab-case name": (lambda: task_variant("TwoHop"), "name: expected a kebab-case string"),
    "built-in name": (
        lambda: task_variant("d-retrieval"),
        "got 'd-retrieval', the name of built-in task infoprobe.tasks.retrieval.DRetrieval",
    ),
    "reserved parameter": (
        lambda: task_variant(steps=(int, 3)),
        "parameter 'steps': expected a name the commands do not use",
    ),
    "unconvertible default": (
        lambda: task_variant(weights=(tuple, (0.5, 1.5))),
        "parameter 'weights': expected a default of a type the command line converts",
    ),
    "type of a shared option": (
        lambda: task_variant(k=(float, 0.5)),
        "parameter 'k': expected an integer like task kth-largest's 'k'",
    ),
    "default construction": (
        lambda: task_variant(T=(int, 0)),
        "default construction: expected Bad() to work, got TaskError: task 'bad-task': "
        "parameter 'T' must be an integer >= 1, got 0",
    ),
    "not vectorised": (
        lambda: task_variant(body={"_target": batch_mean}),
        "_target(x): expected a vectorised target",
    ),
    "wrong shape": (
        lambda: task_variant(body={"_target": lambda self, x: x[:, :2, 0]}),
        "_target(x): expected shape [n, d_out] = [4, 1] or [n] = [4], got shape [4, 2]",
    ),
    "non-finite": (
        lambda: task_variant(body={"_target": lambda self, x: np.full(len(x), np.nan)}),
        "_target(x): expected finite values, got 4 NaN or inf",
    ),
    "structure not data": (
        lambda: task_variant(body={"structure": lambda self: {"max": "a"}}),
        "structure(): expected a ComparisonStructure, got dict",
    ),
    "reads beyond the chain": (
        lambda: task_variant(body={"structure": bad_reads}),
        "Comparison 'pair-of-keys': stage 1 (cls) reads 2 input(s) of each key but the key's "
        "chain holds 1",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_class_breaking_the_contract_is_refused_in_one_line(case):
    make, message = REFUSED[case]
    cls = make()
    before = sorted(TASKS)
    with pytest.raises(TaskError) as info:
        register_task(cls)
    text = str(info.value)
    assert "\n" not in text and message in text, text
    assert text.startswith(f"cannot register class {cls.__module__}.{cls.__qualname__}: ")
    assert sorted(TASKS) == before


def test_another_class_under_a_registered_name_is_refused(registered):
    other = dataclass(frozen=True, kw_only=True)(type("Other", (MaxPlusMin,), {}))
    with pytest.raises(TaskError, match=r"got 'max-plus-min', the name of class .*MaxPlusMin"):
        register_task(other)
    assert task_class("max-plus-min") is MaxPlusMin


def test_reserved_names_cover_the_options_of_the_task_commands():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    params = {f.name for cls in TASKS.values() for f in dataclasses.fields(cls)}
    used = set()
    for name in ("predict", "train", "run", "probe-checkpoint"):
        sub = commands[name]
        used |= set(sub._defaults)
        for action in sub._actions:
            used.add(action.dest)
            used |= {o[2:].replace("-", "_") for o in action.option_strings if o[:2] == "--"}
    assert used - params - {"seed"} <= RESERVED_PARAMETERS


def test_the_engine_names_a_comparison_it_cannot_run():
    """predict takes any Task instance, registered or not: a structure reading more than
    its chains hold is one InfoFlowError naming the comparison, before any scheduling."""
    task = task_variant(body={"structure": bad_reads})()
    with pytest.raises(InfoFlowError) as info:
        predict(task, (1, 1))
    assert "'pair-of-keys': stage 1 (cls) reads 2 input(s)" in str(info.value)


# ---- bad input through the command line ------------------------------------------------
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--T", "0"], "task 'max-plus-min': parameter 'T' must be an integer >= 1, got 0"),
        (["--D", "3"], "task max-plus-min has no parameter(s) ['D']"),
        (["--scale", "nan"], "argument --scale"),
    ],
)
def test_bad_input_for_a_registered_task_is_one_line(registered, tmp_path, capsys, extra, message):
    out = tmp_path / "pred.h5"
    argv = [
        "predict",
        "--task",
        "max-plus-min",
        *extra,
        "--heads",
        "2",
        "--samples",
        "4",
        "--out",
        str(out),
    ]
    try:
        code = main(argv)
    except SystemExit as exit_info:  # argparse's own errors
        code = exit_info.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


# ---- through an entry point ------------------------------------------------------------
PLUGIN = '''
from dataclasses import dataclass
import numpy as np
from infoprobe.tasks import Comparison, ComparisonStructure, Stage, Task

def last_token(q, k):
    """Scores rising with the key's position: [n, 1, K]."""
    return np.broadcast_to(np.arange(k.shape[1], dtype=float), (k.shape[0], 1, k.shape[1]))

@dataclass(frozen=True, kw_only=True)
class Loudest(Task):
    """F(X) = max_t |x(t)|^2, by one CLS retrieval."""
    name = "loudest"
    T: int = 6
    d: int = 2
    seed: int = 0

    def _validate(self):
        self._require_int("T", minimum=1)
        self._require_int("d", minimum=1)

    def _target(self, x):
        return (x ** 2).sum(axis=2).max(axis=1)

    def structure(self):
        score = lambda q, k: (k[:, :, 0] ** 2).sum(axis=2)[:, None, :]
        stage = Stage("cls", score=score, description="CLS retrieves argmax_t |x(t)|^2")
        return ComparisonStructure((Comparison("loudest", 1, stages=(stage,), tuples=self.T),))
'''


@pytest.fixture
def plugin_path(tmp_path):
    """A distribution 'loudest-tasks' on sys.path: entry point 'loudest' (a task), one that
    fails to import ('broken') and one claiming a built-in name ('d-retrieval')."""
    (tmp_path / "loudest_tasks.py").write_text(PLUGIN)
    entries = {"loudest": "loudest_tasks:Loudest", "broken": "loudest_tasks_missing:Task",
               "d-retrieval": "loudest_tasks:Loudest"}  # fmt: skip
    try:
        with installed_distribution(tmp_path, "loudest-tasks", "0.3", GROUP, entries):
            yield tmp_path
    finally:
        sys.modules.pop("loudest_tasks", None)
        discover_plugins(refresh=True)
        assert "loudest" not in TASKS


def test_an_entry_point_task_is_found_by_the_command_line(plugin_path, capsys):
    failed = discover_plugins(refresh=True)
    assert main(["predict", "--task", "loudest", "--T", "7", "--heads", "1", "--E", "8"]) == 0
    out = capsys.readouterr().out
    # one CLS retrieval, readout of one token: alpha = max(1, d/E - 1) = 1
    assert "task: loudest {'T': 7, 'd': 2, 'seed': 0}" in out and "verdict: efficient" in out
    assert "α = 1 at T=7, E=8" in out
    assert "CLS: CLS retrieves argmax_t |x(t)|^2 [loudest, stage 1, max retrieval]" in out
    assert TASKS.origin("loudest").startswith(
        "entry point 'loudest = loudest_tasks:Loudest' of distribution loudest-tasks 0.3"
    )
    # the broken entry point blocks only its own name; the built-in keeps its name
    assert set(failed) == {"broken", "d-retrieval"}
    assert task_class("d-retrieval").__module__ == "infoprobe.tasks.retrieval"
    with pytest.raises(TaskError) as info:
        task_class("broken")
    assert "entry point 'broken = loudest_tasks_missing:Task' of distribution loudest-tasks" in (
        str(info.value)
    ) and "failed to import (ModuleNotFoundError" in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--task", "broken", "--heads", "1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(
        "infoprobe predict: error: argument --task: task 'broken' is "
        "unavailable: entry point 'broken"
    )


def test_a_new_process_finds_entry_point_tasks_by_itself(plugin_path):
    """A fresh process, no registration call anywhere: importing infoprobe.tasks and
    looking up a built-in import no plugin; the first unknown name does."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), *sys.path])}
    script = textwrap.dedent("""
        import json
        import infoprobe.tasks as tasks
        tasks.make_task("d-retrieval")
        assert not tasks.TASKS._discovered
        print(json.dumps(tasks.make_task("loudest", T=3).to_dict()))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"name": "loudest", "params": {"T": 3, "d": 2, "seed": 0}}


def test_the_positional_structure_of_docs_tasks_md_predicts_position_aggregation():
    """docs/tasks.md's positional example, run as printed: CLS aggregates the first and
    last positions in one head (with positional encoding), every sample the same set."""
    import re
    from pathlib import Path

    from infoprobe.model import ModelConfig

    text = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text()
    block = re.search(r"<!-- positional-structure -->\n```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "docs/tasks.md", "exec"), namespace)
    task = namespace["FirstTimesLast"]()
    x, y = task.sample(16, np.random.default_rng(0))
    assert np.allclose(y[:, 0], x[:, 0, 0] * x[:, -1, 0], atol=1e-5)
    cfg = ModelConfig(d_in=2, n_ctx=8, heads=(1,), pos_encoding="learned")
    prediction = predict(task, cfg)
    sets = prediction.sets(x)  # [L+1, n, T+1, T+1]
    expected = np.zeros(9, bool)
    expected[[0, 7, 8]] = True  # positions 0 and 7, and CLS itself
    assert (sets[1, :, 8] == expected).all()
    assert (sets[1, :, :8] == sets[0, :, :8]).all()  # the data tokens take nothing
