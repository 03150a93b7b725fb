"""The checks a task class passes before it is registered (from Python or an entry point).

:func:`check_task_class` builds the task with its defaults, draws ``SAMPLE_N`` samples
from ``numpy.random.default_rng(0)`` and checks the contract of :class:`~.spec.Task`:
a frozen keyword-only dataclass with a kebab-case ``name``; fields ``T``, ``d``, ``seed``;
parameters the command line can carry (:func:`cli_kind`, not one of
:data:`RESERVED_PARAMETERS`); inputs float32 ``[n, T, d]``; a vectorised, finite target
``[n, d_out]``; and a comparison structure the engine can run at the task's T.
"""

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import TaskError
from .spec import Task
from .structure import Comparison, ComparisonStructure

SAMPLE_N = 4
"""Samples drawn from ``numpy.random.default_rng(0)`` to check a task's data."""
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
"""Task names are kebab-case: lower-case words of letters and digits joined by '-'."""
REQUIRED_FIELDS = ("T", "d", "seed")
"""Every task has them: the model reads T and d, ``seed`` fixes the task's own draws."""
RESERVED_PARAMETERS = frozenset(
    """batch_size budget_minutes cache cache_batch checkpoint command compile d_head d_mlp
    d_model d_readout data_seed device dtype E eval_every func grad_clip grid grid_heads
    grid_T heads help init_gain inputs json kth_law layer_norm layers linear_beside lr
    n_cache n_test n_train n_val no_linear_beside no_residual no_rollout null_q
    orientation out overwrite parser_defaults patience plot pos_encoding probe quiet
    residual restart rollout samples seeds sets sites state_every steps targets task
    task_seed threads trust_code warmup weight_decay""".split()
)
"""Names the commands taking ``--task`` (predict, train, run, probe-checkpoint) use for
their own options and defaults; a task parameter ``P`` becomes option ``--P``, so it may
not be one of them (a task's ``seed`` is ``--task-seed``)."""
KINDS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a float",
    "str": "a string",
    "ints": "a tuple of integers",
}
"""Parameter types the command line converts, by kind, in words."""


def cli_kind(value: Any) -> str | None:
    """The kind of option (a key of :data:`KINDS`) a parameter with this default takes;
    None when the command line cannot convert it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return "ints"
    return None


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default value (calling its factory); MISSING when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def check_task_class(cls: Any, origin: str, others: Mapping[str, type[Task]]) -> None:
    """Raise TaskError (one line naming ``origin``, the field, expected and actual) unless
    ``cls`` honours the task contract; ``others`` are the tasks registered so far, whose
    parameters of the same name share one command-line option with ``cls``'s."""

    def fail(field: str, expected: str, got: Any) -> TaskError:
        text = " ".join(str(got).split())
        return TaskError(f"cannot register {origin}: {field}: expected {expected}, got {text}")

    _check_class(cls, fail)
    _check_parameters(cls, others, fail)
    try:
        task = cls()
    except Exception as err:
        raise fail("default construction", f"{cls.__name__}() to work", _error(err)) from None
    _check_round_trip(cls, task, fail)
    _check_data(task, fail)
    _check_structure(task, fail)


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _check_class(cls: Any, fail) -> None:
    if not isinstance(cls, type) or not issubclass(cls, Task):
        got = cls.__name__ if isinstance(cls, type) else repr(cls)
        raise fail("class", "a subclass of infoprobe.tasks.Task", got)
    params = getattr(cls, "__dataclass_params__", None)
    if not dataclasses.is_dataclass(cls) or not params.frozen:
        raise fail("class", "a @dataclass(frozen=True, kw_only=True)", "a class that is not frozen")
    fields = dataclasses.fields(cls)
    positional = [f.name for f in fields if not f.kw_only]
    if positional:
        raise fail(
            "class",
            "a @dataclass(frozen=True, kw_only=True)",
            f"fields {positional} that are not keyword-only",
        )
    names = {f.name for f in fields}
    if "name" in names:
        raise fail("name", "a class attribute (name = 'my-task', no annotation)", "a field")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise fail("name", "a kebab-case string such as 'two-hop'", repr(name))
    missing = [f for f in REQUIRED_FIELDS if f not in names]
    if missing:
        raise fail(
            "fields",
            f"fields {list(REQUIRED_FIELDS)} (ints with defaults)",
            f"no field {', '.join(missing)}",
        )
    if not isinstance(getattr(cls, "needs_positions", None), bool):
        raise fail("needs_positions", "True or False", repr(cls.needs_positions))


def _check_parameters(cls: type[Task], others: Mapping[str, type[Task]], fail) -> None:
    for f in dataclasses.fields(cls):
        where = f"parameter '{f.name}'"
        if not f.init:
            raise fail(where, "a field set by the constructor", "init=False")
        if f.name == "seed":
            continue
        if f.name in RESERVED_PARAMETERS:
            raise fail(
                where,
                "a name the commands do not use for their own options "
                "(reserved: see infoprobe.tasks.RESERVED_PARAMETERS)",
                repr(f.name),
            )
        default = field_default(f)
        if default is dataclasses.MISSING:
            raise fail(where, "a default value", "none")
        kind = cli_kind(default)
        if kind is None:
            raise fail(
                where,
                f"a default of a type the command line converts ({', '.join(KINDS.values())})",
                f"{default!r} ({type(default).__name__})",
            )
        for other_name, other in others.items():
            if other_name == cls.name or f.name not in other.param_names():
                continue
            theirs = cli_kind(field_default(_field(other, f.name)))
            if theirs != kind:
                raise fail(
                    where,
                    f"{KINDS[theirs]} like task {other_name}'s '{f.name}' (one "
                    f"option --{f.name} serves every task)",
                    f"{default!r}",
                )


