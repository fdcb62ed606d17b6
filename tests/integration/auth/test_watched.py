"""The attack tests' refusals end at the server's word, not at their timeouts (watched.py): that
word must say no more than the timeout did. A request the server lets through is answered, on
the same connection and at the same moment as the refused ones."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest_asyncio
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout

from contracts import subjects

from .conftest import Authed
from .serviceworld import World, service_world
from .watched import Dropped, watching

INFO = f"$JS.API.STREAM.INFO.{subjects.EVENTS_STREAM}"
"""What a planner may ask (its start declares the log)."""


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    async with service_world(authed, ("planner",)) as made:
        yield made


async def test_a_watched_request_ends_at_its_own_violation_and_no_other(world: World) -> None:
    """At once on a planner's connection: the log's info (allowed) is answered; its purge (refused)
    ends at the server's word; a stream `events`' info (refused), whose subject nats-py's
    lowercased violation cannot tell from the allowed one's, waits out its timeout."""
    nc = world.services["planner"]
    with watching():
        answered, purged, unclear = await asyncio.gather(
            nc.request(INFO, b"", timeout=2), nc.request(f"$JS.API.STREAM.PURGE.{subjects.EVENTS_STREAM}", b"", timeout=2),
            nc.request(f"$JS.API.STREAM.INFO.{subjects.EVENTS_STREAM.lower()}", b"", timeout=2), return_exceptions=True)
    assert isinstance(answered, Msg) and json.loads(answered.data)["config"]["name"] == subjects.EVENTS_STREAM, answered
    assert isinstance(purged, Dropped), purged
    assert isinstance(unclear, NatsTimeout) and not isinstance(unclear, Dropped), unclear
    assert sum("permissions violation" in v for v in world.violations) == 2, world.violations
