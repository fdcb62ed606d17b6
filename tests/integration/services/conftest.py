"""The four services in this test's event loop, on a nats-server of the test's own."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.commands import Accepted
from contracts.events import JobSucceeded
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore, recorded_from_msg
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.app import Planner, PlannerConfig
from services.planner.entrypoint import start_planner
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers
from services.solver.entrypoint import start_solver

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"

async def first_record(store: EventStore, subject: str, match: Callable[[Any], bool], timeout: float = 30) -> Any:
    """The first record on `subject` that `match`es, from the start of the log (waited for)."""
    found: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        r = recorded_from_msg(msg)
        if match(r) and not found.done():
            found.set_result(r)

    sub = await store.js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=on_msg)
    try:
        return await asyncio.wait_for(found, timeout)
    finally:
        await sub.unsubscribe()


TERMINATED = f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{subjects.TASKS_STREAM}.>"


class Terminations:
    """The server's advisories of task messages a provisioner terminated."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    async def start(self, nc: Any) -> None:
        async def on_msg(msg: Any) -> None:
            self.seen.append(json.loads(msg.data))
            self.changed.set()

        await nc.subscribe(TERMINATED, cb=on_msg)

    async def reach(self, n: int, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while len(self.seen) < n:
                self.changed.clear()
                await self.changed.wait()


BEARER = {"Authorization": f"Bearer {os.environ['MUSTER_TOKEN']}"}
"""The session's system token (tests/conftest.py): the tracker checks tokens."""


def quick_demo_catalog(latency_ms: str = "0-20") -> Any:
    """The demo catalog with short simulated tasks: these tests check logic, not pacing (a
    test that must catch a job running gives one service a slow action of its own)."""
    catalog = load_catalog(DEMO)
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": latency_ms}})
    return catalog


@dataclass
class Stack:
    client: MusterClient
    store: EventStore
    planner: Planner
    workers: Workers
    http: Any
    url: str = ""
    planner_nc: Any = None
    tenant: str = "default"


async def succeeded(stack: Stack, command: Any, timeout: float = 60) -> Any:
    """Send `command`, expect it accepted and its job to succeed; the reply (`Accepted`)."""
    reply = await stack.client.request(command)
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=timeout)
    assert isinstance(final, JobSucceeded), final
    return reply


@pytest_asyncio.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    options = dict(getattr(request, "param", {}))
    with_http = options.pop("http", True)
    secrets = options.pop("secrets", None)  # the provisioner's secrets file, {provider: {field: value}}
    old_log = options.pop("old_log", None)
    async with AsyncExitStack() as exit_stack:
        if old_log is None:
            url = request.getfixturevalue("fresh_nats")
        else:  # the streams as an older muster left them, before anything of today's starts
            from .oldlog import server_with

            url, request.node.old_log = await server_with(tmp_path / "old", old_log, exit_stack)
        ncs = []
        for name in ("planner", "solver", "provisioner", "tracker", "client"):
            nc = await connect(url, name=name)
            ncs.append(nc)
            exit_stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())

        planner = await start_planner(ncs[0], exit_stack, PlannerConfig(instance="planner-test", **options))
        await start_solver(ncs[1], exit_stack, "solver-test")

        registry = PluginRegistry.discover(secrets=secrets)
        exit_stack.push_async_callback(registry.aclose)
        workers = await start_workers(ncs[2], exit_stack, registry, WorkerConfig(provisioner_id="prov-test", capacity=8))

        http: Any = None
        if with_http:
            from services.tracker.http import make_app

            http = TestClient(TestServer(make_app(EventStore(ncs[3]))), headers=BEARER)
            await http.start_server()
            exit_stack.push_async_callback(http.close)
            # `muster` commands run by the test read through this tracker (decision 0016).
            request.getfixturevalue("monkeypatch").setenv("MUSTER_TRACKER_URL", str(http.make_url("")).rstrip("/"))

        client = MusterClient(ncs[4])
        store = EventStore(ncs[4])
        if old_log is None:  # an old log has its own catalog
            await apply_catalog(store, "default", quick_demo_catalog())
        yield Stack(client=client, store=store, planner=planner, workers=workers, http=http, url=url, planner_nc=ncs[0])
