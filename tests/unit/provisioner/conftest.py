from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest_asyncio

from services.provisioner.plugins import PluginRegistry


@pytest_asyncio.fixture
async def registry(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    yield reg
    await reg.aclose()


def echo_provider(tmp_path: Path, fields: Mapping[str, Any], code: str, secrets: Mapping[str, Any]) -> PluginRegistry:
    """A registry with one extra provider plugin, `echo` (its module `code`, its descriptor's
    `fields`), and the secrets file `secrets`."""
    folder = tmp_path / "p" / "echo"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(json.dumps({
        "name": "echo", "type": "provider", "version": "1", "actions": ["create", "confirm", "delete"], "entry_point": "echo:Echo",
        "fields": dict(fields),
    }))
    (folder / "echo.py").write_text(code)
    return PluginRegistry.discover([tmp_path / "p"], secrets=dict(secrets), work_dir=tmp_path / "w")
