"""Which code a foreign checkpoint would run, found without running any of it.

A checkpoint whose ``model_config`` names a factory (``module:function``) makes infoprobe
import that module and call the function with the kwargs the JSON gives. That is code
chosen by whoever wrote the file, so it runs only when the caller says so
(``trust_code=True``, ``--trust-code``). This module answers the questions asked before
that: which file the import would execute (:func:`locate_module`, through the import
system's finders, which read no module), what it hashes to, and what the model's code as
a whole hashes to (:func:`model_code_sha256`), so every file made from the model records
the code beside the weights.

Rules (docs/own-model.md, "Trust"):
- no factory is trusted by default, wherever its module lies (an installed package
  called with a stranger's kwargs can delete files as well as ``shutil.rmtree``);
- a factory from the standard library or ``builtins`` is refused even with trust: no
  model is built by ``os:system``;
- ``--trust-code`` trusts the checkpoint folder's code: a factory whose module file lies
  in the folder (or has the bytes of a ``.py`` file in it, the copy ``save_checkpoint``
  makes) may be any function or class defined there; a factory whose module lies
  elsewhere (an installed package) must be a model class, an ``nn.Module`` subclass: a
  function there (``torch:load``) is refused before its module is imported, a class that
  is not a module after;
- with trust, the named attribute must be a function or class defined in the named
  module's own package, not a re-export of another package's callable.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import sys
import warnings
from pathlib import Path

from infoprobe.base.digest import file_sha256
from infoprobe.foreign.errors import ForeignModelError


class UntrustedCodeError(ForeignModelError):
    """A checkpoint names code to run and the caller has not said it trusts it."""


TRUST_HINT = "pass --trust-code (Python: trust_code=True) if you trust it"


def _spec_file(spec) -> Path | None:
    origin = getattr(spec, "origin", None)
    if not origin or origin in ("built-in", "frozen") or not getattr(spec, "has_location", 0):
        return None
    return Path(origin)


def _find_spec(name: str, path: list[str] | None):
    """The spec the import system's finders give ``name`` (not ``sys.modules``' entry:
    what the files say now); the finders read no module."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec
    return None


def locate_module(module_name: str, folder: Path | None = None) -> Path | None:
    """The file ``import module_name`` would execute (``sys.path`` first, then ``folder``,
    as :meth:`ForeignConfig.import_factory` imports), found by the finders alone: no
    package ``__init__`` runs. None when it cannot be found or has no file."""
    parts = module_name.split(".")
    spec = _find_spec(parts[0], None)
    if spec is None and folder is not None:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], [str(folder)])
    for i in range(1, len(parts)):
        locations = None if spec is None else spec.submodule_search_locations
        if not locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(locations))
    return None if spec is None else _spec_file(spec)


def is_stdlib(module_name: str) -> bool:
    """Whether ``module_name`` belongs to Python's standard library (or is ``builtins``)."""
    top = module_name.split(".")[0]
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths hold the same code (the same file, or equal bytes)."""
    return a.resolve() == b.resolve() or (
        a.is_file() and b.is_file() and file_sha256(a) == file_sha256(b)
    )


MAX_CODE_BYTES = 16 * 1024**2
"""The largest ``.py`` file a checkpoint's model code may hold: source code, not data (every
file of the code is hashed into each output's provenance)."""


def code_files(factory: str, folder: Path) -> list[Path]:
    """The model's code: the factory module's file and every ``.py`` file under the
    checkpoint's ``folder`` (what the factory may import from beside the weights).
    :class:`ForeignModelError` for a file above :data:`MAX_CODE_BYTES`."""
    found = locate_module(factory.partition(":")[0], folder)
    files = {p for p in folder.rglob("*.py") if p.is_file()}
    if found is not None and found.is_file():
        files.add(found)
    for path in files:
        size = path.stat().st_size
        if size > MAX_CODE_BYTES:
            raise ForeignModelError(
                f"{path}: {size} bytes, expected model source code of at most "
                f"{MAX_CODE_BYTES // 1024**2} MiB (a .py file beside the weights is hashed as "
                "the model's code)"
            )
    return sorted(files, key=lambda p: str(p))


def model_code_sha256(factory: str, folder: Path) -> str:
    """SHA-256 over :func:`code_files` (each file's name relative to ``folder`` where it
    lies under it, else its resolved path, and its bytes' SHA-256), computed without
    importing anything: two checkpoints with the same weights but other model code
    differ here."""
    digest = hashlib.sha256()
    for path in code_files(factory, folder):
        try:
            name = str(path.absolute().relative_to(folder.absolute()))
        except ValueError:
            name = str(path.resolve())
        digest.update(name.encode() + b"\0" + file_sha256(path).encode() + b"\0")
    return digest.hexdigest()


