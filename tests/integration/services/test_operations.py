"""Operations that need the bus: a resize solved by the solver service and run by real workers,
dry runs answered over request/reply, queue metrics over NATS. Planner rules (admission, job
control, failures that roll back) are unit tests on in-memory fakes: tests/unit/planner_service."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.commands import Accepted, CreateCluster, DryRun, ExpandCluster, ShrinkCluster
from contracts.events import JobSucceeded

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


async def _saved_only(stack: Stack, before: int, reply: DryRun) -> None:
    """A dry run records its plan (`PlanSaved`), and nothing else."""
    assert (await stack.store.js.stream_info("EVENTS")).state.messages == before + 1
    assert [r.type for r in await stack.store.read(f"muster.evt.{stack.tenant}.plan.{reply.plan_id}")] == ["PlanSaved"]


async def test_dry_runs_answer_a_plan_and_record_nothing_else(stack: Stack) -> None:
    before = (await stack.store.js.stream_info("EVENTS")).state.messages
    reply = await stack.client.send(stack.tenant, CreateCluster(name="dry", template="hadoop-small", nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4
    assert {t["action"] for t in reply.plan["tasks"]} >= {"create", "confirm", "install", "start"}
    await _saved_only(stack, before, reply)

    cid = await _cluster(stack, 2)
    before = (await stack.store.js.stream_info("EVENTS")).state.messages
    reply = await stack.client.send(stack.tenant, ExpandCluster(cluster_id=cid, nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4
    assert {t["node"] for t in reply.plan["tasks"] if t["action"] == "create"} == {"n1002", "n1003"}
    await _saved_only(stack, before, reply)


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
