"""A stream's handler whose one cancel (the tracker's shutdown, sse.end_streams) Python 3.11's
`wait_for` lost, as a nats-py request's reply came in the same turn of the loop, ends at its next
wait for an event instead of following for ever (muster/cancels.py)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import pytest

from muster.cancels import next_item
from services.tracker.sse import deliveries

LOSES_IT = sys.version_info < (3, 12)
"""3.11's `wait_for` drops such a cancel; 3.12's delivers it (the handler then never gets past it)."""


class Response:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.written.append(data)


async def _cancelled_as_its_reply_comes(then: Callable[[], Awaitable[object]]) -> tuple[asyncio.Task[None], list[str]]:
    """A handler waiting for a request's reply as nats-py does (`wait_for`), cancelled once in the
    turn of the loop where the reply comes; then it goes on to `then`."""
    reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    went_on: list[str] = []

    async def handler() -> None:
        await asyncio.wait_for(reply, 10)
        went_on.append(f"cancels standing: {asyncio.current_task().cancelling()}")  # type: ignore[union-attr]
        await then()

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)  # it waits for the reply
    reply.set_result(b"{}")
    task.cancel()
    return task, went_on


async def test_a_followed_stream_whose_cancel_a_request_lost_ends_at_its_wait_for_the_next_event() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    response = Response()

    async def follow() -> None:
        async for _ in deliveries(queue, response):  # type: ignore[arg-type]
            raise AssertionError("nothing was put")

    task, went_on = await _cancelled_as_its_reply_comes(follow)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)  # (without the check: a keep-alive every 15 s, for ever)
    assert went_on == (["cancels standing: 1"] if LOSES_IT else [])
    assert response.written == []


async def test_an_item_that_came_with_the_cancel_is_taken_and_the_next_wait_ends_the_task() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    taken: list[str] = []

    async def take_two() -> None:
        taken.append(await next_item(queue, 10))
        taken.append(await next_item(queue, 10))

    task = asyncio.create_task(take_two())
    await asyncio.sleep(0)
    queue.put_nowait("first")
    await asyncio.sleep(0)  # the item taken off the queue, the waiting task not woken yet: then the cancel
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert taken == (["first"] if LOSES_IT else [])


async def test_a_task_never_asked_to_cancel_waits_as_before() -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    queue.put_nowait("one")
    assert await next_item(queue, 1) == "one"
    with pytest.raises(TimeoutError):
        await next_item(queue, 0.01)
