"""Every operation on a live cluster, failures that roll back, job control, dry runs."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.catalog import Service
from contracts.commands import (
    Accepted,
    AddServices,
    CancelJob,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    ExpandCluster,
    PauseJob,
    Rejected,
    RemoveServices,
    RestartServices,
    ResumeJob,
    RetryJob,
    ShrinkCluster,
    StopServices,
)
from contracts.events import JobRolledBack, JobSucceeded, TaskCompleted
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(150), pytest.mark.parametrize("stack", [{"http": False}], indirect=True)]
Stack = Any


async def _ok(stack: Stack, command: Any) -> Accepted:
    reply = await stack.client.send(stack.tenant, command)
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=90)
    assert isinstance(final, JobSucceeded), final
    return reply


async def _cluster(stack: Stack, nodes: int = 3) -> str:
    return (await _ok(stack, CreateCluster(name="ops", template="hadoop-small", nodes=nodes))).cluster_id


def _services(stack: Stack, cluster_id: str) -> dict[str, set[str]]:
    return {n.id: set(n.services) for n in stack.planner.clusters[cluster_id].nodes.values()}


async def test_expand_then_shrink(stack: Stack) -> None:
    cid = await _cluster(stack, 3)
    before = _services(stack, cid)
    await _ok(stack, ExpandCluster(cluster_id=cid, nodes=5))
    after = _services(stack, cid)
    assert len(after) == 5 and all(after[n] == s for n, s in before.items())  # existing nodes untouched
    new = set(after) - set(before)
    assert all("providerid" in stack.planner.clusters[cid].results[n] for n in new)

    await _ok(stack, ShrinkCluster(cluster_id=cid, nodes=2))
    shrunk = _services(stack, cid)
    assert len(shrunk) == 2 and set(shrunk) <= set(after)
    assert stack.planner.clusters[cid].status == "active"


async def test_remove_and_add_services(stack: Stack) -> None:
    cid = await _cluster(stack, 3)
    await _ok(stack, RemoveServices(cluster_id=cid, services=["yarn-nodemanager"]))
    assert all("yarn-nodemanager" not in s for s in _services(stack, cid).values())
    await _ok(stack, AddServices(cluster_id=cid, services=["yarn-nodemanager"]))
    assert sum("yarn-nodemanager" in s for s in _services(stack, cid).values()) == 2


async def test_configure_stop_restart(stack: Stack) -> None:
    cid = await _cluster(stack, 2)
    await _ok(stack, ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))
    assert stack.planner.clusters[cid].config == {"hdfs": {"replication": 1}}
    await _ok(stack, StopServices(cluster_id=cid, services=["hdfs-namenode"]))
    await _ok(stack, RestartServices(cluster_id=cid))


async def test_dry_runs_answer_a_plan_and_record_nothing(stack: Stack) -> None:
    before = (await stack.store.js.stream_info("EVENTS")).state.messages
    reply = await stack.client.send(stack.tenant, CreateCluster(name="dry", template="hadoop-small", nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4
    assert {t["action"] for t in reply.plan["tasks"]} >= {"create", "confirm", "install", "start"}
    assert (await stack.store.js.stream_info("EVENTS")).state.messages == before

    cid = await _cluster(stack, 2)
    before = (await stack.store.js.stream_info("EVENTS")).state.messages
    reply = await stack.client.send(stack.tenant, ExpandCluster(cluster_id=cid, nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4
    assert {t["node"] for t in reply.plan["tasks"] if t["action"] == "create"} == {"n1002", "n1003"}
    assert (await stack.store.js.stream_info("EVENTS")).state.messages == before


async def test_busy_cluster_and_bad_operations_are_rejected(stack: Stack) -> None:
    cid = await _cluster(stack, 2)
    for command, expected in [
        (ExpandCluster(cluster_id=cid, nodes=2), "more than the cluster's 2 nodes"),
        (ShrinkCluster(cluster_id=cid, nodes=5), "fewer than"),
        (AddServices(cluster_id=cid, services=["base"]), "already on the cluster"),
        (RemoveServices(cluster_id=cid, services=["nope"]), "not on the cluster"),
        (ExpandCluster(cluster_id="no-such", nodes=3), "unknown cluster"),
        (CancelJob(job_id="no-such"), "unknown job"),
    ]:
        reply = await stack.client.send(stack.tenant, command)
        assert isinstance(reply, Rejected) and expected in reply.reason, (command, reply)
    first = await stack.client.send(stack.tenant, ExpandCluster(cluster_id=cid, nodes=3))
    assert isinstance(first, Accepted)
    busy = await stack.client.send(stack.tenant, ExpandCluster(cluster_id=cid, nodes=4))
    assert isinstance(busy, Rejected) and "busy" in busy.reason
    await stack.client.wait(first.job_id, timeout=60)


BROKEN = {
    "name": "broken", "description": "always fails to install",
    "provisioner": {"actions": {
        "install": {"type": "simulated", "fields": {"failure_rate": "1"}},
        "remove": {"type": "simulated", "fields": {}},
    }},
}


async def test_a_task_out_of_attempts_rolls_the_job_back(stack: Stack) -> None:
    catalog = load_catalog(stack_catalog())
    sim = catalog.providers["sim"]
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms": "0-20"}})
    catalog.services["broken"] = Service.model_validate(BROKEN)
    template = catalog.clustertemplates["hadoop-small"]
    template.compatibility.services.append("broken")
    await apply_catalog(stack.store, stack.tenant, catalog)
    cid = await _cluster(stack, 2)
    before = _services(stack, cid)

    reply = await stack.client.send(stack.tenant, AddServices(cluster_id=cid, services=["broken"]))
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=90)
    assert isinstance(final, JobRolledBack) and "failed 3 times" in final.reason
    assert _services(stack, cid) == before and stack.planner.clusters[cid].status == "active"
    history = [r.type for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.{reply.job_id}")]
    assert history.count("TaskAttemptFailed") >= 2 and "RollbackPlanned" in history

    retried = await stack.client.send(stack.tenant, RetryJob(job_id=reply.job_id))
    assert isinstance(retried, Accepted)
    assert isinstance(await stack.client.wait(reply.job_id, timeout=90), JobRolledBack)


async def test_cancel_mid_create_rolls_back_every_machine(stack: Stack) -> None:
    reply = await stack.client.send(stack.tenant, CreateCluster(name="cancelled", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    async for recorded in stack.client.events(reply.job_id):
        if isinstance(recorded.event, TaskCompleted) and recorded.event.task_id.endswith(".create"):
            break
    assert isinstance(await stack.client.send(stack.tenant, CancelJob(job_id=reply.job_id)), Accepted)
    final = await stack.client.wait(reply.job_id, timeout=90)
    assert isinstance(final, JobRolledBack) and "cancelled" in final.reason
    cluster = stack.planner.clusters[reply.cluster_id]
    assert cluster.status == "failed" and cluster.nodes == {}
    deletes = [t for t in stack.planner.jobs[reply.job_id].task_state if t.startswith("undo.") and t.endswith(".delete")]
    assert deletes and all(stack.planner.jobs[reply.job_id].task_state[t] == "succeeded" for t in deletes)


async def test_pause_and_resume(stack: Stack) -> None:
    reply = await stack.client.send(stack.tenant, CreateCluster(name="paused", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    assert isinstance(await stack.client.send(stack.tenant, PauseJob(job_id=reply.job_id)), Accepted)
    again = await stack.client.send(stack.tenant, PauseJob(job_id=reply.job_id))
    assert isinstance(again, Rejected) and "cannot pause" in again.reason
    assert isinstance(await stack.client.send(stack.tenant, ResumeJob(job_id=reply.job_id)), Accepted)
    assert isinstance(await stack.client.wait(reply.job_id, timeout=90), JobSucceeded)
    history = [r.type for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.{reply.job_id}")]
    assert history.index("JobPaused") < history.index("JobResumed")


def stack_catalog() -> Any:
    from pathlib import Path

    return Path(__file__).parents[3] / "muster" / "demo" / "catalog"


async def test_the_planner_reports_queue_metrics(stack: Stack) -> None:
    import json

    from contracts import subjects

    await _cluster(stack, 2)
    reply = await stack.client.nc.request(subjects.PLANNER_METRICS, b"", timeout=5)
    body = json.loads(reply.data)
    [queue] = [q for q in body["queues"] if q["tenant"] == stack.tenant]
    assert body["planner"] == "planner-test" and queue["class"] == "default"
    assert queue["finished"] > 10 and queue["queue_length"] == 0 and queue["task_duration_s"]["mean"] > 0
    assert queue["recommended_workers"] >= 0


async def test_rollback_to_the_state_before_a_job(stack: Stack) -> None:
    from contracts.commands import RollbackCluster

    cid = await _cluster(stack, 2)
    original = _services(stack, cid)
    config = dict(stack.planner.clusters[cid].config)
    expand = await _ok(stack, ExpandCluster(cluster_id=cid, nodes=3))
    await _ok(stack, RemoveServices(cluster_id=cid, services=["yarn-nodemanager"]))
    await _ok(stack, ConfigureCluster(cluster_id=cid, config={"changed": True}))

    dry = await stack.client.send(stack.tenant, RollbackCluster(cluster_id=cid, to_job=expand.job_id, dry_run=True))
    assert isinstance(dry, DryRun) and dry.layout is not None and dry.layout.nodes == 2
    actions = {t["action"] for t in dry.plan["tasks"]}
    assert {"delete", "install", "configure"} <= actions

    await _ok(stack, RollbackCluster(cluster_id=cid, to_job=expand.job_id))
    assert _services(stack, cid) == original
    assert stack.planner.clusters[cid].config == config
    again = await stack.client.send(stack.tenant, RollbackCluster(cluster_id=cid, to_job=expand.job_id))
    assert isinstance(again, Rejected) and "already as it was" in again.reason


async def test_a_repeated_job_control_request_gets_the_first_answer(stack: Stack) -> None:
    reply = await stack.client.send(stack.tenant, CreateCluster(name="ctl", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    first = await stack.client.send(stack.tenant, PauseJob(job_id=reply.job_id, request_id="pause-once"))
    again = await stack.client.send(stack.tenant, PauseJob(job_id=reply.job_id, request_id="pause-once"))
    assert isinstance(first, Accepted) and not first.duplicate
    assert isinstance(again, Accepted) and again.duplicate
    other = await stack.client.send(stack.tenant, PauseJob(job_id=reply.job_id, request_id="pause-twice"))
    assert isinstance(other, Rejected)
    assert isinstance(await stack.client.send(stack.tenant, ResumeJob(job_id=reply.job_id)), Accepted)
    assert isinstance(await stack.client.wait(reply.job_id, timeout=90), JobSucceeded)
