"""Scenario 2: kill -9 the planner mid-operation (after accept, mid-stage, during rollback) and
start it again: each job finishes, no attempt is dispatched twice, the log tells the whole story."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contracts import subjects
from contracts.commands import Accepted, AddServices, CreateCluster
from contracts.events import JobRolledBack, JobSucceeded
from muster.bus.eventstore import EventStore
from muster.bus.repository import rebuild
from services.planner.domain.cluster import Cluster

from .harness import FaultStack, demo_catalog, nth, with_broken_service

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]
T = "default"


async def _layout(fs: FaultStack, cluster_id: str) -> dict[str, list[str]]:
    c = rebuild(Cluster, await EventStore(fs.conn).read(subjects.cluster_events(T, cluster_id)))
    assert c is not None
    return {n.id: sorted(n.services) for n in c.nodes.values()}


async def test_a_planner_killed_anywhere_is_restarted_and_finishes_the_job(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path) as fs:
        await fs.load_catalog(T, with_broken_service(demo_catalog(latency_ms="100-300")))
        timings: dict[str, float] = {}

        # (a) right after the planner accepted the request.
        t0 = time.perf_counter()
        a = await fs.client.send(T, CreateCluster(name="after-accept", template="hadoop-small", nodes=3))
        assert isinstance(a, Accepted), a
        await fs.kill("planner")
        await fs.restart("planner")
        assert isinstance(await fs.client.wait(a.job_id, timeout=60), JobSucceeded)
        timings["after accept"] = time.perf_counter() - t0

        # (b) mid-stage: tasks in flight, some done.
        t0 = time.perf_counter()
        replies: list[Accepted] = []

        create = fs.sending(T, CreateCluster(name="mid-stage", template="hadoop-small", nodes=3), replies)
        await fs.when(f"muster.evt.{T}.job.>", nth("TaskCompleted", 6), create)
        await fs.kill("planner")
        await fs.restart("planner")
        assert isinstance(await fs.client.wait(replies[0].job_id, timeout=60), JobSucceeded)
        timings["mid-stage"] = time.perf_counter() - t0

        # (c) during the rollback of an add-services whose start always fails.
        t0 = time.perf_counter()
        before = await _layout(fs, a.cluster_id)
        added: list[Accepted] = []

        add = fs.sending(T, AddServices(cluster_id=a.cluster_id, services=["broken"]), added)
        await fs.when(f"muster.evt.{T}.job.*", lambda r: r.type == "RollbackPlanned", add)
        await fs.kill("planner")
        await fs.restart("planner")
        final = await fs.client.wait(added[0].job_id, timeout=60)
        assert isinstance(final, JobRolledBack), final
        assert await _layout(fs, a.cluster_id) == before
        timings["during rollback"] = time.perf_counter() - t0
        print("\n[scenario 2] " + ", ".join(f"{k}: {v:.1f} s" for k, v in timings.items()))

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 2, "rolled_back": 1} and not report.timed_out
