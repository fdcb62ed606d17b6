"""The location index in JetStream KV: shared by several trackers, written out of order and
concurrently, and loaded by a restarted tracker before it serves."""

from __future__ import annotations

import asyncio
import functools
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from contracts import events as ev
from contracts import subjects
from contracts.catalog import Action
from contracts.events import JobRequested, JobSucceeded, TaskClaimed, TaskFailed, TaskQueued, TaskSucceeded
from contracts.layout import NodeSpec
from contracts.records import Append
from muster.bus.bodies import INLINE_LIMIT
from muster.bus.connect import connect
from muster.readmodel.locations import Update, cluster_key, job_key, merge_all, updates_from
from services.tracker.adapters.kv import LocationIndex
from services.tracker.http import TRACKER

from .conftest import TENANT

pytestmark = pytest.mark.nats

Tracked = Any
T, J, C = "acme", "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
TIME = "2026-01-01T00:00:00+00:00"


def _story() -> list[Update]:
    """A job whose tasks were retried, as location updates in log order."""
    job = f"muster.evt.{T}.job.{J}"
    events: list[tuple[str, Any]] = [(job, JobRequested(tenant=T, job_id=J, cluster_id=C, operation="create", request={}, planner="p1"))]
    for n in range(4):
        task = f"n100{n}.install.svc"
        sub = f"muster.evt.{T}.task.{J}.{task.replace('.', '~')}"
        events += [
            (job, TaskQueued(job_id=J, task_id=task, attempt=1, node=f"n100{n}", action=Action.INSTALL, service="svc")),
            (sub, TaskClaimed(job_id=J, task_id=task, attempt=1, provisioner="prov-a", worker="w1")),
            (sub, TaskFailed(job_id=J, task_id=task, attempt=1, provisioner="prov-a", worker="w1", error="boom")),
            (job, TaskQueued(job_id=J, task_id=task, attempt=2, node=f"n100{n}", action=Action.INSTALL, service="svc")),
            (sub, TaskClaimed(job_id=J, task_id=task, attempt=2, provisioner="prov-b", worker=f"w{n}")),
            (sub, TaskSucceeded(job_id=J, task_id=task, attempt=2, provisioner="prov-b", worker=f"w{n}")),
        ]
    events.append((job, JobSucceeded(job_id=J)))
    return [u for seq, (subject, e) in enumerate(events, 1) for u in updates_from(seq, subject, TIME, e)]


def _holds(index: LocationIndex, expected: dict[str, Any]) -> bool:
    return {k: index.mirror.get(k) for k in expected} == expected


@pytest_asyncio.fixture
async def bucket(nats_url: str) -> AsyncIterator[tuple[str, list[Client]]]:
    name = f"locations-test-{uuid.uuid4().hex[:8]}"
    clients = [await connect(nats_url, name=f"index-{i}") for i in range(2)]
    try:
        yield name, clients
    finally:
        await clients[0].jetstream().delete_key_value(name)
        for nc in clients:
            await nc.close()


async def test_writers_racing_in_opposite_orders_converge_on_the_log_order_records(bucket: tuple[str, list[Client]]) -> None:
    name, clients = bucket
    a, b = [await LocationIndex.open(nc.jetstream(), name) for nc in clients]
    for index in (a, b):
        await index.start()
    story = _story()
    expected = {u.key: merge_all(None, [x for x in story if x.key == u.key]) for u in story}
    shuffled = random.Random(7).sample(story, len(story))
    try:
        await asyncio.gather(
            *(a.apply(u) for u in story[::-1]),  # one tracker sees the log backwards,
            *(b.apply(u) for u in shuffled),  # the other shuffled, both at once
        )
        for index in (a, b):
            await index.mirror.wait_for(functools.partial(_holds, index, expected), 30)
        job = expected[f"job.{T}.{J}"]
        assert job is not None and job.get("state") == "succeeded"
        assert {(r.get("attempt"), r.get("provisioner")) for r in b.mirror.tasks(T, J)} == {(2, "prov-b")}
    finally:
        await a.stop()
        await b.stop()


