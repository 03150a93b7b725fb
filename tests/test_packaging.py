"""Packaging: the pillars install under infoprobe.*, never as top-level modules."""

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PILLARS = ("hooks", "probes", "tasks")


@pytest.mark.slow
def test_wheel_has_pillars_under_infoprobe_and_no_top_level_pillars(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("infoprobe-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for pillar in PILLARS:
        assert f"infoprobe/{pillar}/__init__.py" in names
        assert not any(n.startswith(f"{pillar}/") for n in names)
    assert "infoprobe/tasks/registry.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)


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
    "infoprobe.base.header",
}
"""The base the pillars may import: temporary names and output locks (atomic), the user-
error base (errors), the false discovery rate (fdr), the file header (header)."""


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
