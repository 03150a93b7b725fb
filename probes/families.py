"""The probe families, by name: what the pipeline, compare and report ask of each one.

A family is one module that fits probes; it is known to the rest of the toolkit only
through its :class:`ProbeFamily` entry here, which says how its results are made and
read (:data:`KINDS`), its default training budget, the fewest test samples it needs and
where its fitting function is. Built-in families are listed by import path, so naming
them imports nothing; another family, your own, is added with :func:`register` (its
module alone: nothing else is edited)::

    from infoprobe.probes.families import ProbeFamily, register
    register(ProbeFamily("mine", "my probe", kind="regression", fit_sets=fit_my_probe_sets))

then ``probe_cache(..., settings=ProbeSettings(probe="mine"))`` in that process; or, for
every process, the ``infoprobe`` command included, an entry point of your distribution
naming the entry (its name must be the family's)::

    [project.entry-points."infoprobe.probe_families"]
    mine = "mypkg.probes:MINE"

A family that fails to import, or that claims a built-in's name, makes only its own name
unavailable. A ``regression`` family's
``fit_sets(datasets, train_idx, val_idx, test_idx, *, hidden, budget, device, progress)``
returns one fit per ``(X [n, C, E], Y [n, S, k])`` dataset with ``r2`` and ``nmse`` ``[C,
S]``, ``test_pred [n_test, C, S, k]`` and ``engine`` (:class:`~infoprobe.probes.chunked_fit.
ChunkedFit`), and may add per-sample ``errors [n_test, C, S]``
(:func:`infoprobe.probes.mlp.fit_mlp_probe_sets` is one).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from infoprobe.base.plugins import load_entry_points
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.settings import TrainingBudget

__all__ = ["FAMILY_NAMES", "GROUP", "KINDS", "ProbeFamily", "discover_families", "family",
           "register"]  # fmt: skip

GROUP = "infoprobe.probe_families"
"""The entry-point group a distribution lists its probe families in."""

Kind = Literal["closed_form", "regression", "density"]
KINDS: dict[str, str] = {
    "closed_form": "ridge probes solved from streamed statistics (role targets too)",
    "regression": "trained probes predicting x(s): R² per cell, per-sample errors if given",
    "density": "trained densities of x(s): V-information per cell, per-sample rank p-values",
}
"""How a family's results are made and read; the pipeline and compare follow the kind."""


@dataclass(frozen=True)
class ProbeFamily:
    """One probe family.

    ``name``: its ``--probe`` value; ``summary``: one line for ``--help``; ``kind``: one of
    :data:`KINDS`; ``fit_sets``: the function fitting a probe and its controls (a callable,
    or ``"module:function"`` imported on first use; none for the closed form);
    ``budget``: its training budget when none is given (None: ``TrainingBudget()``);
    ``check_test_split``: a callable (or ``"module:function"``) of (test samples, false
    discovery rate q) raising ``SplitTooSmallError`` when the test split is too small.
    """

    name: str
    summary: str
    kind: Kind
    fit_sets: Callable[..., Any] | str | None = None
    budget: TrainingBudget | None = None
    check_test_split: Callable[[int, float], None] | str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ProbeInputError(
                f"ProbeFamily.kind: expected one of {tuple(KINDS)}, got {self.kind!r}"
            )
        if self.kind != "closed_form" and self.fit_sets is None:
            raise ProbeInputError(f"ProbeFamily {self.name!r}: a trained family needs fit_sets")

    @property
    def trained(self) -> bool:
        """Fitted by the batched engine (a budget and a hidden width apply)."""
        return self.kind != "closed_form"

    def default_budget(self) -> TrainingBudget:
        """The budget a run uses when none is given."""
        return self.budget or TrainingBudget()

    def fit(self, *args: Any, **kwargs: Any) -> list[Any]:
        """``fit_sets(*args, **kwargs)``: one fit per dataset."""
        return _resolve(self.fit_sets)(*args, **kwargs)

    def check_split(self, n_test: int, q: float) -> None:
        """Refuse a test split too small for this family (nothing for most)."""
        if self.check_test_split is not None:
            _resolve(self.check_test_split)(n_test, q)


