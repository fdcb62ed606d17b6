"""`muster up` as a user starts it: a real nats-server and four service processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.client import MusterClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

DEMO = Path(__file__).parents[2] / "muster" / "demo" / "catalog"


async def _read_until(stream: asyncio.StreamReader, marker: str, seen: dict[str, str]) -> None:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"muster up exited before {marker!r}; saw {seen}")
        key, _, value = line.partition(":")
        seen[key.strip()] = value.strip()
        if marker in line:
            return


@pytest_asyncio.fixture
async def muster_up(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, str]]]:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--data-dir", str(tmp_path / "data"), "--tracker-port", "0",
        "--catalog", str(DEMO), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    seen: dict[str, str] = {}
    try:
        await asyncio.wait_for(_read_until(proc.stdout, "muster is up", seen), 60)
        yield proc, seen
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _nats_servers_under(path: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "nats-server" in cmdline and str(path) in cmdline:
                found.append(entry.name)
    return found


async def test_up_runs_a_create_and_ctrl_c_leaves_no_orphans(muster_up: tuple[asyncio.subprocess.Process, dict[str, str]], tmp_path: Path) -> None:
    proc, seen = muster_up
    nats_url, tracker = seen["nats"], seen["tracker"]
    assert nats_url.startswith("nats://127.0.0.1:") and tracker.startswith("http://127.0.0.1:")
    assert _nats_servers_under(tmp_path)

    async with await MusterClient.connect(nats_url) as client:
        reply = await client.send("default", CreateCluster(name="e2e", template="hadoop-small", nodes=3))
        assert isinstance(reply, Accepted)
        assert isinstance(await client.wait(reply.job_id, timeout=120), JobSucceeded)

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tracker}/v1/jobs/{reply.job_id}") as resp:
            body = await resp.json()
    assert resp.status == 200 and body["state"] == "succeeded" and body["layout"]["nodes"] == 3

    proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert _nats_servers_under(tmp_path) == []
