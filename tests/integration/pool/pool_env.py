"""Pool integration tests' environment: a pool service in the test's event loop on a
nats-server of the test's own (the service's durable consumer would otherwise see other tests'
requests), or the whole pipeline; a watch on the log; the `muster` command."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.pools import HostSpec
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore, Recorded, recorded_from_msg
from muster.bus.streams import ensure_streams
from muster.destinations import Allowed
from services.pool.app import PoolService
from services.pool.entrypoint import start_pool_service
from tests import cli_in_process

LOCAL = Allowed.parse(["127.0.0.1"])
"""Where the tests' operator lets callbacks go besides public addresses: their receivers on
loopback (refused by default: decision 38; `strict_env` keeps the default)."""


def real_host_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def hosts(n: int, prefix: str = "h", **props: Any) -> list[HostSpec]:
    return [HostSpec.model_validate({"id": f"{prefix}{i}", "address": f"10.9.0.{i + 1}", "host_keys": [real_host_key()],
                                     "properties": props or {"cpu": 4, "memory": "8G", "labels": ["ssd"]}}) for i in range(n)]


@dataclass
class Watch:
    """Events on a subject filter as they are recorded (an ordered JetStream consumer from now
    on: it sees only committed events, never half of an atomic batch), to wait on with a
    deadline instead of asking again."""

    nc: Client
    filter: str
    seen: list[Recorded] = field(default_factory=list)
    waiters: list[tuple[Any, asyncio.Future[Recorded]]] = field(default_factory=list)

    async def start(self) -> Watch:
        async def on_msg(msg: Any) -> None:
            r = recorded_from_msg(msg)
            self.seen.append(r)
            for predicate, fut in list(self.waiters):
                if not fut.done() and predicate(r):
                    fut.set_result(r)

        self.sub = await self.nc.jetstream().subscribe(self.filter, ordered_consumer=True, cb=on_msg,
                                                       deliver_policy=DeliverPolicy.NEW, stream=subjects.EVENTS_STREAM)
        return self

    async def wait(self, predicate: Any, timeout: float = 10.0) -> Recorded:
        for r in self.seen:
            if predicate(r):
                return r
        fut: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
        self.waiters.append((predicate, fut))
        return await asyncio.wait_for(fut, timeout)

    async def more_than(self, count: int, timeout: float) -> None:
        """Until more than `count` events have been seen."""
        if len(self.seen) > count:
            return
        fut: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
        self.waiters.append((lambda r: len(self.seen) > count, fut))
        await asyncio.wait_for(fut, timeout)

    def types(self) -> list[str]:
        return [r.type for r in self.seen]


@dataclass
class PoolEnv:
    url: str
    nc: Client
    store: EventStore
    service: PoolService
    stack: AsyncExitStack
    allowed: Allowed = LOCAL

    async def watch(self, subject_filter: str) -> Watch:
        return await Watch(self.nc, subject_filter).start()

    async def start_another(self, instance: str) -> PoolService:
        nc = await connect(self.url, name=instance)
        self.stack.push_async_callback(nc.close)
        return await start_pool_service(nc, self.stack, instance, callback_backoff_s=0.05, allowed=self.allowed)

    async def log(self, pool: str) -> list[Recorded]:
        return await self.store.read(subjects.pool_events(pool))


async def _env(url: str, allowed: Allowed) -> AsyncIterator[PoolEnv]:
    async with AsyncExitStack() as stack:
        nc = await connect(url, name="test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        service_nc = await connect(url, name="pool-service")
        stack.push_async_callback(service_nc.close)
        service = await start_pool_service(service_nc, stack, "pool-test", callback_backoff_s=0.05, allowed=allowed)
        yield PoolEnv(url, nc, EventStore(nc), service, stack, allowed)


@pytest_asyncio.fixture
async def env(fresh_nats: str) -> AsyncIterator[PoolEnv]:
    async for e in _env(fresh_nats, LOCAL):
        yield e


@pytest_asyncio.fixture
async def strict_env(fresh_nats: str) -> AsyncIterator[PoolEnv]:
    """A pool service whose operator allows nothing besides public addresses (the default)."""
    async for e in _env(fresh_nats, Allowed()):
        yield e



@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


async def muster(url: str, *args: str, timeout: float = 60, process: bool = False) -> Run:
    """`muster ARGS...` as a user runs it (NATS_URL set): in the test's process
    (tests/cli_in_process.py), or as a process of its own if `process`."""
    env = {**os.environ, "NATS_URL": url, "COLUMNS": "200", "USER": "tester"}
    if not process:
        return Run(*await cli_in_process.run(args, env, timeout))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return Run(proc.returncode or 0, out.decode(), err.decode())


# -- the whole pipeline in this loop: planner, solver, provisioner, pool service ----------------

POOL_CATALOG = Path(__file__).parents[3] / "muster" / "demo" / "pool-catalog"


@dataclass
class Pipeline:
    url: str
    nc: Client
    store: EventStore
    client: Any
    planner: Any
    pools: PoolService
    hosts: Any
    tenant: str = "default"

    async def watch(self, subject_filter: str) -> Watch:
        return await Watch(self.nc, subject_filter).start()

    async def until_pool(self, predicate: Any, timeout: float = 30.0, name: str = "lab") -> Any:
        """The pool rebuilt from the log, once `predicate(pool)` holds: checked now and after
        each new pool event (the planner's reports reach the pool after its jobs end)."""
        from muster.bus.repository import rebuild
        from services.pool.domain.pool import Pool

        watch = await self.watch(subjects.pool_events(name))
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            count = len(watch.seen)
            pool = rebuild(Pool, await self.store.read(subjects.pool_events(name)))
            if pool is not None and predicate(pool):
                return pool
            await watch.more_than(count, max(0.1, deadline - asyncio.get_running_loop().time()))

    async def add_hosts(self, *host_ids: str, **properties: Any) -> None:
        from contracts.pool_commands import AddHosts
        from services.pool import client as pools

        specs = [await self.hosts.start(h, **properties) for h in host_ids]
        await pools.send(self.nc, "lab", AddHosts(hosts=specs, requested_by="admin"))


@pytest_asyncio.fixture
async def pipeline(fresh_nats: str, tmp_path: Path) -> AsyncIterator[Pipeline]:
    from muster.bus.consume import consume_routes
    from muster.catalog.files import load_catalog
    from muster.catalog.store import apply_catalog
    from muster.client import MusterClient
    from muster.demo.pool_hosts import LocalPoolHosts
    from services.planner.app import PlannerConfig
    from services.planner.entrypoint import start_planner
    from services.provisioner.entrypoint import start_workers
    from services.provisioner.plugins import PluginRegistry
    from services.provisioner.worker import WorkerConfig
    from services.solver.routing import ROUTES as SOLVER_ROUTES
    from services.solver.service import SolverService

    async with AsyncExitStack() as stack:
        ncs = []
        for name in ("planner", "solver", "provisioner", "pools", "client"):
            nc = await connect(fresh_nats, name=name)
            ncs.append(nc)
            stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())
        hosts = LocalPoolHosts(tmp_path / "hosts")
        stack.push_async_callback(hosts.stop)
        pool_service = await start_pool_service(ncs[3], stack, "pool-test", callback_backoff_s=0.05)
        planner = await start_planner(ncs[0], stack, PlannerConfig(instance="planner-test", max_attempts=2,
                                                                   action_timeout_s={"default": 20.0}))
        solver = SolverService(EventStore(ncs[1]), "solver-test")
        for sub in await consume_routes(ncs[1].jetstream(), solver, SOLVER_ROUTES):
            stack.push_async_callback(sub.unsubscribe)
        registry = PluginRegistry.discover(secrets={"lab": {"identityfile": str(hosts.key_path)}}, work_dir=tmp_path / "prov")
        stack.push_async_callback(registry.aclose)
        await start_workers(ncs[2], stack, registry, WorkerConfig(provisioner_id="prov-test", capacity=8))
        store = EventStore(ncs[4])
        await apply_catalog(store, "default", load_catalog(POOL_CATALOG))
        yield Pipeline(fresh_nats, ncs[4], store, MusterClient(ncs[4]), planner, pool_service, hosts)
