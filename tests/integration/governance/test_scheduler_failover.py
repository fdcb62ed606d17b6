"""A schedule fires each tick once across a kill -9 of the scheduler: real `muster governance`
processes on a real nats-server, one killed mid-run and another started; every tick the log
took makes one job, and no tick is taken twice. The planner here is the test's own responder on
the operation's subject: it records each request and answers as a planner does (a request_id is
one job, however often it comes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.commands import Accepted
from contracts.governance import GovernancePut
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore, recorded_from_msg
from muster.bus.streams import ensure_streams

TENANT = "a"
TIMEOUT_S = 60.0


@pytest_asyncio.fixture
async def nc(fresh_nats: str) -> AsyncIterator[Client]:
    client = await connect(fresh_nats, name="scheduler-test")
    await ensure_streams(client.jetstream())
    try:
        yield client
    finally:
        await client.close()


def governance(url: str, instance: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "muster", "governance", "--instance", instance, "--nats-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "MUSTER_LOG_LEVEL": "INFO"})


async def answered(store: EventStore, at_least: int) -> list[Any]:
    """The schedule's events once `at_least` ticks are answered: an ordered consumer from its
    first event (no sleep loop)."""
    seen: list[Any] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        seen.append(recorded_from_msg(msg).event)
        if sum(e.type == "ScheduleAnswered" for e in seen) >= at_least:
            done.set()

    sub = await store.js.subscribe(subjects.governance_events(TENANT, "schedule", "every"), ordered_consumer=True,
                                   deliver_policy=DeliverPolicy.ALL, cb=on_msg, stream=subjects.EVENTS_STREAM)
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
        return seen
    finally:
        await sub.unsubscribe()


async def test_each_tick_makes_one_job_across_a_kill_of_the_scheduler(nc: Client, fresh_nats: str) -> None:
    store = EventStore(nc)
    requests: Counter[str] = Counter()

    async def planner(msg: Msg) -> None:  # answers as a planner does: one job per request_id
        rid = json.loads(msg.data)["request_id"]
        requests[rid] += 1
        await msg.respond(Accepted(job_id=str(uuid.uuid5(uuid.NAMESPACE_URL, rid)), cluster_id="c1",
                                   duplicate=requests[rid] > 1).model_dump_json().encode())

    await nc.subscribe(subjects.operation(TENANT, "uma", "check"), cb=planner)
    schedule = {"name": "every", "every_s": 1, "verb": "check", "owner": "uma", "missed": "once",
                "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    await store.append(subjects.governance_events(TENANT, "schedule", "every"), [Append(
        GovernancePut(kind="schedule", name="every", entity=schedule, version=1, by="uma"), msg_id="every-1",
        time=datetime.now(UTC))])

    first = governance(fresh_nats, "g1")
    try:
        await answered(store, 2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = datetime.now(UTC)
        second = governance(fresh_nats, "g2")
        try:
            events = await answered(store, 5)
        finally:
            second.terminate()
            second.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    fired = [e for e in events if e.type == "ScheduleFired"]
    ticks = [f.tick for f in fired]
    assert len(ticks) == len(set(ticks)), "a tick was taken twice"
    jobs = {e.tick: e.job_id for e in events if e.type == "ScheduleAnswered"}
    assert len(set(jobs.values())) == len(jobs) and all(jobs.values()), "each answered tick is its own job"
    assert {f.scheduler for f in fired} == {"g1", "g2"}, "both schedulers took ticks"
    assert any(f.tick > killed_at for f in fired if f.scheduler == "g2")
    assert set(requests) == {f.request_id for f in fired}  # every request is a tick the log took
