"""Start-up rules of every muster process: keep three optional dependencies that muster never
needs from being loaded at import time.

- nats-py imports aiohttp only for its WebSocket transport (`ws://` URLs; muster connects over
  TCP), paid in every CLI command and service that touches the bus (docs/testing.md, "Where
  the CPU goes, and what was cut");
- structlog's dev renderer imports rich's traceback formatter (and pygments) for coloured
  tracebacks; services log JSON to files, and a plain traceback reads as well in a terminal;
- structlog's deprecated `threadlocal` module (imported by `import structlog`) imports greenlet
  (installed for playwright) to keep its context per greenlet; muster runs no greenlets, and
  loading greenlet, a C++ extension, also loads rego-cpp's library first (`CXX_EXTENSIONS`):
  about 9 ms of CPU in each process (session 37).

All treat the dependency as optional (`try: import ... except ImportError`). `install()` (run
by `import muster`) adds an import hook that, while one of those modules runs its body, makes
the dependency unimportable, and puts it back at once: the tracker still imports aiohttp, the
CLI still prints with rich, and a module that never imports nats pays nothing.
tests/unit/test_startup.py checks the libraries still take this path with the locked versions."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

# module -> the optional dependency it is imported without
WITHOUT: dict[str, str] = {"nats.aio.transport": "aiohttp", "structlog.dev": "rich", "structlog.threadlocal": "greenlet"}
CXX_EXTENSIONS = frozenset({"frozenlist._frozenlist", "greenlet._greenlet"})
"""C++ extension modules (aiohttp's frozenlist, playwright's greenlet). rego-cpp, the policy
engine (regopy, docs/governance.md), must be loaded before the first of them: loaded after, its
time built-ins (`time.date`, `time.clock`...) freed memory that was not theirs and aborted the
process. The hook loads it first, only in the processes that import one."""


class _HidingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, hidden: str) -> None:
        self.loader, self.hidden = loader, hidden

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        if self.hidden in sys.modules:  # loaded already: nothing to save
            self.loader.exec_module(module)
            return
        sys.modules[self.hidden] = None  # type: ignore[assignment]  # `import hidden` raises ImportError
        try:
            self.loader.exec_module(module)
        finally:
            if sys.modules.get(self.hidden, ...) is None:
                del sys.modules[self.hidden]


def preload_rego() -> None:
    """Load rego-cpp's library now (once; nothing when regopy is not installed)."""
    global _rego_loaded
    if _rego_loaded:
        return
    _rego_loaded = True
    import ctypes
    import importlib.util
    import os

    spec = importlib.util.find_spec("regopy")
    if spec is not None and spec.origin:
        library = os.path.join(os.path.dirname(spec.origin), "librego_shared.so")
        if os.path.exists(library):
            ctypes.CDLL(library)


_rego_loaded = False


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name in CXX_EXTENSIONS:
            preload_rego()
            return None
        hidden = WITHOUT.get(name)
        if hidden is None or hidden in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HidingLoader(spec.loader, hidden)
        return spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
