"""A pool service in the test's event loop, on a nats-server of the test's own (the service's
durable consumer would otherwise see other tests' requests)."""

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
from services.pool.app import PoolService
from services.pool.entrypoint import start_pool_service

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)


def real_host_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def hosts(n: int, prefix: str = "h", **props: Any) -> list[HostSpec]:
    return [HostSpec(id=f"{prefix}{i}", address=f"10.9.0.{i + 1}", host_keys=[real_host_key()],
                     properties=props or {"cpu": 4, "memory": "8G", "labels": ["ssd"]}) for i in range(n)]


@dataclass
class Watch:
    """Events on a subject filter as they are recorded (an ordered JetStream consumer from now
    on: it sees only committed events, never half of an atomic batch), to wait on with a
    deadline instead of asking again."""

    nc: Client
    filter: str
    seen: list[Recorded] = field(default_factory=list)
    waiters: list[tuple[Any, asyncio.Future[Recorded]]] = field(default_factory=list)

    async def start(self) -> "Watch":
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

    def types(self) -> list[str]:
        return [r.type for r in self.seen]


@dataclass
class PoolEnv:
    url: str
    nc: Client
    store: EventStore
    service: PoolService
    stack: AsyncExitStack

    async def watch(self, subject_filter: str) -> Watch:
        return await Watch(self.nc, subject_filter).start()

    async def start_another(self, instance: str) -> PoolService:
        nc = await connect(self.url, name=instance)
        self.stack.push_async_callback(nc.close)
        return await start_pool_service(nc, self.stack, instance, callback_backoff_s=0.05)

    async def log(self, pool: str) -> list[Recorded]:
        return await self.store.read(subjects.pool_events(pool))


@pytest_asyncio.fixture
async def env(fresh_nats: str) -> AsyncIterator[PoolEnv]:
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        service_nc = await connect(fresh_nats, name="pool-service")
        stack.push_async_callback(service_nc.close)
        service = await start_pool_service(service_nc, stack, "pool-test", callback_backoff_s=0.05)
        yield PoolEnv(fresh_nats, nc, EventStore(nc), service, stack)


__all__ = ["PoolEnv", "Watch", "hosts", "real_host_key", "recorded_from_msg"]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


async def muster(url: str, *args: str, timeout: float = 60) -> Run:
    """`muster ARGS...` as a user runs it (a process, NATS_URL set)."""
    env = {**os.environ, "NATS_URL": url, "COLUMNS": "200", "USER": "tester"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return Run(proc.returncode or 0, out.decode(), err.decode())
