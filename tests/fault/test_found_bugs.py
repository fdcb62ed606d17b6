"""Bugs the fault suite found, outside the fault suite's own code: each test fails until the bug
is fixed (xfail strict), so a fix shows up as an XPASS to remove the marker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nats.aio.msg import Msg

from contracts import subjects
from contracts.commands import Accepted, AddServices, CreateCluster
from contracts.events import JobPaused, JobRolledBack, JobSucceeded
from contracts.tasks import TaskMessage
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams

from .harness import FaultStack, demo_catalog, with_broken_service

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]
T = "default"


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


@pytest.mark.xfail(strict=True, reason=(
    "services/planner/tasks.py task_message never sets TaskMessage.avoid (contracts/tasks.py), so a "
    "retry is not steered away from the provisioner that ran the failed attempt: MISSION §4 'retried "
    "... on a different provisioner where possible'. The worker side (services/provisioner/worker.py "
    "lets_go) is there; the planner would have to put the provisioners of the task's earlier "
    "attempts (from their TaskClaimed/TaskFailed events) into `avoid`. Seen in scenario 5: all three "
    "attempts of n1001.start.broken ran on prov-2 while prov-1 was idle."))
async def test_a_retried_attempt_names_the_provisioners_to_avoid(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path) as fs:
        await fs.load_catalog(T, with_broken_service(demo_catalog(latency_ms="0")))
        created = await fs.client.send(T, CreateCluster(name="avoid", template="hadoop-small", nodes=2))
        assert isinstance(created, Accepted) and isinstance(await fs.client.wait(created.job_id, timeout=60), JobSucceeded)
        messages: list[TaskMessage] = []

        async def on_task(msg: Msg) -> None:
            messages.append(TaskMessage.model_validate_json(msg.data))

        sub = await fs.nc.subscribe(subjects.task_queue(T, "default"), cb=on_task)
        try:
            added = await fs.client.send(T, AddServices(cluster_id=created.cluster_id, services=["broken"]))
            assert isinstance(added, Accepted)
            assert isinstance(await fs.client.wait(added.job_id, timeout=60), JobRolledBack)
        finally:
            await sub.unsubscribe()
        retries = [m for m in messages if m.job_id == added.job_id and m.attempt > 1]
        assert retries, "the failing start was never retried"
        assert all(m.avoid == ["prov-1"] for m in retries), [(m.task_id, m.attempt, m.avoid) for m in retries]
