from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from services.provisioner.plugins import PluginRegistry


@pytest_asyncio.fixture
async def registry(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    yield reg
    await reg.aclose()
