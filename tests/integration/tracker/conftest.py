"""The four services in this test's event loop on a nats-server of the test's own, with the
planner in an exit stack of its own so a test can stop it (its jobs' owner is then gone)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web_runner import BaseRunner
from nats.aio.client import Client

from contracts.commands import Accepted, CreateCluster
from contracts.events import FINAL_JOB_STATES
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.readmodel.locations import job_key
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers
from services.solver.entrypoint import start_solver
from services.tracker.app import Tracker
from services.tracker.http import TRACKER, make_app
from services.tracker.unreadable import tracker_runner

DEMO_CATALOG = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
DEADLINE = 60.0
TENANT = "default"


class TrackerServer(TestServer):
    """aiohttp's test server with the runner `muster tracker` serves with (`tracker_runner`: its
    parser's limits, its JSON answer to a request the parser refuses): the tests see what users
    get (before session 37 a plain `AppRunner`, and aiohttp's plain-text 400s)."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        return tracker_runner(self.app, **kwargs)


BEARER = {"Authorization": f"Bearer {os.environ['MUSTER_TOKEN']}"}
"""The session's system token (tests/conftest.py): the tracker checks tokens."""


@dataclass
class Tracked:
    url: str
    client: MusterClient
    store: EventStore
    http: TestClient
    tracker: Tracker
    planner_stack: AsyncExitStack
    planner: object = None
    extra: list[TestClient] = field(default_factory=list)
    created: int = 0

    async def create(self, nodes: int = 2) -> Accepted:
        """A new cluster: c1, c2... (names are unique in a tenant)."""
        self.created += 1
        reply = await self.client.send(TENANT, CreateCluster(name=f"c{self.created}", template="hadoop-small", nodes=nodes))
        assert isinstance(reply, Accepted), reply
        return reply

    async def until(self, predicate: Callable[[], bool], tracker: Tracker | None = None) -> None:
        """Until the index satisfies `predicate` (checked on every change of its mirror)."""
        index = (tracker or self.tracker).index
        assert index is not None
        await index.mirror.wait_for(predicate, DEADLINE)

    async def indexed_final(self, job_id: str, tracker: Tracker | None = None) -> None:
        index = (tracker or self.tracker).index
        assert index is not None

        def final() -> bool:
            record = index.mirror.get(job_key(TENANT, job_id))
            return record is not None and record.get("state") in FINAL_JOB_STATES

        await self.until(final, tracker)

    async def stop_planner(self) -> None:
        await self.planner_stack.aclose()

    async def another_tracker(self, **options: object) -> TestClient:
        nc = await self._connect("tracker-2")
        http = TestClient(TrackerServer(make_app(EventStore(nc), **options)), headers=BEARER)  # type: ignore[arg-type]
        await http.start_server()
        self.extra.append(http)
        return http

    async def _connect(self, name: str) -> Client:
        return await connect(self.url, name=name)


@pytest_asyncio.fixture
async def tracked(fresh_nats: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Tracked]:
    async with AsyncExitStack() as stack:
        async def connection(name: str) -> Client:
            nc = await connect(fresh_nats, name=name)
            stack.push_async_callback(nc.close)
            return nc

        services_nc = await connection("services")
        await ensure_streams(services_nc.jetstream())
        planner_stack = AsyncExitStack()
        planner_nc = await connection("planner")
        planner = await start_planner(planner_nc, planner_stack, PlannerConfig(instance="planner-test"))
        stack.push_async_callback(planner_stack.aclose)
        # Short simulated tasks: these tests check what the tracker says, not pacing.
        catalog = load_catalog(DEMO_CATALOG)
        sim = catalog.providers["sim"]
        catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "10-40"}})
        await apply_catalog(EventStore(services_nc), TENANT, catalog)

        await start_solver(services_nc, stack, "solver-test")

        registry = PluginRegistry.discover()
        stack.push_async_callback(registry.aclose)
        workers = Workers(services_nc.jetstream(), EventStore(services_nc), registry, WorkerConfig(provisioner_id="prov-test"))
        running = asyncio.create_task(workers.run())

        async def stop_workers() -> None:
            await workers.drain()
            await running

        stack.push_async_callback(stop_workers)

        http = TestClient(TrackerServer(make_app(EventStore(await connection("tracker")))), headers=BEARER)
        await http.start_server()
        stack.push_async_callback(http.close)
        monkeypatch.setenv("MUSTER_TRACKER_URL", str(http.make_url("")).rstrip("/"))  # the commands read through it

        client_nc = await connection("client")
        tracked = Tracked(fresh_nats, MusterClient(client_nc), EventStore(client_nc), http, http.app[TRACKER], planner_stack, planner)
        try:
            yield tracked
        finally:
            for extra in tracked.extra:
                await extra.close()


@pytest_asyncio.fixture
async def lone(nats_url: str) -> AsyncIterator[TestClient]:
    """Just a tracker, on the session's server: for answers that need no job."""
    nc = await connect(nats_url, name="lone-tracker")
    await ensure_streams(nc.jetstream())
    server = TrackerServer(make_app(EventStore(nc)))
    await server.start_server()
    http = TestClient(server, headers=BEARER)
    try:
        yield http
    finally:
        await http.close()
        await nc.close()
