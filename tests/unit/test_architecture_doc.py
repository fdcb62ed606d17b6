"""docs/architecture.md walks one create through the code: every module it names is a file of
the repository, and every function, class or method it names (`path.py:Name`, `Class.method`,
or a bare `Class.method` of the last module named) is defined there."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "architecture.md"
CODE = re.compile(r"`([^`\s]+)`")
TOPS = ("contracts/", "muster/", "services/", "tests/", "bench/")
QUALIFIED = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)?$")


@cache
def _defined(path: Path) -> frozenset[str]:
    """`name` for every top-level def/class, `Class.name` for every method."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{n.name}" for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return frozenset(names)


def _references() -> list[tuple[str, str | None]]:
    """(path, name) for each `path.py[:Name]`; a bare `Class.method` right after its module."""
    found: list[tuple[str, str | None]] = []
    last: str | None = None
    classes: dict[str, str] = {}
    for token in CODE.findall(DOC.read_text()):
        path, _, name = token.partition(":")
        if path.startswith(TOPS) and path.endswith((".py", "/")):
            found.append((path, name or None))
            if path.endswith(".py"):
                last = path
                if name[:1].isupper():  # `path.py:Class` or `path.py:Class.method`
                    classes[name.split(".")[0]] = path
        elif QUALIFIED.match(token) and "." in token and token.split(".")[0][:1].isupper():
            owner = classes.get(token.split(".")[0], last)
            assert owner is not None, f"{token}: no module named before it"
            found.append((owner, token))
    return found


def test_the_walkthrough_names_only_modules_that_exist() -> None:
    refs = _references()
    assert len({p for p, _ in refs}) >= 30  # it is a walkthrough, not a sketch
    missing = [p for p, _ in refs if not (ROOT / p).exists()]
    assert missing == []


def test_the_walkthrough_names_only_functions_that_exist() -> None:
    missing = [f"{p}:{n}" for p, n in _references() if n is not None and (ROOT / p).is_file() and n not in _defined(ROOT / p)]
    assert missing == []
