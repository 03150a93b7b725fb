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


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("pillar", PILLARS)
def test_pillars_are_leaves(pillar):
    """A pillar imports no other pillar and nothing of the hub (docs/conventions.md)."""
    for path in (ROOT / pillar).rglob("*.py"):
        for module in imported_modules(path):
            assert module.split(".")[0] not in PILLARS, f"{path}: imports top-level {module}"
            if module.startswith("infoprobe"):
                assert module.startswith(f"infoprobe.{pillar}"), f"{path} imports {module}"
