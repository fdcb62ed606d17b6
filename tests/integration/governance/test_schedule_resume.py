"""A resumed schedule runs none of the ticks that fell while it was paused (session 32).

The governance service on a real nats-server; the planner is the test's own responder on the
operation's subject. A schedule every 5 s, paused for a minute, is resumed with `muster schedule
resume` as typed: its first tick after that is the first one after the resume, on
time, with nothing skipped. Before, the resume ran at once the latest tick of the pause, late
(`--missed once`, the default), as if a scheduler had been down: a `cluster restart` paused
through an incident ran the moment it was resumed.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts import subjects
from contracts.commands import Accepted
from contracts.governance import GovernancePut
from muster.bus.eventstore import Append, EventStore
from services.governance.entrypoint import start_governance
from tests import cli_in_process

from .test_scheduler_failover import answered, nc  # noqa: F401 (nc: its fixture, a client of fresh_nats)

TENANT = "default"  # the tenant of a command on a bus without tokens


async def test_a_resumed_schedule_runs_no_tick_of_its_pause(nc: Client, fresh_nats: str) -> None:  # noqa: F811 (the fixture)
    store = EventStore(nc)
    sent: list[str] = []

    async def planner(msg: Msg) -> None:
        rid = json.loads(msg.data)["request_id"]
        sent.append(rid)
        await msg.respond(Accepted(job_id=str(uuid.uuid5(uuid.NAMESPACE_URL, rid)), cluster_id="c1").model_dump_json().encode())

    await nc.subscribe(subjects.operation(TENANT, "uma", "check"), cb=planner)
    paused = {"name": "every", "every_s": 5, "verb": "check", "owner": "uma", "missed": "once", "paused": True,
              "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    await store.append(subjects.governance_events(TENANT, "schedule", "every"), [Append(
        GovernancePut(kind="schedule", name="every", entity=paused, version=1, by="uma"), msg_id="every-1",
        time=datetime.now(UTC) - timedelta(minutes=1))])  # made a minute ago, paused since

    async with AsyncExitStack() as stack:
        await start_governance(nc, stack, "g1")
        resumed_at = datetime.now(UTC)
        result = await cli_in_process.ran(("schedule", "resume", "every"), {**os.environ, "NATS_URL": fresh_nats}, 60)
        assert result.exit_code == 0 and "schedule every: version 2 (change)" in result.output, result.output
        events = await answered(store, 1, "every", tenant=TENANT)

    [fired] = [e for e in events if e.type == "ScheduleFired"][:1]
    assert fired.tick > resumed_at, f"a tick of the pause ran at the resume: {fired.tick} ({fired.skipped} skipped)"
    assert (fired.skipped, fired.late_s < 5) == (0, True)
    assert sent == [fired.request_id]
