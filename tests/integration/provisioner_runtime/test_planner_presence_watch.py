"""The planner's watch of the provisioners' presence starts again once it can (decision 54):
a planner that found the bucket unreadable at its start used never to watch, and a provisioner
that died later was found only when a cancel closed its fence."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import pytest
from nats.js.api import StreamConfig

from contracts import subjects
from contracts.tasks import ProvisionerInfo, ProvisionerPresence
from muster.bus.connect import connect
from services.planner.adapters import Sessions
from services.planner.presencewatch import watch_presence
from services.provisioner.presence import KV_STREAM, KV_SUBJECT_PREFIX, presence_key

from .conftest import DEADLINE_S

pytestmark = pytest.mark.nats


class SeenSessions(Sessions):
    """The planner's `Sessions`, and `recorded` set when the watch gives it a record."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded = asyncio.Event()

    def seen(self, pid: str, record: ProvisionerPresence | None) -> None:
        super().seen(pid, record)
        if record is not None:
            self.recorded.set()


async def test_a_watch_that_could_not_start_starts_once_the_bucket_can_be_read(fresh_nats: str) -> None:
    nc = await connect(fresh_nats, name="test")
    try:
        js = nc.jetstream()
        # A stream where the bucket goes, but not a bucket (no per-subject limit): unreadable as one.
        config = StreamConfig(name=KV_STREAM, subjects=[f"{KV_SUBJECT_PREFIX}>"], allow_direct=True)
        await js.add_stream(config)
        sessions, gone = SeenSessions(), asyncio.Queue[str]()

        async def on_gone(pid: str) -> None:
            await gone.put(pid)

        async with AsyncExitStack() as stack:
            await watch_presence(nc, stack, sessions, on_gone, first_retry_s=0.05, max_retry_s=0.2)
            await js.update_stream(StreamConfig(name=KV_STREAM, subjects=[f"{KV_SUBJECT_PREFIX}>"], allow_direct=True,
                                                max_msgs_per_subject=1))
            info = ProvisionerInfo(id="p1", session="s-1", host="h", pid=1, capacity=1, provisioner_class="default",
                                   tenants=["t"], plugins=[], started_at=datetime.now(UTC))
            record = ProvisionerPresence(info=info, in_flight=0, completed=0, draining=False, ttl_s=15,
                                         refreshed_at=datetime.now(UTC))
            kv = await js.key_value(subjects.PRESENCE_BUCKET)
            await kv.put(presence_key("p1"), record.model_dump_json().encode())
            # Seen by the watch once it runs (among the bucket's current values, or as it comes):
            await asyncio.wait_for(sessions.recorded.wait(), DEADLINE_S)
            assert sessions.current == {"p1": "s-1"}
            await kv.delete(presence_key("p1"))
            assert await asyncio.wait_for(gone.get(), DEADLINE_S) == "p1"
    finally:
        await nc.close()
