"""A schedule fires each tick once across a kill -9, of the scheduler or of the planner.

1. Real `muster governance` processes on a real nats-server, one killed mid-run and another
   started; every tick the log took makes one job, and no tick is taken twice. The planner here
   is the test's own responder on the operation's subject: it records each request and answers
   as a planner does (a request_id is one job, however often it comes).
2. A real `muster planner` process (with a solver and a provisioner in this process) killed -9:
   the tick that finds no planner is sent again, with the same request_id, until the next
   planner answers, and makes one job, which runs; no later tick is taken meanwhile; no tick
   makes two jobs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.governance import GovernancePut
from muster.bus.connect import connect, principal_of
from muster.bus.eventstore import Append, EventStore, recorded_from_msg
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig
from services.solver.entrypoint import start_solver

from ..services.conftest import quick_demo_catalog

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
    return service(url, "governance", instance)


def service(url: str, kind: str, instance: str, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "muster", kind, "--instance", instance, "--nats-url", url, *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "MUSTER_LOG_LEVEL": "INFO"})


def killed(proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return True


async def answered(store: EventStore, at_least: int, name: str = "every",
                   check: Callable[[list[Any]], bool] | None = None, tenant: str = TENANT) -> list[Any]:
    """The schedule's events once `at_least` ticks are answered (or `check` holds of them): an
    ordered consumer from its first event (no sleep loop)."""
    seen: list[Any] = []
    done = asyncio.Event()
    check = check or (lambda events: sum(e.type == "ScheduleAnswered" for e in events) >= at_least)

    async def on_msg(msg: Msg) -> None:
        seen.append(recorded_from_msg(msg).event)
        if check(seen):
            done.set()

    sub = await store.js.subscribe(subjects.governance_events(tenant, "schedule", name), ordered_consumer=True,
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


async def quiet(store: EventStore, client: MusterClient, jobs: int) -> None:
    """Once `jobs` ticks made jobs: a moment when the latest tick's job has ended and no later
    tick was taken (ticks every 3 s, a check of two nodes takes well under one)."""
    def made(n: int) -> Callable[[list[Any]], bool]:
        return lambda events: sum(e.type == "ScheduleAnswered" and bool(e.job_id) for e in events) >= n

    for wanted in range(jobs, jobs + 3):
        events = await answered(store, 0, "check", made(wanted))
        await client.wait([e for e in events if e.type == "ScheduleAnswered" and e.job_id][-1].job_id, timeout=TIMEOUT_S)
        latest = (await store.read(subjects.governance_events(TENANT, "schedule", "check")))[-1].event
        if latest.type == "ScheduleAnswered" and latest.job_id:
            return
    raise AssertionError("no moment without a check running or a tick pending")


async def test_a_tick_that_finds_the_planner_killed_makes_one_job_once_the_next_planner_answers(nc: Client, fresh_nats: str) -> None:
    store = EventStore(nc)
    procs: list[subprocess.Popen[bytes]] = []
    async with AsyncExitStack() as stack:
        stack.callback(lambda: all(map(killed, procs)))
        for name in ("solver", "provisioner"):
            conn = await connect(fresh_nats, name=name)
            stack.push_async_callback(conn.close)
            if name == "solver":
                await start_solver(conn, stack, "solver-kill")
            else:
                registry = PluginRegistry.discover()
                stack.push_async_callback(registry.aclose)
                await start_workers(conn, stack, registry, WorkerConfig(provisioner_id="prov-kill", capacity=8, tenants=(TENANT,)))
        await apply_catalog(store, TENANT, quick_demo_catalog())
        planner = ("--lease-ttl", "2")  # a dead planner's shards are taken over within 2 s
        procs.append(service(fresh_nats, "planner", "p1", *planner))
        client = MusterClient(nc, tenant=TENANT, attempts=10)  # the planner process is starting: its client backs off
        made = await client.run(CreateCluster(name="c1", template="hadoop-small", nodes=2), timeout=TIMEOUT_S)
        assert made.succeeded, made.reason
        schedule = {"name": "check", "every_s": 3, "verb": "check", "owner": principal_of(nc), "missed": "once",
                    "command": {"type": "CheckCluster", "cluster_id": made.reply.cluster_id}}
        await store.append(subjects.governance_events(TENANT, "schedule", "check"), [Append(
            GovernancePut(kind="schedule", name="check", entity=schedule, version=1, by="uma"), msg_id="check-1",
            time=datetime.now(UTC))])
        procs.append(governance(fresh_nats, "g1"))

        await quiet(store, client, 2)  # killed between two checks, not in one (whose job would keep the cluster busy)
        killed(procs[0])
        killed_at = datetime.now(UTC)
        await answered(store, 0, "check", lambda es: any(e.type == "ScheduleFired" and e.tick > killed_at for e in es))
        procs.append(service(fresh_nats, "planner", "p2", *planner))  # a tick is pending: no planner answered it
        events = await answered(store, 0, "check", lambda es: sum(e.type == "ScheduleAnswered" and e.tick > killed_at
                                                                   for e in es) >= 2)

    fired = [e for e in events if e.type == "ScheduleFired"]
    assert len({f.tick for f in fired}) == len(fired), "a tick was taken twice"
    answers = {e.tick: e for e in events if e.type == "ScheduleAnswered"}
    first = min(f.tick for f in fired if f.tick > killed_at)
    assert answers[first].job_id, f"the tick the kill left pending made no job: {answers[first].rejected}"
    requested = [r.event for r in await store.read(f"{subjects.EVT}.{TENANT}.job.*") if r.type == "JobRequested"]
    jobs_of: Counter[str] = Counter(str(e.request.get("request_id")) for e in requested)
    assert all(jobs_of[f.request_id] <= 1 for f in fired), "a tick made two jobs"
    assert all(jobs_of[f.request_id] == 1 for f in fired if answers.get(f.tick) and answers[f.tick].job_id)
    taken = next(i for i, e in enumerate(events) if e.type == "ScheduleFired" and e.tick == first)
    assert (events[taken + 1].type, events[taken + 1].tick) == ("ScheduleAnswered", first), "a later tick was taken meanwhile"
    ran = [e for e in requested if e.job_id == answers[first].job_id]
    assert ran and ran[0].planner == "p2"  # the next planner took the request the kill left unanswered
