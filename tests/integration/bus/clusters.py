"""What the bus's tests on a real cluster of nats-servers share (the cluster itself is the
`nodes` fixture, conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import BadRequestError

T = TypeVar("T")


async def retried(call: Callable[[], Awaitable[T]], tries: int = 8) -> T:
    """A cluster that has just elected its meta leader may not know every peer yet ("no suitable
    peers for placement", or no answer in time): a bounded retry of one request (0.25 s,
    doubling), as the auth service's start does with its declarations."""
    for attempt in range(tries):
        try:
            return await call()
        except (BadRequestError, NatsTimeout):
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.25 * 2**attempt)
    raise AssertionError("unreachable")
