"""What the bus's tests on a real cluster of nats-servers share (the cluster itself is the
`nodes` fixture, conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import BadRequestError, NoStreamResponseError

from muster.bus.wire import Refused

T = TypeVar("T")


async def retried(call: Callable[[], Awaitable[T]], tries: int = 8) -> T:
    """A cluster that has just elected its meta leader may not know every peer yet ("no suitable
    peers for placement", or no answer in time), and a stream it has just made (or whose leader
    just moved) takes writes on one server before another knows of it: a write through that one
    is answered 503 with no body, no responders, while the stream's interest is on its way
    through the routes (met by a test's first append once in about sixty runs under load; a
    publish right after a create, through each server, got it 3 times in 180). nats-py's own
    publish (a KV put) says it as `NoStreamResponseError`. Nor are a fresh cluster's routes whole
    when it has elected its meta leader: two nodes dialling each other at once each close one
    connection as a duplicate, sometimes both, and the pair is joined again at the next retry of
    its route, a second later; meanwhile a write through one of them to a stream of one replica
    on the other is answered 503 (a probe: 1 round in 8, puts through one node refused for 0.9 s
    after the stream's creation, while its route log went on changing). A bounded retry of one
    request (0.25 s, doubling), as the auth service's start does with its declarations and its
    first writes, and the provisioners' presence with their records."""
    for attempt in range(tries):
        try:
            return await call()
        except (BadRequestError, NatsTimeout, Refused, NoStreamResponseError) as err:
            if attempt == tries - 1 or (isinstance(err, Refused) and err.status != "503"):
                raise
            await asyncio.sleep(0.25 * 2**attempt)
    raise AssertionError("unreachable")
