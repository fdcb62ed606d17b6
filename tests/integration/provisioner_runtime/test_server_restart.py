"""Workers and presence outlive a nats-server restart: the pull lost with the connection is
renewed, the queue (TASKS lives in memory, docs/decisions/0013: the restart lost it) and the
worker's consumer are declared again, a task published after the restart runs, and the presence
records are there and refreshed again."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contracts.subjects import PRESENCE_BUCKET, task_consumer
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.provisioner.app import Provisioner
from services.provisioner.presence import live_provisioners
from services.provisioner.worker import WorkerConfig, Workers

from .conftest import Bench, HeldExecutor, LogWatch

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]

DEADLINE_S = 30.0


async def _set(done: asyncio.Future[None], _: Any) -> None:
    if not done.done():
        done.set_result(None)


async def _quiet(*_: Any) -> None:
    """The restart's disconnects are expected here."""


async def test_workers_take_tasks_again_after_the_server_restarts(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        server = await NatsServer(tmp_path / "nats", name="restart").start()
        stack.push_async_callback(lambda: server.stop())
        nc = await connect(server.url, name="test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        bench = Bench(server.url, "trestart", stack, LogWatch(), nc)
        await bench.log.start(nc, bench.tenant)

        worker_nc = await connect(server.url, name="prov-r")  # reconnects without end
        stack.push_async_callback(worker_nc.close)
        executor = HeldExecutor(hold=False)
        workers = Workers(worker_nc.jetstream(), EventStore(worker_nc), executor,
                          WorkerConfig(provisioner_id="prov-r", tenants=(bench.tenant,)))
        runner = asyncio.create_task(workers.run())
        stack.push_async_callback(workers.abort)
        await bench.publish("n1-install")
        await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)

        # The worker declares the lost queue and its consumer again by itself: the server's
        # advisory of the consumer's creation says when (the test's subscription comes back with
        # its connection).
        created = asyncio.get_running_loop().create_future()
        durable = task_consumer(bench.tenant, "default")
        advisories = await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.CREATED.TASKS.{durable}",
                                        cb=partial(_set, created))
        stack.push_async_callback(advisories.unsubscribe)
        port = server.port
        await server.stop()
        server = await NatsServer(tmp_path / "nats", port=port, name="restart").start()
        await asyncio.wait_for(created, DEADLINE_S)

        await bench.publish("n2-install")
        await executor.wait_started(2, timeout=DEADLINE_S)
        assert [t.task_id for t in executor.started] == ["n1-install", "n2-install"]
        await asyncio.wait_for(workers.drain(), DEADLINE_S)
        await asyncio.wait_for(runner, DEADLINE_S)


async def _refreshed_after(url: str, ids: set[str], since: datetime, timeout: float) -> None:
    """Wait until every one of `ids` has a stored presence record written after `since`. Each
    write the provisioners publish wakes a direct get of the stored records (which, unlike a
    KV watch, never declares the bucket itself)."""
    nc = await connect(url, name="presence-check")
    writes: asyncio.Queue[None] = asyncio.Queue()

    async def on_write(_: Any) -> None:
        writes.put_nowait(None)

    async def until_fresh() -> None:
        while True:
            records = await live_provisioners(nc)
            if ids <= {p.info.id for p in records if p.refreshed_at > since}:
                return
            await writes.get()

    sub = await nc.subscribe(f"$KV.{PRESENCE_BUCKET}.>", cb=on_write)
    try:
        await asyncio.wait_for(until_fresh(), timeout)
    finally:
        await sub.unsubscribe()
        await nc.close()


async def test_presence_outlives_a_server_restart_under_live_provisioners(tmp_path: Path) -> None:
    """Issue #18.5: the bucket was memory-backed, vanished with a restart, and the provisioners
    logged `presence refresh failed` every second for good. Now the records survive a kill -9
    of the server, the provisioners write them again, and a bucket that is gone all the same
    is declared again by the next write."""
    async with AsyncExitStack() as stack:
        server = await NatsServer(tmp_path / "nats", name="presence").start()
        stack.push_async_callback(lambda: server.stop())
        nc = await connect(server.url, name="test", error_cb=_quiet, disconnected_cb=_quiet)
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        bench = Bench(server.url, "tpresence", stack, LogWatch(), nc)
        ids = {"prov-p1", "prov-p2"}
        for pid in sorted(ids):
            p = Provisioner(await connect(server.url, name=pid, error_cb=_quiet, disconnected_cb=_quiet),
                            HeldExecutor(hold=False), WorkerConfig(provisioner_id=pid, tenants=(bench.tenant,)),
                            presence_ttl_s=3)
            await p.start()
            stack.push_async_callback(p.nc.close)
            stack.push_async_callback(p.abort)
        assert {p.info.id for p in await live_provisioners(nc)} == ids

        server.kill()
        assert server.process is not None
        await server.process.wait()
        restarted = datetime.now(UTC)
        await server.start()  # same port, same store
        assert {p.info.id for p in await live_provisioners(nc, timeout=DEADLINE_S)} == ids, "records lost with the restart"
        await _refreshed_after(server.url, ids, restarted, DEADLINE_S)

        await nc.jetstream().delete_key_value(PRESENCE_BUCKET)
        gone = datetime.now(UTC)
        await _refreshed_after(server.url, ids, gone, DEADLINE_S)
        assert {p.info.id for p in await live_provisioners(nc)} == ids
