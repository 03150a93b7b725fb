"""Lazy re-exports: a package's public names loaded from their modules at first use, so
importing the package stays light and free of import cycles."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


class _LazyPackage(types.ModuleType):
    """A package whose public names are loaded at first use. A submodule that shares its
    name with a public name (``infoflow.predict``, the module of the function ``predict``)
    is not bound over that name when it is imported: the name keeps meaning the export,
    as it did when packages imported their names eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        exports = self.__dict__.get("_EXPORTS", {})
        if isinstance(value, types.ModuleType) and name in exports:
            return  # the submodule stays reachable as sys.modules[f"{package}.{name}"]
        super().__setattr__(name, value)


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package`` whose module globals are
    ``namespace``: ``exports`` maps each public name to the module that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    module = sys.modules.get(package)
    if module is not None and type(module) is types.ModuleType:
        namespace.setdefault("_EXPORTS", exports)
        module.__class__ = _LazyPackage

    return __getattr__, __dir__


def deferred(module: str, name: str) -> Callable[..., Any]:
    """A function that imports ``module`` and calls its ``name`` when first called, for code
    that must be importable (listed, described) without loading what it computes with."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{module}.{name}``, imported at the first call."
    return call
