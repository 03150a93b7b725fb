"""A model built by the user's own code: its factory, site map and InfoFlow architecture.

A :class:`ForeignConfig` plays the part :class:`infoprobe.model.ModelConfig` plays for
infoprobe's own model: it is the ``model_config`` of a checkpoint, of a cache's
provenance and of the InfoFlow prediction. The factory (``"module:function"``) is
imported, never unpickled: ``function(**kwargs)`` returns a freshly initialised
``torch.nn.Module`` (the random-init control is that module under a fixed torch seed), the
checkpoint's safetensors weights are loaded into it, and the site map (or the module's
own TransformerLens hook points) gives the instruments their hook points.
"""

from __future__ import annotations

import importlib
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformer_lens import HookedRootModule

from infoprobe.foreign.adapter import HookedAdapter, adapt
from infoprobe.foreign.errors import ForeignModelError
from infoprobe.foreign.sites import SiteMap
from infoprobe.foreign.trust import (
    check_defined_in,
    check_model_class,
    locate_module,
    same_file,
)

FACTORY = "factory"
"""The key that marks a ``model_config`` as a foreign model's."""
FIELDS = ("factory", "kwargs", "sites", "heads", "d_model", "d_head", "pos_encoding",
          "n_ctx", "d_in", "d_out")  # fmt: skip


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ForeignModelError(f"foreign model_config field {name!r}: expected an integer >= 1, "
                                f"got {value!r}")  # fmt: skip
    return int(value)


