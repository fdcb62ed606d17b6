"""A real cluster of three nats-servers on loopback (muster.bus.cluster), for the bus's tests
that need replicated streams: each node a process of its own, stopped at the end (a node a test
paused with SIGSTOP is let go first)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from muster.bus.cluster import ClusterNode, start_loopback_cluster


@pytest_asyncio.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[ClusterNode]]:
    made, _ = await start_loopback_cluster(tmp_path / "nats")
    try:
        yield made
    finally:
        for node in made:
            if node.process is not None and node.process.returncode is None:
                os.kill(node.process.pid, signal.SIGCONT)
            await node.stop()