def _resolve(target: Callable[..., Any] | str | None) -> Callable[..., Any]:
    """A callable, or the function a ``"module:function"`` path names."""
    if callable(target):
        return target
    module, _, name = str(target).partition(":")
    return getattr(importlib.import_module(module), name)


_FAMILIES: dict[str, ProbeFamily] = {}
_BUILT_IN: set[str] = set()
_INSTALLED: set[str] = set()
"""The names registered from entry points (a refresh replaces them)."""
_REFUSED: dict[str, str] = {}
"""Entry points that could not be registered: name -> why (their names stay unavailable)."""
_discovered = False


def register(entry: ProbeFamily) -> ProbeFamily:
    """Add (or replace) a family under its name; returns it."""
    _FAMILIES[entry.name] = entry
    return entry


def discover_families(refresh: bool = False) -> dict[str, str]:
    """Register the families of the entry-point group :data:`GROUP` (once per process, or
    again with ``refresh``); returns the entry points refused, name -> why."""
    global _discovered
    if _discovered and not refresh:
        return dict(_REFUSED)
    _discovered = True
    for name in _INSTALLED:
        _FAMILIES.pop(name, None)
    _INSTALLED.clear()
    _REFUSED.clear()
    for ep in load_entry_points(GROUP):
        target = ep.target
        if ep.error is not None:
            _REFUSED[ep.name] = f"{ep.origin}: {ep.error}"
        elif not isinstance(target, ProbeFamily) or target.name != ep.name:
            _REFUSED[ep.name] = f"{ep.origin}: expected a ProbeFamily named {ep.name!r}"
        elif ep.name in _BUILT_IN:
            _REFUSED[ep.name] = f"{ep.origin}: {ep.name!r} is a built-in family's name"
        else:
            _INSTALLED.add(register(target).name)
    return dict(_REFUSED)


def family(name: str) -> ProbeFamily:
    """The family registered as ``name`` (:class:`ProbeInputError` naming the known ones,
    or why an installed one is unavailable)."""
    discover_families()
    try:
        return _FAMILIES[name]
    except (KeyError, TypeError):
        if isinstance(name, str) and name in _REFUSED and name not in _FAMILIES:
            raise ProbeInputError(f"probe {name!r} is unavailable: {_REFUSED[name]}") from None
        raise ProbeInputError(f"probe: expected one of {tuple(_FAMILIES)}, got {name!r}") from None


class _Names(Sequence[str]):
    """The registered family names, live: ``in``, iteration and ``len`` read the registry
    (argparse's ``choices`` and the settings' checks see families registered later)."""

    def __getitem__(self, index):  # type: ignore[override]
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())

    @staticmethod
    def _names() -> tuple[str, ...]:
        discover_families()
        return tuple(_FAMILIES)


FAMILY_NAMES: Sequence[str] = _Names()
"""Every registered family's name, in registration order."""

register(ProbeFamily("linear", "ridge probes from streamed statistics", "closed_form"))
register(
    ProbeFamily(
        "mlp",
        "one MLP per (cell, position)",
        "regression",
        fit_sets="infoprobe.probes.mlp:fit_mlp_probe_sets",
    )
)
register(
    ProbeFamily(
        "query",
        "one MLP per cell, asked for every position: per-sample errors",
        "regression",
        fit_sets="infoprobe.probes.query:fit_query_probe_sets",
    )
)
register(
    ProbeFamily(
        "critic",
        "a density of x(s) given the state: per-sample V-information and rank p-values",
        "density",
        fit_sets="infoprobe.probes.critic:fit_critic_probe_sets",
        # maximum likelihood: the content components need larger steps than a regression
        # (on the planted content-copy model, 100 epochs at lr 1e-3 reach a recall of 0.50
        # on the content-selected key, at 1e-2 1.00)
        budget=TrainingBudget(lr=1e-2),
        check_test_split="infoprobe.probes.critic:check_test_split",
    )
)
_BUILT_IN.update(_FAMILIES)