def _field(cls: type[Task], name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _check_round_trip(cls: type[Task], task: Task, fail) -> None:
    for field in ("T", "d", "seed"):
        value = getattr(task, field)
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(f"parameter '{field}'", "an integer", repr(value))
    try:
        json.dumps(task.to_dict())
        again = cls(**task.params())
    except Exception as err:
        raise fail("to_dict()", "JSON that rebuilds the task", _error(err)) from None
    if again != task:
        raise fail("to_dict()", "parameters that rebuild an equal task", f"{again!r} from {task!r}")
    d_out = task.d_out
    if isinstance(d_out, bool) or not isinstance(d_out, int) or d_out < 1:
        raise fail("d_out", "an integer >= 1", repr(d_out))


def _check_data(task: Task, fail) -> None:
    n, shape = SAMPLE_N, (SAMPLE_N, task.T, task.d)
    try:
        x = task._draw_inputs(n, np.random.default_rng(0))
    except Exception as err:
        raise fail("_draw_inputs(n, rng)", f"inputs {list(shape)}", _error(err)) from None
    if not isinstance(x, np.ndarray) or x.shape != shape or x.dtype != np.float32:
        got = f"{type(x).__name__} {list(getattr(x, 'shape', []))} {getattr(x, 'dtype', '')}"
        raise fail("_draw_inputs(n, rng)", f"a float32 array [n, T, d] = {list(shape)}", got)
    if not np.isfinite(x).all():
        raise fail("_draw_inputs(n, rng)", "finite inputs", "NaN or infinite values")
    batch = _raw_target(task, x, fail)
    alone = np.concatenate([_raw_target(task, x[i : i + 1], fail) for i in range(n)])
    if not np.allclose(batch, alone, rtol=1e-5, atol=1e-6):
        i = int(np.argwhere(~np.isclose(batch, alone, rtol=1e-5, atol=1e-6))[0][0])
        raise fail(
            "_target(x)",
            "a vectorised target (row i depends on sample i only: the "
            "target of a batch equals the targets of its samples one by one)",
            f"sample {i}: {batch[i].tolist()} in a batch of {n}, {alone[i].tolist()} alone",
        )


def _raw_target(task: Task, x: np.ndarray, fail) -> np.ndarray:
    """``task._target`` of float32 inputs ``[m, T, d]``, checked: float64 ``[m, d_out]``."""
    m, want = x.shape[0], f"[n, d_out] = [{x.shape[0]}, {task.d_out}]"
    try:
        y = np.asarray(task._target(x.astype(np.float64)))
    except Exception as err:
        raise fail("_target(x)", f"values {want}", _error(err)) from None
    if y.dtype.kind not in "biuf":
        raise fail("_target(x)", "real numbers", f"dtype {y.dtype}")
    if y.shape not in ((m, task.d_out), *([(m,)] if task.d_out == 1 else [])):
        shapes = want + (f" or [n] = [{m}]" if task.d_out == 1 else "")
        raise fail("_target(x)", f"shape {shapes}", f"shape {list(y.shape)}")
    if not np.isfinite(y).all():
        raise fail("_target(x)", "finite values", f"{int((~np.isfinite(y)).sum())} NaN or inf")
    return y.astype(np.float64).reshape(m, task.d_out)


def _check_structure(task: Task, fail) -> None:
    try:
        structure = task.structure()
    except Exception as err:
        raise fail("structure()", "a ComparisonStructure", _error(err)) from None
    if not isinstance(structure, ComparisonStructure):
        raise fail("structure()", "a ComparisonStructure", type(structure).__name__)
    try:
        structure.check_fits(task.T)
    except TaskError as err:
        raise fail("structure()", f"comparisons the engine can run at T={task.T}", err) from None
    rng = np.random.default_rng(0)
    for comparison in structure.comparisons:
        for c in (comparison, comparison.mirror):
            if c is not None:
                _check_scores(c, task, rng, fail)


def _check_scores(c: Comparison, task: Task, rng: np.random.Generator, fail) -> None:
    """Call each stage's score on random chains of the declared sizes."""
    n, T, d = SAMPLE_N, task.T, task.d
    for j, stage in enumerate(c.stages, 1):
        Q = T if stage.group == "data" else 1
        q = rng.standard_normal((n, Q, stage.reads_query, d)) if stage.reads_query else None
        k = rng.standard_normal((n, T, stage.reads_key, d))
        where = f"structure(): comparison {c.label!r} stage {j} score(q, k)"
        try:
            scores = np.asarray(stage.score(q, k))
        except Exception as err:
            raise fail(where, f"scores [n, Q, K] = [{n}, {Q}, {T}]", _error(err)) from None
        if (
            scores.ndim != 3
            or scores.shape[0] != n
            or scores.shape[2] != T
            or (scores.shape[1] not in (1, Q))
        ):
            raise fail(
                where, f"scores [n, Q, K] = [{n}, {Q} (or 1), {T}]", f"shape {list(scores.shape)}"
            )
        if scores.dtype.kind not in "biuf" or np.isnan(scores).any():
            raise fail(where, "real scores without NaN", f"dtype {scores.dtype}")
