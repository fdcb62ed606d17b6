"""No import cycle in muster/, contracts/ and services/, and muster/ imports nothing from
services/ but in its runtime (what `muster up` and the demos start) and its command lines.

Every import counts: at module level, under `if TYPE_CHECKING:` and inside functions (a cycle
hidden in a function body is still two modules that cannot be understood one without the
other). Imports are read with `ast`, nothing is imported. `from package import name` is an
import of `package.name` when that is a module, else of `package`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("muster", "contracts", "services")
KERNEL = ("muster.bus", "muster.ports", "muster.readmodel")
RUNTIME = ("muster.runtime", "muster.demo")
"""The parts of muster/ that start services and so may import them."""

ALLOWED_CYCLES: list[frozenset[str]] = [
    # Empty: no import cycle is left, and none may come back. A cycle that must exist for a
    # while goes here with the reason and the plan to remove it.
]


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for top in TREES:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _imported(name: str, path: Path, package: bool, modules: dict[str, tuple[Path, bool]]) -> Iterator[str]:
    """Every module of the tree that `name` imports, anywhere in its file."""

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    here = name if package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            module = known(target)
            if module is not None and module != name:
                yield module


@cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(name, path, package, modules)) for name, (path, package) in modules.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The groups of modules that each reach one another (more than one module each)."""
    reach = {module: _reachable(graph, module) for module in graph}
    found: list[frozenset[str]] = []
    placed: set[str] = set()
    for module in sorted(graph):
        if module in placed or module not in reach[module]:
            continue
        group = frozenset({module} | {other for other in reach[module] if module in reach.get(other, ())})
        placed |= group
        found.append(group)
    return found


def test_there_is_no_import_cycle_but_the_ones_being_removed() -> None:
    cycles = _cycles(_graph())
    new = [sorted(c) for c in cycles if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    assert new == [], f"import cycles: {new}"


def test_the_allowlist_holds_only_cycles_that_still_exist() -> None:
    """A cycle removed must leave the list, so that it cannot come back unnoticed."""
    cycles = _cycles(_graph())
    gone = [sorted(allowed) for allowed in ALLOWED_CYCLES if not any(c <= allowed for c in cycles)]
    assert gone == [], f"no longer a cycle: take it out of ALLOWED_CYCLES: {gone}"


def test_the_shared_kernel_imports_nothing_from_services() -> None:
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith(KERNEL)
                 for t in targets if t.startswith("services"))
    assert bad == []


def _is_cli(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last == "cli" or last.startswith("cli_") or last.endswith("_cli") or module == "muster.__main__"


def test_muster_imports_services_only_in_its_runtime_and_command_lines() -> None:
    graph = _graph()
    bad = sorted(f"{m} -> {t}" for m, targets in graph.items()
                 if m.startswith("muster") and not m.startswith(RUNTIME) and not _is_cli(m)
                 for t in targets if t.startswith("services"))
    assert bad == []
    # (Not vacuous: the runtime does import services.)
    assert any(t.startswith("services") for m, targets in graph.items() if m.startswith(RUNTIME) for t in targets)


def test_the_checker_sees_imports_under_type_checking_and_in_functions(tmp_path: Path) -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\ndef f():\n    import pkg.c\n")
    modules = {"pkg": (tmp_path, True), "pkg.a": (tmp_path / "a.py", False), "pkg.b": (tmp_path, False),
               "pkg.c": (tmp_path, False)}
    (tmp_path / "a.py").write_text(ast.unparse(tree))
    assert set(_imported("pkg.a", tmp_path / "a.py", False, modules)) == {"pkg.b", "pkg.c"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
