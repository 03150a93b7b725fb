"""The task contract: a frozen, serialisable spec with a deterministic generator.

Every task is a frozen dataclass (``kw_only``) subclassing :class:`Task`. Its fields are
its parameters (paper letters: ``T``, ``d``, ``D``, ``k``, ``T0``; plus ``seed``, which
fixes the task's own random parameters such as the matrices A_i). Samples come from a
generator the caller passes to :meth:`Task.sample`, never from the seed.
"""

import dataclasses
import numbers
from typing import Any, ClassVar

import numpy as np

from .errors import TaskError
from .structure import ComparisonStructure


class Task:
    """Base class of every task (subclasses are frozen, keyword-only dataclasses).

    Class attributes: ``name`` (kebab-case registry name), ``needs_positions`` (the
    target depends on token order, so a model needs positional encoding).
    Subclasses implement ``_validate`` (check fields with :meth:`_require_int` & co.),
    ``d_out`` and ``_target(x)`` (float64 ``[n, T, d] -> [n, d_out]``, vectorised), and
    may override ``_draw_inputs`` (default: i.i.d. standard normal tokens).
    """

    name: ClassVar[str]
    needs_positions: ClassVar[bool] = False
    T: int
    d: int
    seed: int

    # ---- construction and validation -------------------------------------------------
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(f.default, tuple) and isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))  # JSON lists back to tuples
        self._require_int("seed", minimum=0)
        self._validate()

    def _validate(self) -> None:
        raise NotImplementedError

    def _fail(self, field: str, expected: str, got: Any) -> TaskError:
        return TaskError(f"task '{self.name}': parameter '{field}' must be {expected}, got {got!r}")

    def _require_int(self, field: str, minimum: int, why: str = "") -> int:
        """Check that ``field`` is an integer >= ``minimum`` and store it as a plain int."""
        value = getattr(self, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise self._fail(field, "an integer", value)
        if value < minimum:
            reason = f" ({why})" if why else ""
            raise self._fail(field, f"an integer >= {minimum}{reason}", value)
        object.__setattr__(self, field, int(value))
        return int(value)

    def _require_bool(self, field: str) -> bool:
        value = getattr(self, field)
        if not isinstance(value, bool | np.bool_):
            raise self._fail(field, "true or false", value)
        object.__setattr__(self, field, bool(value))
        return bool(value)

    # ---- serialisation ---------------------------------------------------------------
    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The parameter names this task accepts, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def params(self) -> dict[str, Any]:
        """All parameters (seed included) as JSON-ready values (tuples become lists)."""
        out = {}
        for field in self.param_names():
            value = getattr(self, field)
            out[field] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., "params": {...}}``; ``task_from_dict`` inverts it."""
        return {"name": self.name, "params": self.params()}

    # ---- shapes ----------------------------------------------------------------------
    @property
    def d_out(self) -> int:
        """Target dimension (1 for scalar targets)."""
        return 1

    # ---- data ------------------------------------------------------------------------
    def _parameter_rng(self) -> np.random.Generator:
        """A fresh generator for the task's own random parameters (from ``seed``)."""
        return np.random.default_rng(self.seed)

    def _draw_inputs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.standard_normal((n, self.T, self.d), dtype=np.float32)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` samples: ``x`` float32 ``[n, T, d]``, ``y`` float32 ``[n, d_out]``.

        Deterministic given the state of ``rng`` (a ``numpy.random.Generator``).
        """
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise TaskError(f"task '{self.name}': sample size n must be an integer >= 0, got {n!r}")
        if not isinstance(rng, np.random.Generator):
            kind = type(rng).__name__
            raise TaskError(f"task '{self.name}': rng must be a numpy.random.Generator, got {kind}")
        x = self._draw_inputs(int(n), rng)
        return x, self.target(x)

    def check_inputs(self, x: np.ndarray) -> np.ndarray:
        """Validate ``x`` of shape ``[n, T, d]`` and return it as a numpy array."""
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[1:] != (self.T, self.d):
            raise TaskError(
                f"task '{self.name}': inputs x must have shape [n, T={self.T}, d={self.d}], "
                f"got {list(x.shape)}"
            )
        return x

    def target(self, x: np.ndarray) -> np.ndarray:
        """The task's target for inputs ``x`` ``[n, T, d]``: float32 ``[n, d_out]``.

        Computed in float64 and vectorised over samples (chunked where the task's
        temporaries are large).
        """
        x = self.check_inputs(x)
        y = self._target(x.astype(np.float64))
        return np.ascontiguousarray(y, dtype=np.float32).reshape(x.shape[0], self.d_out)

    def _target(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def structure(self) -> ComparisonStructure:
        """The comparisons the target needs, as plain data for the InfoFlow engine."""
        raise NotImplementedError(f"task '{self.name}' declares no comparison structure")


def unit_vectors(rng: np.random.Generator, count: int, d: int) -> np.ndarray:
    """``count`` directions drawn uniformly on the unit sphere of R^d: ``[count, d]``."""
    a = rng.standard_normal((count, d))
    return a / np.linalg.norm(a, axis=1, keepdims=True)
