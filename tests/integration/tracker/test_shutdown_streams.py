"""A tracker that stops while event streams are open (a console's job page, `muster events
--follow`) ends them at once (services/tracker/sse.py, `end_streams`). aiohttp waits for a
handler still running up to its shutdown timeout (60 s), and a stream has no end of its own:
`muster down` killed a tracker held so at its 15 s."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import ClientPayloadError
from aiohttp.test_utils import TestClient

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from services.tracker.http import make_app
from services.tracker.sse import LIVE

from .conftest import BEARER, TrackerServer

DEADLINE = 20.0
"""Well under aiohttp's 60 s: a stream the shutdown did not end is still open at it."""


async def test_a_stopping_tracker_ends_its_open_event_streams(nats_url: str) -> None:
    nc = await connect(nats_url, name="stopping-tracker")
    try:
        await ensure_streams(nc.jetstream())
        server = TrackerServer(make_app(EventStore(nc)))
        await server.start_server()
        http = TestClient(server, headers=BEARER)
        try:
            last = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
            live = await http.get("/v1/events", params={"follow": "true", "after": str(last)})
            assert live.status == 200
            assert len(server.app[LIVE]) == 1  # its handler is following, with nothing to send
            closing = asyncio.ensure_future(server.close())
            with pytest.raises(ClientPayloadError):  # cut: its last chunk never comes, not an end said
                await asyncio.wait_for(live.content.read(), DEADLINE)
            await asyncio.wait_for(closing, DEADLINE)
            assert not server.app[LIVE]
        finally:
            await http.close()
    finally:
        await nc.close()
