"""Every ``from infoprobe... import ...`` and ``import infoprobe...`` statement that
README.md, docs/*.md and examples/*.py print imports: a documented import that fails
fails this suite, named by file and line.

Where statements are found: in a Markdown file, every fenced code block (parsed as Python
when it parses, line by line otherwise) and every inline code span that is an import
statement; in an example, the whole module (imports at any depth). Parenthesised imports
over several lines are one statement. Each statement is executed alone in a fresh
namespace, so it must import by itself.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"`([^`\n]+)`")
START = re.compile(r"^\s*(from\s+infoprobe\b|import\s+infoprobe\b)")


@dataclass(frozen=True)
class Statement:
    """One import statement as printed, with the file and line it starts on."""

    source: str
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def is_infoprobe_import(node: ast.AST) -> bool:
    """An ``import infoprobe...`` or ``from infoprobe... import ...`` node."""
    if isinstance(node, ast.Import):
        return any(a.name == "infoprobe" or a.name.startswith("infoprobe.") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return node.level == 0 and (module == "infoprobe" or module.startswith("infoprobe."))
    return False


def imports_of_code(code: str) -> list[tuple[int, str]]:
    """(1-based line, statement) of every infoprobe import in a piece of Python.

    Code that parses is read with :mod:`ast` (imports at any depth, parenthesised ones
    whole); code that does not (a block with placeholders) is read line by line, a line
    opening a parenthesis joined with the lines up to its closing one."""
    try:
        with warnings.catch_warnings():  # prose spans: "\|" is no escape of Python's
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(code)
    except SyntaxError:
        return imports_of_lines(code)
    lines = code.splitlines()
    found = []
    for node in ast.walk(tree):
        if is_infoprobe_import(node):
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            found.append((node.lineno, ast.get_source_segment(code, node) or text.strip()))
    return sorted(found)


def imports_of_lines(code: str) -> list[tuple[int, str]]:
    """The fallback of :func:`imports_of_code` for code that does not parse."""
    lines = code.splitlines()
    found = []
    i = 0
    while i < len(lines):
        if START.match(lines[i]):
            first = i
            statement = lines[i].split("#")[0].strip()
            while "(" in statement and ")" not in statement and i + 1 < len(lines):
                i += 1
                statement += "\n" + lines[i].split("#")[0].rstrip()
            found.append((first + 1, statement))
        i += 1
    return found


def markdown_imports(text: str, source: str) -> list[Statement]:
    """The infoprobe import statements of a Markdown text: code blocks and inline spans."""
    found: list[Statement] = []
    block: list[str] | None = None
    block_start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if block is None:
                block, block_start = [], number
            else:
                for offset, code in imports_of_code("\n".join(block)):
                    found.append(Statement(source, block_start + offset, code))
                block = None
            continue
        if block is not None:
            block.append(line)
            continue
        for span in SPAN.finditer(line):
            for _, code in imports_of_code(span.group(1)):
                found.append(Statement(source, number, code))
    return found


def example_imports(path: Path) -> list[Statement]:
    """The infoprobe import statements of a Python file."""
    return [Statement(relative(path), n, code) for n, code in imports_of_code(path.read_text())]


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


STATEMENTS = [
    *(s for path in DOCS for s in markdown_imports(path.read_text(), relative(path))),
    *(s for path in EXAMPLES for s in example_imports(path)),
]


@pytest.mark.parametrize("statement", STATEMENTS, ids=[s.where for s in STATEMENTS])
def test_documented_import_imports(statement):
    try:
        exec(compile(statement.code, statement.where, "exec"), {})
    except ImportError as error:
        pytest.fail(f"{statement.where}: {statement.code!r} does not import: {error}")


def test_every_documented_place_was_read():
    """The collection is not empty by accident: the README's and docs' code blocks and
    every example contribute, with a parenthesised import among them."""
    sources = {s.source for s in STATEMENTS}
    assert {relative(p) for p in EXAMPLES} <= sources
    assert any(s.startswith("docs/") for s in sources)
    assert any("(" in s.code and "\n" in s.code for s in STATEMENTS)


def test_the_reader_finds_every_form_and_its_line():
    text = (
        "Prose with `from infoprobe.model import ModelConfig` inline.\n"
        "\n"
        "```python\n"
        "import numpy as np\n"
        "from infoprobe.influence import (\n"
        "    InfluenceSettings,\n"
        "    influence,\n"
        ")\n"
        "import infoprobe.tasks\n"
        "def f():\n"
        "    from infoprobe.hooks import open_cache\n"
        "```\n"
        "\n"
        "```python\n"
        "x = ...  # placeholders\n"
        "result = f(a=, b)\n"
        "from infoprobe.infoflow import (predict,\n"
        "    PredictError)\n"
        "```\n"
    )
    found = [(s.line, s.code) for s in markdown_imports(text, "doc.md")]
    assert found == [
        (1, "from infoprobe.model import ModelConfig"),
        (5, "from infoprobe.influence import (\n    InfluenceSettings,\n    influence,\n)"),
        (9, "import infoprobe.tasks"),
        (11, "from infoprobe.hooks import open_cache"),
        (17, "from infoprobe.infoflow import (predict,\n    PredictError)"),
    ]
