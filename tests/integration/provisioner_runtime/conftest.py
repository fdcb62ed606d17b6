"""Workers and provisioners on a real nats-server, each on a connection of its own, with test
executors whose tasks the test holds and releases. Every wait has a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts import subjects
from contracts.tasks import TaskMessage, TaskOutcome
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore, Recorded, recorded_from_msg
from services.provisioner.app import Provisioner
from services.provisioner.plugins.testing import make_task
from services.provisioner.worker import WorkerConfig, Workers

pytestmark = pytest.mark.nats

DEADLINE_S = 15.0


@dataclass
class HeldExecutor:
    """Runs no plugin: each task waits until the test releases it (or at once when `hold` is
    False). Counts what it ran and the most it ran at once."""

    hold: bool = True
    plugins: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "held", "type": "automator", "version": "0.1"}])
    started: list[TaskMessage] = field(default_factory=list)
    finished: list[TaskMessage] = field(default_factory=list)
    running: int = 0
    most: int = 0

    def __post_init__(self) -> None:
        self.gate = asyncio.Event()
        if not self.hold:
            self.gate.set()
        self.changed = asyncio.Condition()

    def describe(self) -> list[dict[str, Any]]:
        return self.plugins

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        self.started.append(task)
        self.running += 1
        self.most = max(self.most, self.running)
        await self._notify()
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        self.finished.append(task)
        await self._notify()
        return TaskOutcome(ok=True, result={"ran": task.task_id})

    def release(self) -> None:
        self.gate.set()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_started(self, n: int, timeout: float = DEADLINE_S) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: len(self.started) >= n), timeout)


@dataclass
class SlowExecutor(HeldExecutor):
    """Each task takes `seconds` of (simulated) work."""

    seconds: float = 1.0
    hold: bool = False

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        await asyncio.sleep(self.seconds)  # the simulated work itself
        return await super().execute(task)


class LogWatch:
    """Every event of a tenant's log as it is appended (an ordered push consumer)."""

    def __init__(self) -> None:
        self.events: list[Recorded] = []
        self.changed = asyncio.Condition()

    async def _on_msg(self, msg: Msg) -> None:
        self.events.append(recorded_from_msg(msg))
        async with self.changed:
            self.changed.notify_all()

    async def start(self, nc: Client, tenant: str) -> Any:
        return await nc.jetstream().subscribe(f"{subjects.EVT}.{tenant}.>", ordered_consumer=True, cb=self._on_msg)

    def of(self, type_: str, task_id: str | None = None) -> list[Any]:
        return [r.event for r in self.events if r.type == type_ and (task_id is None or r.event.task_id == task_id)]

    async def wait_for(self, predicate: Callable[[LogWatch], bool], timeout: float = DEADLINE_S) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: predicate(self)), timeout)


@dataclass
class Bench:
    """What a test builds: connections, workers and provisioners, all torn down at the end."""

    url: str
    tenant: str
    stack: AsyncExitStack
    log: LogWatch
    nc: Client

    async def connection(self, name: str = "test-worker") -> Client:
        nc = await connect(self.url, name=name, max_reconnect_attempts=0)

        async def close() -> None:
            if not nc.is_closed:
                await nc.close()

        self.stack.push_async_callback(close)
        return nc

    async def workers(self, executor: Any, provisioner_id: str, nc: Client | None = None, **config: Any) -> Workers:
        nc = nc or await self.connection(provisioner_id)
        config.setdefault("tenants", (self.tenant,))
        w = Workers(nc.jetstream(), EventStore(nc), executor, WorkerConfig(provisioner_id=provisioner_id, **config))
        await w.ensure_queues()
        runner = asyncio.create_task(w.run())

        async def stop() -> None:
            await w.abort()
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

        self.stack.push_async_callback(stop)
        return w

    async def provisioner(self, executor: Any, provisioner_id: str, **kw: Any) -> Provisioner:
        nc = await self.connection(provisioner_id)
        ttl = kw.pop("presence_ttl_s", 15)
        kw.setdefault("tenants", (self.tenant,))
        p = Provisioner(nc, executor, WorkerConfig(provisioner_id=provisioner_id, **kw), presence_ttl_s=ttl)
        await p.start()
        self.stack.push_async_callback(p.abort)
        return p

    async def publish(self, task_id: str, tenant: str | None = None, avoid: list[str] | None = None,
                      fence: str | None = None, **kw: Any) -> TaskMessage:
        tenant = tenant or self.tenant
        task = make_task("install", service="svc", task_id=task_id, tenant=tenant, cluster_id=f"c-{tenant}", **kw)
        task = task.model_copy(update={"avoid": avoid or [], "fence": fence})
        await self.nc.jetstream().publish(
            subjects.task_queue(task.tenant, task.provisioner_class), task.model_dump_json().encode(),
            headers={"Nats-Msg-Id": f"{task.job_id}.{task.task_id}.{task.attempt}"},
        )
        return task


@pytest_asyncio.fixture
async def bench(nats_url: str, nc: Client, tenant: str) -> AsyncIterator[Bench]:
    async with AsyncExitStack() as stack:
        log = LogWatch()
        sub = await log.start(nc, tenant)
        stack.push_async_callback(sub.unsubscribe)
        yield Bench(nats_url, tenant, stack, log, nc)