async def test_an_older_update_writes_nothing(bucket: tuple[str, list[Client]]) -> None:
    name, clients = bucket
    index = await LocationIndex.open(clients[0].jetstream(), name)
    await index.start()
    try:
        story = [u for u in _story() if u.kind == "task"]
        newest, older = story[5], story[0]  # attempt 2 succeeded; attempt 1 queued
        assert newest.key == older.key
        assert await index.apply(newest)
        revision = (await index.kv.get(newest.key)).revision or 0
        assert not await index.apply(newest)  # a repeat
        assert not await index.apply(story[1])  # attempt 1's claim: superseded by attempt 2
        assert await index.apply(older)  # it brings the node, which the record lacks, and nothing else
        record = index.mirror.get(newest.key)
        assert record is not None and record.get("state") == "succeeded" and record.get("attempt") == 2
        assert ((await index.kv.get(newest.key)).revision or 0) > revision
    finally:
        await index.stop()


async def test_a_second_tracker_starts_with_the_index_and_shares_the_work(tracked: Tracked) -> None:
    first = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(first.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(first.job_id)

    # A tracker that starts now (as after a restart) serves the locations at once.
    second = await tracked.another_tracker()
    body = await (await second.get(f"/v1/jobs/{first.job_id}/location")).json()
    assert body["source"] == "index" and body["owner"] == "planner-test"
    assert body["tasks"] and all(t["provisioner"] == "prov-test" for t in body["tasks"])

    # Both now feed the index from one durable consumer; each sees everything in its mirror.
    later = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(later.job_id, timeout=60), JobSucceeded)
    for tracker in (tracked.tracker, second.app[TRACKER]):
        await tracked.indexed_final(later.job_id, tracker)
    info = await tracked.tracker.nc.jetstream().consumer_info("EVENTS", "tracker-index")
    assert info.config.deliver_group == "tracker-index"


async def test_a_tracker_started_while_the_bucket_is_being_made_asks_again(bucket: tuple[str, list[Client]]) -> None:
    """Two trackers start together on a young cluster: the look-up of the bucket the other one
    is making times out until its stream has a leader. Opening asks again instead of failing
    the tracker's start (seen in the partition soak)."""
    from nats.errors import TimeoutError as NatsTimeout

    name, clients = bucket
    js = clients[0].jetstream()
    real, calls = js.key_value, []

    async def slow_at_first(bucket_name: str) -> Any:
        calls.append(bucket_name)
        if len(calls) < 3:
            raise NatsTimeout
        return await real(bucket_name)

    js.key_value = slow_at_first  # type: ignore[method-assign,assignment]
    index = await LocationIndex.open(js, name)
    assert len(calls) == 3 and index.kv is not None


async def test_a_plan_and_a_layout_stored_apart_are_indexed_by_their_sizes(tracked: Tracked) -> None:
    job_id, cluster_id = str(uuid.uuid4()), str(uuid.uuid4())
    tasks = [ev.PlannedTaskRecord(id=f"node-{i}.create", node=f"node-{i}", action=Action.CREATE) for i in range(700)]
    nodes = [NodeSpec(id=f"node-{i}", hardwaretype="small", imagetype="debian", services=["hdfs"]) for i in range(700)]
    plan = ev.JobPlanned(job_id=job_id, tasks=tasks, links=[], stages=[[t.id for t in tasks[:300]], [t.id for t in tasks[300:]]])
    layout = ev.ClusterLayoutChanged(cluster_id=cluster_id, job_id=job_id, nodes=nodes)
    assert min(len(plan.model_dump_json()), len(layout.model_dump_json())) > INLINE_LIMIT  # both offloaded
    await tracked.store.append(subjects.job_events(TENANT, job_id), [Append(plan, msg_id=f"plan-{job_id}")])
    await tracked.store.append(subjects.cluster_events(TENANT, cluster_id), [Append(layout, msg_id=f"layout-{cluster_id}")])
    index = tracked.tracker.index
    assert index is not None

    def indexed() -> bool:
        job, cluster = index.mirror.get(job_key(TENANT, job_id)), index.mirror.get(cluster_key(TENANT, cluster_id))
        return job is not None and cluster is not None and cluster.get("nodes") == 700 and job.get("tasks_total") == 700

    await tracked.until(indexed)
    job = index.mirror.get(job_key(TENANT, job_id))
    assert job is not None and job.get("stages_total") == 2
