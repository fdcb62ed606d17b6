"""Workers outlive a nats-server restart: the pull lost with the connection is renewed, and a
task published after the restart runs."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from services.provisioner.worker import WorkerConfig, Workers

from .conftest import Bench, HeldExecutor, LogWatch

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]

DEADLINE_S = 30.0


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

        port = server.port
        await server.stop()
        server = await NatsServer(tmp_path / "nats", port=port, name="restart").start()

        await bench.publish("n2-install")
        await executor.wait_started(2, timeout=DEADLINE_S)
        assert [t.task_id for t in executor.started] == ["n1-install", "n2-install"]
        await asyncio.wait_for(workers.drain(), DEADLINE_S)
        await asyncio.wait_for(runner, DEADLINE_S)
