"""`muster up` as a user starts it: a real nats-server and four service processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from nats.aio.msg import Msg

from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded
from muster.client import MusterClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

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


def _state(data: Path) -> dict[str, Any]:
    return json.loads((data / "deployment.json").read_text())


async def test_a_second_up_refuses_and_the_first_survives_kill_9_of_its_children(
        muster_up: tuple[asyncio.subprocess.Process, dict[str, str]], tmp_path: Path) -> None:
    """Issue #18.3 and #18.4: a second `muster up` in the same data directory used to start a
    second nats-server on the same store (and damage it), and a kill -9 of one child used to
    stop the whole deployment."""
    proc, seen = muster_up
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    second = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "up", "--data-dir", str(data), "--tracker-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, cwd=tmp_path,
    )
    out, _ = await asyncio.wait_for(second.communicate(), 60)
    said = out.decode()
    assert second.returncode != 0, said
    assert f"pid {proc.pid}" in said and seen["nats"] in said and "in use" in said, said
    assert (data / "nats.url").read_text() == seen["nats"]
    assert len(_nats_servers_under(tmp_path)) == 1

    before = _state(data)["processes"]
    assert before["planner"] != proc.pid and set(before) >= {"nats-server", "solver", "planner", "provisioner", "tracker"}
    async with await MusterClient.connect(seen["nats"]) as client:
        claimed = asyncio.get_running_loop().create_future()

        async def on_task_event(msg: Msg) -> None:
            if msg.headers and msg.headers.get("Muster-Type") == "TaskClaimed" and not claimed.done():
                claimed.set_result(None)

        sub = await client.nc.subscribe("muster.evt.default.task.>", cb=on_task_event)
        reply = await client.send("default", CreateCluster(name="survivor", template="hadoop-small", nodes=3))
        assert isinstance(reply, Accepted)
        await asyncio.wait_for(claimed, 60)
        await sub.unsubscribe()
        for name in ("provisioner", "planner"):  # mid-job
            os.kill(before[name], signal.SIGKILL)
        assert proc.stdout is not None
        notes: dict[str, str] = {}
        await asyncio.wait_for(_read_until(proc.stdout, "provisioner is running again", notes), 30)
        if "planner is running again" not in " ".join(notes):
            await asyncio.wait_for(_read_until(proc.stdout, "planner is running again", notes), 30)
        # The task the dead provisioner held comes back after its ack wait (30 s).
        assert isinstance(await client.wait(reply.job_id, timeout=150), JobSucceeded)

    after = _state(data)["processes"]
    assert after["provisioner"] != before["provisioner"] and after["planner"] != before["planner"]
    # Issue #18.8: the job's owner is the planner that finished it, not the one killed.
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{seen['tracker']}/v1/jobs/{reply.job_id}") as resp:
            status = await resp.json()
        async with http.get(f"{seen['tracker']}/v1/jobs/{reply.job_id}/location") as resp:
            location = await resp.json()
    owner = f"planner-{socket.gethostname()}-{after['planner']}"
    assert status["owner"] == owner and location["owner"] == owner, (status["owner"], location["owner"], owner)
    assert {k: after[k] for k in ("nats-server", "solver", "tracker")} == {k: before[k] for k in ("nats-server", "solver", "tracker")}
    assert proc.returncode is None, "muster up stopped"


async def _muster(*args: str, cwd: Path, **env: str) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_DATA_DIR")} | env
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=environ, cwd=cwd)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_another_shell_finds_the_deployment_and_a_busy_port_is_named(
        muster_up: tuple[asyncio.subprocess.Process, dict[str, str]], tmp_path: Path) -> None:
    """Issue #18.9: `muster up` picks a free NATS port, so the CLI worked only from the same
    directory; and a busy tracker port said only "tracker exited during start"."""
    _, seen = muster_up
    data = tmp_path / "data"
    assert seen["another shell"] == f"export MUSTER_DATA_DIR={data.resolve()}  (or NATS_URL={seen['nats']})"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out = await _muster("provisioners", "list", cwd=elsewhere, MUSTER_DATA_DIR=str(data))
    assert code == 0 and "provisioner " in out, out
    code, out = await _muster("cluster", "list", cwd=elsewhere, NATS_URL=seen["nats"])
    assert code == 0, out

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = await _muster("up", "--data-dir", str(tmp_path / "other"), "--tracker-port", str(port), cwd=elsewhere)
        assert code != 0 and f"tracker port {port} on 127.0.0.1 is taken" in out, out
        code, out = await _muster("tracker", "--port", str(port), "--nats-url", seen["nats"], cwd=elsewhere)
        assert code != 0 and f"cannot listen on 127.0.0.1:{port}: the port is taken" in out, out
