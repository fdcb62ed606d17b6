"""The test modules' assert rewrites, written once before pytest-xdist's workers start.

pytest rewrites each test module's asserts and caches the result as a `.pyc` beside it, but
writes none under `PYTHONDONTWRITEBYTECODE` (set on this project's machine and its CI): every
worker of every run parsed, rewrote and compiled the ~850 test modules and conftests again, about
11 s of CPU each, three times a run (docs/testing.md, "Where the CPU goes"). pytest reads such a
cache even with the variable set, so the controller writes it first, on two processes, and the
workers read it. A module whose cache is current is not rewritten again (a hash of its source is
the check, pytest's own), so a second run in the same tree pays only the reads.

Uses pytest's own rewrite and cache format (`_pytest.assertion.rewrite`, private, pinned by
requirements.lock): tests/unit/test_rewrites.py fails if pytest stops reading what is written.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

PROCESSES = 2
_CONFIG: list[pytest.Config] = []  # for the forked processes (a Config does not pickle)


def cache_of(module: Path) -> Path:
    """Where pytest looks for `module`'s rewritten code."""
    return rewrite.get_cache_dir(module) / (module.name[:-3] + rewrite.PYC_TAIL)


def modules_under(paths: Iterable[Path]) -> list[Path]:
    """The test modules and conftests pytest would rewrite under `paths` (files or folders)."""
    found: set[Path] = set()
    for path in paths:
        if path.is_file() and path.suffix == ".py":
            found.add(path)
        elif path.is_dir():
            found.update(p for p in path.rglob("*.py") if p.name == "conftest.py" or p.name.startswith("test_"))
    return sorted(found)


def _write(modules: list[Path]) -> int:
    config = _CONFIG[0]
    written = 0
    for module in modules:
        if rewrite._read_pyc(module, cache_of(module)) is None:
            source_hash, code = rewrite._rewrite_test(module, config)
            cache_of(module).parent.mkdir(exist_ok=True)
            written += rewrite._write_pyc(config.stash[rewrite.assertstate_key], code, source_hash, cache_of(module))
    return written


def write_caches(config: pytest.Config, modules: list[Path], processes: int = PROCESSES) -> int:
    """Rewrite the `modules` whose cache is missing or stale, on `processes` forked processes
    (each gets every n-th module; 1: in this one); returns how many were written."""
    _CONFIG[:] = [config]
    if processes < 2 or not modules:
        return _write(modules)
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
        return sum(pool.map(_write, [modules[i::processes] for i in range(processes)]))


def before_workers(config: pytest.Config) -> None:
    """In the controller of a run on workers (`-n N`, N > 1), before they start: nothing to do
    for a run in one process, which rewrites each module once anyway."""
    workers = config.getoption("numprocesses", None)
    if hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 2:
        return
    hook = config.stash[rewrite.assertstate_key].hook if config.getoption("assertmode") == "rewrite" else None
    if hook is None:
        return
    # The plugins' modules too: pytest rewrites every module of a plugin's package (schemathesis'
    # 385, hypothesis' 103, ...), as each worker imports it, some of them only while collecting.
    marked = hook._must_rewrite
    tests = modules_under(Path(arg.split("::")[0]).resolve() for arg in config.args)
    write_caches(config, sorted({*tests, *plugin_modules(marked)}))


def plugin_modules(names: Iterable[str]) -> list[Path]:
    """The file of each module named, and every module of each package named."""
    found: list[Path] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found += [module for folder in spec.submodule_search_locations for module in Path(folder).rglob("*.py")]
        elif spec is not None and spec.origin and spec.origin.endswith(".py"):
            found.append(Path(spec.origin))
    return found
