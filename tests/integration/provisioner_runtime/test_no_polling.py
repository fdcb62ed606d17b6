"""Claiming never becomes polling: an idle worker sends the server nothing but its one long pull
(renewed when it expires), counted by the server itself (its monitoring endpoint), not by us."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from nats.aio.msg import Msg

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.bus.wire import flush
from services.provisioner.worker import WorkerConfig, Workers

from .conftest import HeldExecutor

pytestmark = [pytest.mark.nats, pytest.mark.timeout(90)]

IDLE_S = 10.0
MOST_PULLS = 3
"""A long pull waits up to 5 s on the server (`pull.FETCH_WAIT_S`) and is renewed when it
expires: two or three in 10 s. A worker that polled would send one every few milliseconds."""


async def _sent(http: aiohttp.ClientSession, url: str, name: str) -> int:
    """Messages the named connection has sent the server so far (`in_msgs`: in, for the server)."""
    async with http.get(f"{url}/connz", params={"subs": "1"}) as answer:
        found = [c for c in (await answer.json())["connections"] if c.get("name") == name]
    assert len(found) == 1, found
    return int(found[0]["in_msgs"])


async def test_an_idle_worker_sends_nothing_but_its_long_pull(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        server = await NatsServer(tmp_path / "nats", name="idle", http_port=0).start()  # (0: chosen at its start)
        monitor = server.http_port
        stack.push_async_callback(server.stop)
        nc = await connect(server.url, name="test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        # Every pull request the worker sends, seen as it goes to the server (a subscriber of the
        # API subject gets a copy).
        durable = subjects.task_consumer("idle", "default")
        pulls: list[float] = []
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pulled_more = asyncio.Condition()

        async def on_pull(msg: Msg) -> None:
            pulls.append(asyncio.get_running_loop().time())
            if not first.done():
                first.set_result(None)
            async with pulled_more:
                pulled_more.notify_all()

        watch = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{subjects.TASKS_STREAM}.{durable}", cb=on_pull)
        stack.push_async_callback(watch.unsubscribe)
        await flush(nc)

        worker_nc = await connect(server.url, name="idle-worker")
        stack.push_async_callback(worker_nc.close)
        workers = Workers(worker_nc.jetstream(), EventStore(worker_nc), HeldExecutor(hold=False),
                          WorkerConfig(provisioner_id="idle", tenants=("idle",)))
        runner = asyncio.create_task(workers.run())
        stack.push_async_callback(workers.abort)
        await asyncio.wait_for(first, 15)  # its long pull is on the server

        http = aiohttp.ClientSession()
        stack.push_async_callback(http.close)
        url = f"http://127.0.0.1:{monitor}"
        before, pulls_before = await _sent(http, url, "idle-worker"), len(pulls)
        await asyncio.sleep(IDLE_S)  # the time being measured, not a wait for something to happen
        sent = await _sent(http, url, "idle-worker") - before
        assert sent <= MOST_PULLS, f"an idle worker sent {sent} messages in {IDLE_S:.0f} s"
        # And every one of them was a renewal of its pull. The server's count and our copies are
        # not in step either way: a message may be counted before its copy reaches us (a CI run read
        # 2 sent, 1 seen: the copies get 5 s to arrive), and a read's messages are added to the
        # count after they are delivered, so the pull that opened the window (its copy is what
        # started it) may be counted inside it (a fresh clone's run read 3 sent, 2 seen, the pulls
        # 5 s apart). One message of the window's edge is that pull; any other is not a pull.
        async with pulled_more:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pulled_more.wait_for(lambda: len(pulls) - pulls_before >= sent), 5)
        seen = len(pulls) - pulls_before
        assert seen >= sent - 1, f"{sent} messages sent, {seen} of them pulls"
        assert workers.in_flight == 0 and not runner.done()