@dataclass(frozen=True)
class ForeignConfig:
    """A foreign model (module doc).

    Args:
        factory: ``"module:function"``; ``function(**kwargs)`` builds the model. The module
            is imported from ``sys.path`` or, failing that, from the checkpoint's folder.
        kwargs: JSON keyword arguments of the factory.
        sites: where the states live (:class:`SiteMap`); None when the model is a
            ``HookedRootModule`` with TransformerLens hook names already.
        heads: (h_1, ..., h_L), heads per block (InfoFlow's architecture; L = depth).
        d_model: E, the residual width.
        d_head: per-head width n (None: E / h_l).
        pos_encoding: ``"none"`` when the model has no positional information; any other
            name (``"learned"``, ``"sinusoidal"``, ``"rotary"``) when it has.
        n_ctx, d_in, d_out: T, d and the output width (the task's).
    """

    factory: str
    heads: tuple[int, ...]
    d_model: int
    n_ctx: int
    d_in: int
    d_out: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)
    sites: SiteMap | None = None
    d_head: int | None = None
    pos_encoding: str = "none"

    def __post_init__(self) -> None:
        text = self.factory if isinstance(self.factory, str) else ""
        module, _, function = text.partition(":")
        if not (module and function and all(p.isidentifier() for p in module.split("."))
                and function.isidentifier()):  # fmt: skip
            raise ForeignModelError(
                f"foreign model_config field 'factory': expected 'module:function' (for "
                f"example 'mymodels:build'), got {self.factory!r}"
            )
        heads = self.heads
        if isinstance(heads, str | bytes) or not isinstance(heads, list | tuple) or not heads:
            raise ForeignModelError(
                f"foreign model_config field 'heads': expected a list of heads per block, "
                f"got {heads!r}"
            )
        object.__setattr__(self, "heads", tuple(_positive(h, "heads") for h in heads))
        for name in ("d_model", "n_ctx", "d_in", "d_out"):
            object.__setattr__(self, name, _positive(getattr(self, name), name))
        if self.d_head is not None:
            object.__setattr__(self, "d_head", _positive(self.d_head, "d_head"))
        if not isinstance(self.kwargs, Mapping):
            raise ForeignModelError(
                f"foreign model_config field 'kwargs': expected an object, got {self.kwargs!r}"
            )
        if not isinstance(self.pos_encoding, str) or not self.pos_encoding:
            raise ForeignModelError(
                "foreign model_config field 'pos_encoding': expected 'none' or the name of the "
                f"model's positional encoding, got {self.pos_encoding!r}"
            )
        sites = self.sites
        if sites is not None and not isinstance(sites, Mapping | SiteMap):
            raise ForeignModelError(
                "foreign model_config field 'sites': expected an object with 'embed', "
                f"'blocks' and optionally 'pattern', or null, got {sites!r}"
            )
        if isinstance(sites, Mapping):
            sites = SiteMap.from_dict(
                {"n_layers": len(self.heads), **sites}, "foreign model_config field 'sites'"
            )
            object.__setattr__(self, "sites", sites)
        if sites is not None and sites.layers != len(self.heads):
            raise ForeignModelError(
                f"foreign model_config: field 'sites' names {sites.layers} blocks, field "
                f"'heads' {len(self.heads)} ({list(self.heads)})"
            )

    @property
    def n_layers(self) -> int:
        """L, the number of blocks."""
        return len(self.heads)

    def d_head_of(self, block: int) -> int:
        """n for block ``block`` (0-based)."""
        return self.d_head if self.d_head is not None else max(1, self.d_model // self.heads[block])

    def to_dict(self) -> dict[str, Any]:
        return {
            "factory": self.factory,
            "kwargs": dict(self.kwargs),
            "sites": None if self.sites is None else self.sites.to_dict(),
            "heads": list(self.heads),
            "d_model": self.d_model,
            "d_head": self.d_head,
            "pos_encoding": self.pos_encoding,
            "n_ctx": self.n_ctx,
            "d_in": self.d_in,
            "d_out": self.d_out,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ForeignConfig:
        unknown = sorted(set(d) - set(FIELDS))
        missing = [n for n in ("factory", "heads", "d_model", "n_ctx", "d_in") if n not in d]
        if unknown or missing:
            raise ForeignModelError(
                f"foreign model_config: unknown field(s) {unknown}, missing field(s) "
                f"{missing}; valid: {list(FIELDS)}"
            )
        return cls(**d)

    # ---- building ------------------------------------------------------------------
    def import_factory(self, folder: Path | None = None):
        """The factory function; ``folder`` (the checkpoint's) is searched after sys.path.

        Imports and so runs the module: callers decide trust first
        (:func:`infoprobe.foreign.trust.check_trusted`). A module that raises SystemExit or
        KeyboardInterrupt while importing is reported as a :class:`ForeignModelError`."""
        module_name, _, function = self.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            local = folder is not None and self.local_file(folder).is_file()
            if not local or err.name != module_name.split(".")[0]:
                raise ForeignModelError(
                    f"foreign model_config field 'factory' {self.factory!r}: cannot import "
                    f"module {module_name!r} ({err}); put it on PYTHONPATH"
                    + (f" or beside {folder / 'checkpoint.json'}" if folder else "")
                ) from None
            module = _import_from(folder, module_name)
        except (Exception, SystemExit, KeyboardInterrupt) as err:  # the module failed
            raise ForeignModelError(
                f"foreign model_config field 'factory' {self.factory!r}: importing module "
                f"{module_name!r} failed: {_raised(err)}"
            ) from None
        expected, loaded = locate_module(module_name, folder), getattr(module, "__file__", None)
        if expected is not None and loaded and not same_file(Path(loaded), expected):
            raise ForeignModelError(
                f"foreign model_config field 'factory' {self.factory!r}: module "
                f"{module_name!r} is already imported from {loaded}, but this checkpoint's "
                f"lies at {expected.resolve()}; load it in a new process"
            )
        fn = getattr(module, function, None)
        if not callable(fn):
            raise ForeignModelError(
                f"foreign model_config field 'factory' {self.factory!r}: module "
                f"{module_name!r} has no function {function!r}"
            )
        check_defined_in(fn, self.factory)
        check_model_class(fn, self.factory, expected, folder)
        return fn

    def local_file(self, folder: Path) -> Path:
        """Where the factory's (top-level) module would lie beside a checkpoint in
        ``folder``: ``folder / "<module>.py"``."""
        return folder / f"{self.factory.partition(':')[0].split('.')[0]}.py"

    def build(self, seed: int = 0, folder: Path | None = None) -> HookedRootModule:
        """A freshly initialised model (torch seeded with ``seed``, the caller's RNG state
        untouched), with its hook points; eval mode, float32, on the CPU."""
        fn = self.import_factory(folder)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                model = fn(**self.kwargs)
            except (Exception, SystemExit, KeyboardInterrupt) as err:
                raise ForeignModelError(
                    f"foreign model_config field 'factory' {self.factory!r} with kwargs "
                    f"{dict(self.kwargs)} failed: {_raised(err)}"
                ) from None
        if not isinstance(model, nn.Module):
            raise ForeignModelError(
                f"foreign model_config field 'factory' {self.factory!r} returned "
                f"{type(model).__name__}, expected a torch.nn.Module"
            )
        return adapt(model.float(), self.sites).eval()


def _import_from(folder: Path, module_name: str):
    """Import ``module_name`` with ``folder`` first on sys.path (removed again after)."""
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(module_name)
    except (Exception, SystemExit, KeyboardInterrupt) as err:
        raise ForeignModelError(
            f"importing {module_name!r} from {folder} failed: {_raised(err)}"
        ) from None
    finally:
        sys.path.remove(str(folder))


def _raised(err: BaseException) -> str:
    """What foreign code raised, in one line (SystemExit and KeyboardInterrupt included:
    the user's code ending the process is reported, not obeyed)."""
    return f"{type(err).__name__}: {err}" if str(err) else f"{type(err).__name__}"


def is_foreign(config: Mapping[str, Any]) -> bool:
    """Whether a ``model_config`` dict describes a foreign model (it names a factory)."""
    return isinstance(config, Mapping) and FACTORY in config


def weights_module(model: nn.Module) -> nn.Module:
    """The module whose ``state_dict`` a checkpoint stores: the user's, inside an adapter."""
    return model.wrapped if isinstance(model, HookedAdapter) else model


def config_from_dict(d: Mapping[str, Any]):
    """A ``model_config`` dict as a :class:`ForeignConfig` (it names a factory) or as
    infoprobe's own :class:`infoprobe.model.ModelConfig`."""
    from infoprobe.model import ModelConfig

    return ForeignConfig.from_dict(d) if is_foreign(d) else ModelConfig.from_dict(d)


def build_model(config, seed: int = 0, folder: Path | None = None) -> HookedRootModule:
    """A freshly initialised model of ``config`` (ModelConfig or ForeignConfig) from ``seed``
    (``folder``: where a foreign factory's module may lie)."""
    if isinstance(config, ForeignConfig):
        return config.build(seed, folder)
    from infoprobe.model import InfoFlowTransformer

    return InfoFlowTransformer(config, seed=seed).eval()


def hides_patterns(config: Mapping[str, Any]) -> bool:
    """Whether a ``model_config`` dict is a foreign model's whose site map names no
    attention pattern (or that brings its own hook points, which may lack them)."""
    if not is_foreign(config):
        return False
    sites = config.get("sites")
    return not isinstance(sites, Mapping) or sites.get("pattern") is None