def check_trusted(factory: str, folder: Path, where: str, *, trust_code: bool) -> None:
    """Refuse, before anything is imported, a factory that must not run: any factory
    without ``trust_code``, and one from the standard library even with it.

    Raises :class:`UntrustedCodeError` in one line naming ``where`` (the checkpoint's
    JSON), the factory, the file its import would execute with its SHA-256, and the fix.
    """
    module_name = factory.partition(":")[0]
    if is_stdlib(module_name):
        raise UntrustedCodeError(
            f"{where}: field 'model_config.factory' is {factory!r}, a function of Python's "
            f"standard library ({module_name!r}), not a model factory; infoprobe never runs "
            "it, with or without --trust-code"
        )
    path = locate_module(module_name, folder)
    if trust_code:
        attribute = factory.partition(":")[2]
        if path is None or not path.is_file() or is_folder_code(path, folder):
            return  # a module that cannot be found fails at import, naming it
        if not defines_class(path, attribute):
            raise UntrustedCodeError(
                f"{where}: field 'model_config.factory' is {factory!r}: --trust-code trusts "
                f"the checkpoint folder's code, and {path.resolve()} is not in it; a factory "
                "outside the folder must be a model class (an nn.Module subclass), and "
                f"{attribute!r} is no class defined there; refused before importing it"
            )
        return
    shown = (
        f"would import {path.resolve()} (SHA-256 {file_sha256(path)[:16]}…)"
        if path is not None and path.is_file()
        else f"names module {module_name!r}, not found on sys.path or beside it"
    )
    raise UntrustedCodeError(
        f"{where}: field 'model_config.factory' is {factory!r}: loading this checkpoint runs "
        f"its code, which {shown}; infoprobe runs a checkpoint's code only when asked: "
        f"{TRUST_HINT}"
    )


def is_folder_code(path: Path, folder: Path | None) -> bool:
    """Whether the module file ``path`` is the checkpoint ``folder``'s code: it lies in the
    folder, or has the bytes of a ``.py`` file in it."""
    if folder is None:
        return False
    folder = Path(folder).resolve()
    if path.resolve().is_relative_to(folder):
        return True
    return any(same_file(path, p) for p in folder.rglob("*.py") if p.is_file())


def defines_class(path: Path, name: str) -> bool:
    """Whether the module source ``path`` defines a class ``name`` at its top level, read
    with ``ast`` (nothing of it run)."""
    import ast

    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)


def check_model_class(fn: object, factory: str, path: Path | None, folder: Path | None) -> None:
    """Refuse, once imported and before it is called, a factory from outside the checkpoint
    ``folder`` that is not a model class (an ``nn.Module`` subclass)."""
    import inspect

    from torch import nn

    if folder is None or path is None or is_folder_code(path, folder):
        return
    if not (inspect.isclass(fn) and issubclass(fn, nn.Module)):
        raise UntrustedCodeError(
            f"foreign model_config field 'factory' {factory!r}: a factory outside the "
            f"checkpoint folder must be a model class (an nn.Module subclass), found "
            f"{type(fn).__name__}; refused before it is called"
        )


def check_defined_in(fn: object, factory: str) -> None:
    """Refuse a factory that is not a function or class defined in its module's own
    package (a re-export of ``os.system`` from a user module is still ``os.system``)."""
    import inspect

    module_name = factory.partition(":")[0]
    top = module_name.split(".")[0]
    defined = getattr(fn, "__module__", None)
    kind_ok = inspect.isfunction(fn) or inspect.isclass(fn)
    if not (kind_ok and isinstance(defined, str) and defined.split(".")[0] == top):
        raise ForeignModelError(
            f"foreign model_config field 'factory' {factory!r}: expected a function or class "
            f"defined in package {top!r}, found {type(fn).__name__} from module {defined!r} "
            "(a re-export is refused before it is called)"
        )


def copy_factory_module(factory: str, folder: Path) -> Path | None:
    """Copy the module file of ``factory`` (``module:function``) into the checkpoint
    ``folder``, so the checkpoint carries the code that builds its model (loading imports
    ``module`` from ``sys.path`` first, then from the folder). A module inside a package
    cannot be copied alone: a warning says it must be importable where the checkpoint is
    loaded. Returns the copy's path, or None."""
    module = factory.partition(":")[0]
    source = locate_module(module)
    if "." in module or source is None or source.name == "__init__.py":
        warnings.warn(
            f"save_checkpoint: the factory's module {module!r} is not a single file on "
            "sys.path and was not copied beside the checkpoint: it must be importable "
            "wherever the checkpoint is loaded",
            stacklevel=3,
        )
        return None
    copy = folder / f"{module}.py"
    copy.write_bytes(source.read_bytes())
    return copy
