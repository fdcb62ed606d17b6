"""A handler the consumer stopped waiting for (its subscription cancelled) runs on; how it ends is
retrieved, not reported by asyncio as "Task exception was never retrieved" (muster.bus.consume)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from muster.bus.consume import _owned


async def test_a_handler_left_running_has_its_error_retrieved() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    gate = asyncio.Event()

    async def handler() -> None:
        await gate.wait()
        raise ConnectionError("the connection closed under the handler")

    task = _owned(handler())
    waiting = asyncio.ensure_future(asyncio.wait({task}))
    await asyncio.sleep(0)
    waiting.cancel()  # the consumer stops waiting (its subscription is cancelled)
    gate.set()
    while not task.done():
        await asyncio.sleep(0)
    del task, waiting
    gc.collect()
    loop.set_exception_handler(None)
    assert [c.get("message") for c in reported] == []
