"""Bugs the fault suite found outside its own code, kept as regression tests once fixed (a bug
still open is marked xfail(strict=True) with its cause, so its fix shows up as an XPASS)."""

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


# Found by the fault suite: replay of a filter that matches nothing once waited for its timeout
# whenever the consumer had already moved past other subjects' events.
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


# Found by the fault suite: retries were not steered away from the provisioner that ran the
# failed attempt (MISSION §4: "on a different provisioner where possible").
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
