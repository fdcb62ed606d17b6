"""Bugs the fault suite found, outside the fault suite's own code: each test fails until the bug
is fixed (xfail strict), so a fix shows up as an XPASS to remove the marker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contracts.events import JobPaused
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


@pytest.mark.xfail(strict=True, reason=(
    "muster/bus/eventstore.py EventStore.replay: when the filter matches no event but the stream "
    "holds others, the ordered consumer may already have moved `delivered.stream_seq` past 0 when "
    "`consumer_info()` is read, so the 'nothing to replay' check (num_pending == 0 and "
    "delivered.stream_seq == 0) fails and replay waits for a message that never comes, until its "
    "600 s timeout. A planner starting on a log with events but no cluster events (provisioners "
    "registered first, or a catalog loaded) hangs in resume() about half the time."))
async def test_replay_of_a_filter_matching_nothing_returns_at_once(tmp_path: Path) -> None:
    async with NatsServer(tmp_path / "nats") as server:
        nc = await connect(server.url, name="replay-bug")
        try:
            await ensure_streams(nc.jetstream())
            store = EventStore(nc)
            for i in range(5):
                await store.append(f"muster.evt.t.job.j{i}", [Append(JobPaused(job_id=f"j{i}", by="x"), msg_id=f"m{i}")])
            for attempt in range(30):
                try:
                    assert await store.replay("muster.evt.*.cluster.*", lambda r: None, timeout=0.5) == 0
                except asyncio.TimeoutError:
                    pytest.fail(f"replay of a filter matching nothing hung (attempt {attempt + 1} of 30)")
        finally:
            await nc.close()
