"""Fault scenarios: real processes, killed with SIGKILL mid-operation (docs/faults.md).

The in-process `stack` of tests/integration/services (all four services in the test's own
event loop) is available too, for bug reproductions that inject a failure into one call."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("_muster_services_stack", Path(__file__).parents[1] / "integration" / "services" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_services = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = _services
    _spec.loader.exec_module(_services)

stack = _services.stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak runs only when asked for by marker (`make soak`), never in the default run."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the nemesis soak runs with `make soak` (docs/faults.md)")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)
