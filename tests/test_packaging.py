"""Packaging: the pillars install under infoprobe.*, never as top-level modules."""

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PILLARS = ("hooks", "probes", "tasks")


def build_wheel(folder: Path) -> list[str]:
    """Build infoprobe's wheel into ``folder`` (no dependencies, this venv's setuptools)
    from a copy of the tree, so no ``build/`` left by an earlier build can fill a gap, and
    return the names of the files in it."""
    source = folder / "source"
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info", ".*")
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for top in ("infoprobe", *PILLARS):
        shutil.copytree(ROOT / top, source / top, ignore=ignore)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(folder), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = folder.glob("infoprobe-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def installed_name(path: Path) -> str:
    """Where a source file of the tree lands in the wheel (the pillars under infoprobe/)."""
    rel = path.relative_to(ROOT).as_posix()
    return rel if rel.startswith("infoprobe/") else f"infoprobe/{rel}"


def shipped_sources() -> list[Path]:
    """Every module and kernel source of infoprobe/ and the pillars (the wheel's content)."""
    return sorted(
        path
        for top in ("infoprobe", *PILLARS)
        for pattern in ("*.py", "*.c")
        for path in (ROOT / top).rglob(pattern)
        if "__pycache__" not in path.parts
    )


@pytest.mark.slow
def test_wheel_holds_every_source_and_no_top_level_pillar(tmp_path):
    """Every .py and .c file under infoprobe/, hooks/, probes/ and tasks/ is in the wheel
    (a package missing from it breaks every command of a non-editable install)."""
    names = set(build_wheel(tmp_path))
    sources = shipped_sources()
    assert len(sources) > 150
    missing = [installed_name(p) for p in sources if installed_name(p) not in names]
    assert not missing, f"not in the wheel: {missing}"
    for pillar in PILLARS:
        assert not any(n.startswith(f"{pillar}/") for n in names)
    assert any(n.endswith("entry_points.txt") for n in names)


def test_the_wheel_check_sees_a_new_subpackage():
    """The check above is not vacuous: a file in a subpackage maps to its installed name."""
    assert installed_name(ROOT / "probes" / "x" / "y.py") == "infoprobe/probes/x/y.py"
    assert installed_name(ROOT / "infoprobe" / "foreign" / "trust.py") == (
        "infoprobe/foreign/trust.py"
    )
    assert ROOT / "infoprobe" / "foreign" / "trust.py" in shipped_sources()


# Import names of the distributions that pyproject.toml declares (import name != name).
IMPORT_NAMES = {"scikit-learn": "sklearn", "transformer-lens": "transformer_lens"}


def declared_imports() -> set[str]:
    """The import names of pyproject.toml's dependencies (and optional extras)."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    names = {re.match(r"[A-Za-z0-9_.-]+", s).group(0).lower() for s in specs}
    return {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in names}


def test_every_library_imported_is_declared():
    """A third-party library that infoprobe or a pillar imports is a declared dependency,
    never one that happens to arrive through another (scipy through scikit-learn)."""
    stdlib = set(sys.stdlib_module_names)
    declared = declared_imports()
    undeclared = {}
    for path in shipped_sources():
        if path.suffix != ".py":
            continue
        package = ".".join(Path(installed_name(path)).parent.parts)
        for module in imported_modules(path, package):
            top = module.split(".")[0]
            if top and top not in stdlib and top != "infoprobe" and top not in declared:
                undeclared.setdefault(top, path.relative_to(ROOT).as_posix())
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"


def imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of the modules ``path`` imports; ``package`` is the package the file
    belongs to (``infoprobe.tasks`` for tasks/registry.py), against which relative imports
    (``from .spec import Task``, ``from .. import model``) are resolved."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module)
                continue
            parts = package.split(".")
            if node.level - 1 >= len(parts):
                found.add("." * node.level + (node.module or ""))  # beyond the top: flagged
                continue
            base = ".".join(parts[: len(parts) - (node.level - 1)])
            if node.module:
                found.add(f"{base}.{node.module}")
            else:  # from . import a, b: each name may be a module
                found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def pillar_package(pillar: str, path: Path) -> str:
    """The package a file of ``pillar`` belongs to once installed (infoprobe.<pillar>...)."""
    folder = path.parent.relative_to(ROOT / pillar)
    return ".".join(["infoprobe", pillar, *folder.parts])


def test_relative_imports_are_resolved(tmp_path):
    source = tmp_path / "registry.py"
    source.write_text(
        "from .spec import Task\nfrom . import chunks, scores\nfrom .. import model\n"
        "from ..hooks.reader import open_cache\nimport numpy\n"
    )
    assert imported_modules(source, "infoprobe.tasks") == {
        "infoprobe.tasks.spec",
        "infoprobe.tasks.chunks",
        "infoprobe.tasks.scores",
        "infoprobe.model",
        "infoprobe.hooks.reader",
        "numpy",
    }


BASE = {
    "infoprobe.base.atomic",
    "infoprobe.base.errors",
    "infoprobe.base.fdr",
    "infoprobe.base.formats",
    "infoprobe.base.header",
    "infoprobe.base.lazy",
    "infoprobe.base.plugins",
}
"""The base the pillars may import: temporary names and output locks (atomic), the user-
error base (errors), the false discovery rate (fdr), every file's format name (formats),
the file header (header), names loaded at first use (lazy), other distributions' entry
points (plugins)."""


@pytest.mark.parametrize("pillar", PILLARS)
def test_pillars_are_leaves(pillar):
    """A pillar imports no other pillar and nothing of the hub but the base of file helpers
    (docs/conventions.md), whether it writes the import absolutely or relatively."""
    files = list((ROOT / pillar).rglob("*.py"))
    assert files
    for path in files:
        for module in imported_modules(path, pillar_package(pillar, path)):
            assert not module.startswith("."), f"{path}: relative import above the package"
            assert module.split(".")[0] not in PILLARS, f"{path}: imports top-level {module}"
            if module.split(".")[0] == "infoprobe" and module not in BASE:
                own = f"infoprobe.{pillar}"
                assert module == own or module.startswith(own + "."), f"{path} imports {module}"


def test_base_imports_nothing_of_infoprobe_but_base():
    """``infoprobe.base`` is below the pillars: it imports only itself (and
    ``infoprobe.__version__``), never a pillar or a room of the hub."""
    files = list((ROOT / "infoprobe" / "base").glob("*.py"))
    assert files
    for path in files:
        for module in imported_modules(path, "infoprobe.base"):
            if module.split(".")[0] == "infoprobe":
                assert module == "infoprobe" or module.startswith("infoprobe.base."), (
                    f"{path} imports {module}"
                )


def test_the_leaf_guard_catches_a_relative_import_of_the_hub(tmp_path):
    bad = tmp_path / "tasks" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("from ..model import ModelConfig\n")
    (module,) = imported_modules(bad, "infoprobe.tasks")
    assert module == "infoprobe.model" and not module.startswith("infoprobe.tasks")
