"""A connection drained before its publisher's inbox subscription was made (a service that could
not start): nothing is left for the event loop to report after the service's own last words."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from nats.aio.client import Client
from nats.errors import ConnectionDrainingError

from muster.bus.wire import Publisher


async def test_a_publisher_whose_inbox_could_not_be_subscribed_leaves_no_unretrieved_exception() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        nc = Client()
        nc._status = Client.DRAINING_SUBS  # as a service's connection while it stops
        publisher = Publisher(nc)
        with pytest.raises(ConnectionDrainingError):
            await publisher.start()
        assert not publisher.ready
        never_awaited = Publisher(nc)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del never_awaited
        gc.collect()
        assert [c.get("message") for c in reported] == []
    finally:
        loop.set_exception_handler(None)
