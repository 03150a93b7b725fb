"""The project's import graph has no circle, and no module only re-exports another.

Every ``import`` and ``from ... import`` of every module of the installed package (the
hub and the pillars ``infoprobe.hooks``, ``infoprobe.probes``, ``infoprobe.tasks``) is an
arrow, at any depth: a function-level import and one under ``TYPE_CHECKING`` tie two
modules together as much as a top-level one. ``from pkg import name`` points at the
module ``pkg.name`` when there is one, else at ``pkg``. The files are read with ``ast``,
independently of Python's import machinery.
"""

from __future__ import annotations

import ast
from pathlib import Path

import infoprobe

ROOT = Path(infoprobe.__file__).parent
PILLARS = {"hooks": ROOT.parent / "hooks", "probes": ROOT.parent / "probes",
           "tasks": ROOT.parent / "tasks"}  # fmt: skip


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for the hub and the three pillars."""
    found = {}
    for prefix, folder in [
        ("infoprobe", ROOT),
        *((f"infoprobe.{k}", v) for k, v in PILLARS.items()),
    ]:
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def arrows() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(node.module or "", node.level, name, package)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in files else base)
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_of_every_kind():
    graph = arrows()
    assert "infoprobe.compare.scopes" in graph["infoprobe.compare.verdicts"]  # TYPE_CHECKING
    assert "infoprobe.base.texttable" in graph["infoprobe.rates.table"]
    assert "infoprobe.rates" in graph["infoprobe.reproduce.results"]  # inside a function
    planted = {**graph, "infoprobe.base.errors": {"infoprobe.cli"}}
    assert any("infoprobe.base.errors" in c for c in cycles(planted))


def test_no_import_circle():
    assert cycles(arrows()) == []


def test_no_top_level_module_only_re_exports():
    for path in sorted(ROOT.glob("*.py")):
        tree = ast.parse(path.read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and
                                              isinstance(n.value, ast.Constant))]  # fmt: skip
        assert not all(isinstance(n, ast.Import | ast.ImportFrom | ast.Assign) for n in body) or (
            path.name == "__init__.py"
        ), path


def test_no_file_under_infoprobe_over_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450}  # fmt: skip
    assert long == {}
