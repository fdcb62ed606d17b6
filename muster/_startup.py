"""Two libraries muster uses load a large optional dependency at import time that muster never
needs:

- nats-py imports aiohttp only for its WebSocket transport (`ws://` URLs; muster connects over
  TCP): about 0.45 s of CPU here, in every CLI command and service that touches the bus;
- structlog's dev renderer imports rich's traceback formatter (and pygments) for coloured
  tracebacks; services log JSON to files, and a plain traceback reads as well in a terminal.

Both treat the dependency as optional (`try: import ... except ImportError`). `install()` (run
by `import muster`) adds an import hook that, while one of those two modules runs its body, makes
the dependency unimportable, and puts it back at once: the tracker still imports aiohttp, the
CLI still prints with rich, and a module that never imports nats pays nothing.
tests/unit/test_startup.py checks both libraries still take this path with the locked versions."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

# module -> the optional dependency it is imported without
WITHOUT: dict[str, str] = {"nats.aio.transport": "aiohttp", "structlog.dev": "rich"}


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


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
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
