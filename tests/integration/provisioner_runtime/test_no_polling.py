"""Claiming is not polling: an idle worker keeps one long pull waiting on the server and sends
nothing else. Counted by the server itself (its monitoring endpoint: the messages the worker's
connection published, and the pull requests waiting on the queue's consumer), so a worker that
asked again and again (a short fetch in a loop) fails here whatever its code looks like."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer, free_port
from muster.bus.streams import ensure_streams
from services.provisioner.plugins.testing import make_task
from services.provisioner.worker import WorkerConfig, Workers

from .conftest import DEADLINE_S, HeldExecutor

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]

IDLE_S = 10.0
MOST_REQUESTS = 3
"""In `IDLE_S`: the pull waiting when the window opens and its renewals (a pull waits 5 s on the
server, renewed only to notice a connection that broke meanwhile)."""


async def test_an_idle_worker_sends_nothing_but_its_one_long_pull(tmp_path: Path) -> None:
    async with NatsServer(tmp_path / "nats", name="muster-idle", http_port=free_port()) as server:
        monitor = f"http://127.0.0.1:{server.http_port}"
        test_nc = await connect(server.url, name="test")
        worker_nc = await connect(server.url, name="idle-worker")
        executor = HeldExecutor(hold=False)
        workers = Workers(worker_nc.jetstream(), EventStore(worker_nc), executor,
                          WorkerConfig(provisioner_id="prov-idle", tenants=("acme",)))
        runner: asyncio.Task[None] | None = None
        try:
            await ensure_streams(test_nc.jetstream())
            await workers.ensure_queues()
            runner = asyncio.create_task(workers.run())
            await publish(test_nc, "n1-install")  # a working worker: it takes a task at once
            await executor.wait_started(1)
            await asyncio.wait_for(workers.idle.wait(), DEADLINE_S)  # its outcome written and acked

            async with aiohttp.ClientSession() as http:
                before = await published_by(http, monitor, "idle-worker")
                # The window under test, with nothing to do. The waiting pulls are counted
                # between two renewals (one renews at 5 s and 10 s into the window).
                await asyncio.sleep(IDLE_S * 0.6)
                waiting = await pulls_waiting(http, monitor)
                await asyncio.sleep(IDLE_S * 0.4)
                after = await published_by(http, monitor, "idle-worker")

            assert after - before <= MOST_REQUESTS, f"{after - before} requests in {IDLE_S:g} s idle: polling?"
            assert list(waiting.values()) == [1], waiting  # one long pull, on the one queue
            # ...and that pull still answers at once when a task comes.
            await publish(test_nc, "n2-install")
            await executor.wait_started(2)
        finally:
            await workers.abort()
            if runner is not None:
                runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)
            await worker_nc.close()
            await test_nc.close()


async def publish(nc: Any, task_id: str) -> None:
    task = make_task("install", service="svc", task_id=task_id, tenant="acme", cluster_id="c-acme")
    await nc.jetstream().publish(subjects.task_queue("acme", task.provisioner_class), task.model_dump_json().encode(),
                                 headers={"Nats-Msg-Id": f"{task.job_id}.{task.task_id}.{task.attempt}"})


async def published_by(http: aiohttp.ClientSession, monitor: str, name: str) -> int:
    """Messages the named connection has published (requests included), as the server counts them."""
    async with http.get(f"{monitor}/connz", params={"subs": "1"}) as resp:
        connz = await resp.json()
    [conn] = [c for c in connz["connections"] if c.get("name") == name]
    return int(conn["in_msgs"])


async def pulls_waiting(http: aiohttp.ClientSession, monitor: str) -> dict[str, int]:
    """Pull requests waiting on each consumer of the task stream."""
    async with http.get(f"{monitor}/jsz", params={"accounts": "true", "streams": "true", "consumers": "true"}) as resp:
        jsz = await resp.json()
    return {c["name"]: int(c.get("num_waiting", 0))
            for account in jsz.get("account_details", []) for stream in account.get("stream_detail", [])
            if stream["name"] == subjects.TASKS_STREAM for c in stream.get("consumer_detail", [])}
