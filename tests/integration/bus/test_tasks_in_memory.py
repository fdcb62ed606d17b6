"""TASKS in memory (docs/decisions/0013) against a real nats-server restarted on its store: the
queue is lost with the restart and the planner's queue is told once; a TASKS kept on file by an
older version is kept as it is, and survives (nothing to tell)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import StorageType

from contracts import subjects
from muster.bus.connect import connect, on_reconnect
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams, tasks_config
from muster.bus.taskqueue import NatsTaskQueue

from .test_taskqueue import _task

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]
DEADLINE_S = 30.0


async def _quiet(*_: Any) -> None:
    """The restart's disconnects are expected here."""


async def _restarted(stack: AsyncExitStack, tmp_path: Path, *, file_tasks: bool) -> tuple[Any, NatsTaskQueue, asyncio.Queue[None]]:
    """A server with TASKS declared (on file, as an older version made it, if `file_tasks`), a
    queue watching for resets with one task published, then the server restarted on its store.
    Returns the connection, the queue, and the resets it was told of; the reconnect has happened."""
    server = await NatsServer(tmp_path / "nats", name="tasks").start()
    stack.push_async_callback(lambda: server.stop())
    nc = await connect(server.url, name="planner-q", error_cb=_quiet, disconnected_cb=_quiet)
    stack.push_async_callback(nc.close)
    if file_tasks:
        await nc.jetstream().add_stream(replace(tasks_config(), storage=StorageType.FILE))
    await ensure_streams(nc.jetstream())
    queue = NatsTaskQueue(nc.jetstream())
    resets: asyncio.Queue[None] = asyncio.Queue()

    async def on_reset() -> None:
        resets.put_nowait(None)

    await queue.watch_resets(on_reset)
    reconnected = asyncio.get_running_loop().create_future()

    async def on_back() -> None:
        if not reconnected.done():
            reconnected.set_result(None)

    on_reconnect(nc, on_back)
    assert await queue.publish_many([_task("t", 1)]) == [None]
    port = server.port
    await server.stop()
    server = await NatsServer(tmp_path / "nats", port=port, name="tasks").start()
    await asyncio.wait_for(reconnected, DEADLINE_S)
    return nc, queue, resets


async def test_a_restart_loses_the_memory_queue_and_the_planner_is_told_once(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        nc, queue, resets = await _restarted(stack, tmp_path, file_tasks=False)
        await asyncio.wait_for(resets.get(), DEADLINE_S)
        info = await nc.jetstream().stream_info(subjects.TASKS_STREAM)
        assert info.config.storage == StorageType.MEMORY and info.state.messages == 0  # declared again, empty
        async with queue._checking:  # the one look after this reconnect is over
            assert resets.empty()


async def test_a_file_queue_from_an_older_version_is_kept_and_survives(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        nc, queue, resets = await _restarted(stack, tmp_path, file_tasks=True)
        info = await nc.jetstream().stream_info(subjects.TASKS_STREAM)
        assert info.config.storage == StorageType.FILE and info.state.messages == 1
        async with queue._checking:
            assert resets.empty()
