"""Scenario 5: a task that always fails is retried up to the limit, then the job rolls back by
itself and the cluster is as it was before the job (for an add-services: the same nodes,
services and config, active; for a create: no nodes, failed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, AddServices, CreateCluster
from contracts.events import JobRolledBack, JobSucceeded
from muster.bus.eventstore import EventStore
from muster.bus.repository import rebuild
from services.planner.domain.cluster import Cluster

from .harness import FaultStack, demo_catalog, with_broken_service

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]
T = "default"
MAX_ATTEMPTS = 3


def _state(c: Cluster | None) -> dict[str, Any]:
    if c is None:
        return {"nodes": {}, "config": None, "status": None}
    return {"nodes": {n.id: n.model_dump(mode="json") for n in c.nodes.values()}, "config": c.config, "status": c.status}


async def _before_and_after(fs: FaultStack, cluster_id: str, job_id: str) -> tuple[Any, Any]:
    store = EventStore(fs.conn)
    history = await store.read(subjects.cluster_events(T, cluster_id))
    started = (await store.read(subjects.job_events(T, job_id)))[0].seq
    return rebuild(Cluster, [r for r in history if r.seq < started]), rebuild(Cluster, history)


async def _attempts(fs: FaultStack, job_id: str) -> dict[str, list[str]]:
    """Failed attempts per task: the provisioner that ran each."""
    out: dict[str, list[str]] = {}
    for r in await EventStore(fs.conn).read(subjects.job_task_events(T, job_id)):
        if r.type == "TaskFailed":
            out.setdefault(r.event.task_id, []).append(r.event.provisioner)
    return out


async def test_a_task_that_always_fails_is_retried_then_rolled_back(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path, provisioners=2,
                                       extra_args={"planner": ["--max-attempts", str(MAX_ATTEMPTS)]}) as fs:
        await fs.load_catalog(T, with_broken_service(demo_catalog(latency_ms="20-80")))

        # On an existing cluster: add a service that never starts.
        created = await fs.client.send(T, CreateCluster(name="steady", template="hadoop-small", nodes=3))
        assert isinstance(created, Accepted) and isinstance(await fs.client.wait(created.job_id, timeout=60), JobSucceeded)
        added = await fs.client.send(T, AddServices(cluster_id=created.cluster_id, services=["broken"]))
        assert isinstance(added, Accepted), added
        final = await fs.client.wait(added.job_id, timeout=60)
        assert isinstance(final, JobRolledBack) and f"failed {MAX_ATTEMPTS} times" in final.reason, final
        before, after = await _before_and_after(fs, created.cluster_id, added.job_id)
        assert _state(after) == _state(before) and after.status == "active"
        failed = await _attempts(fs, added.job_id)
        assert any(len(runs) == MAX_ATTEMPTS for runs in failed.values()), failed

        # A create whose start always fails: rolled back to nothing, machines deleted.
        doomed = await fs.client.send(T, CreateCluster(name="doomed", template="hadoop-small", nodes=3,
                                                       services=["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode",
                                                                 "yarn-resourcemanager", "yarn-nodemanager", "broken"]))
        assert isinstance(doomed, Accepted), doomed
        final = await fs.client.wait(doomed.job_id, timeout=60)
        assert isinstance(final, JobRolledBack), final
        before, after = await _before_and_after(fs, doomed.cluster_id, doomed.job_id)
        assert (before is None or not before.nodes) and after is not None and after.nodes == {} and after.status == "failed"
        history = await EventStore(fs.conn).read_many(subjects.job_filters(T, doomed.job_id))
        created_nodes = {r.event.task_id.split(".")[0] for r in history if r.type == "TaskCompleted" and r.event.task_id.endswith(".create")}
        deleted = {r.event.task_id.split(".")[1] for r in history if r.type == "TaskCompleted" and r.event.task_id.startswith("undo.") and r.event.task_id.endswith(".delete")}
        assert created_nodes and created_nodes == deleted, (created_nodes, deleted)
        print(f"\n[scenario 5] failed attempts of the add-services job, by provisioner: {failed}")

        report = await fs.check()
        report.assert_ok()
        assert report.jobs == {"succeeded": 1, "rolled_back": 2} and not report.timed_out
