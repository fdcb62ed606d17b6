"""muster/_startup.py: nats-py and structlog are imported without the optional dependencies they
do not need here, and those still import normally afterwards. Each check runs in a
fresh interpreter, where nothing has been imported yet."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _modules_after(code: str) -> dict[str, bool]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps({{m: m in sys.modules for m in ('aiohttp', 'rich', 'greenlet', 'nats', 'structlog')}}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded: dict[str, bool] = json.loads(out.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("module", ["services.planner.entrypoint", "services.provisioner.entrypoint", "muster.ops_cli"])
def test_a_bus_process_loads_neither_aiohttp_nor_rich_tracebacks_nor_greenlet_for_its_libraries(module: str) -> None:
    loaded = _modules_after(f"import {module}")
    assert loaded["nats"] and loaded["structlog"]
    assert not loaded["aiohttp"], f"{module} loaded aiohttp: nats-py no longer treats it as optional?"
    if module.startswith("services."):
        assert not loaded["rich"], f"{module} loaded rich"
    assert not loaded["greenlet"], f"{module} loaded greenlet: structlog no longer treats it as optional?"


def test_what_was_hidden_imports_normally_afterwards() -> None:
    loaded = _modules_after("import muster, structlog\nimport aiohttp.web, rich.console, greenlet")
    assert loaded["aiohttp"] and loaded["rich"] and loaded["greenlet"]


def test_the_libraries_still_work_without_them() -> None:
    # nats-py's TCP client and structlog's console renderer, in the process that hid the extras.
    code = ("import muster, nats, structlog\n"
            "from structlog.dev import ConsoleRenderer\n"
            "from structlog.threadlocal import ThreadLocal\n"
            "print(ConsoleRenderer(colors=False)(None, 'info', {'event': 'hello'}), ThreadLocal.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "hello" in out.stdout
    assert "_thread" in out.stdout  # structlog's threadlocal on threads, its greenlet variant left out

