"""One real operation through the four services over a real JetStream log."""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import pytest

from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobSucceeded
from muster.bus.connect import principal_of

Stack = Any

pytestmark = pytest.mark.nats


async def _create(stack: Stack, nodes: int = 3, request_id: str | None = None) -> Accepted:
    reply = await stack.client.send(stack.tenant, CreateCluster(name="c1", template="hadoop-small", nodes=nodes, request_id=request_id))
    assert isinstance(reply, Accepted), reply
    return reply


async def test_create_then_delete_a_cluster(stack: Stack) -> None:
    reply = await _create(stack, nodes=3)
    final = await stack.client.wait(reply.job_id, timeout=60)
    assert isinstance(final, JobSucceeded)

    resp = await stack.http.get(f"/v1/jobs/{reply.job_id}")
    status = await resp.json()
    assert resp.status == 200 and status["state"] == "succeeded"
    assert status["counts"] == {"succeeded": status["tasks_total"]} and status["tasks_total"] > 10
    assert status["layout"]["nodes"] == 3
    assert all(t["provisioner"] == "prov-test" for t in status["tasks"])

    cluster = stack.planner.clusters[reply.cluster_id]
    assert cluster.status == "active" and len(cluster.nodes) == 3
    # Results of create/confirm reached the node and later tasks (provider id, address).
    assert all("providerid" in cluster.results[n] for n in cluster.nodes)

    deleted = await stack.client.send(stack.tenant, DeleteCluster(cluster_id=reply.cluster_id))
    assert isinstance(deleted, Accepted)
    assert isinstance(await stack.client.wait(deleted.job_id, timeout=60), JobSucceeded)
    assert stack.planner.clusters[reply.cluster_id].status == "deleted"


async def test_tracker_answers_404_and_400_as_json(stack: Stack) -> None:
    resp = await stack.http.get("/v1/jobs/00000000-0000-4000-8000-000000000000")
    assert resp.status == 404 and "error" in await resp.json()
    resp = await stack.http.get("/v1/jobs/not-a-uuid")
    assert resp.status == 400 and "not a job id" in (await resp.json())["error"]["message"]
    resp = await stack.http.get("/v1/jobs/00000000-0000-4000-8000-000000000000", headers={"X-Muster-Tenant": "a.b"})
    assert resp.status == 400


async def test_the_owner_answers_status_queries(stack: Stack) -> None:
    from contracts import subjects

    reply = await _create(stack, nodes=2)
    await stack.client.wait(reply.job_id, timeout=60)
    answer = await stack.client.nc.request(subjects.job_query(stack.tenant, principal_of(stack.client.nc), reply.job_id), b"", timeout=5)
    view = json.loads(answer.data)
    assert view["state"] == "succeeded" and view["owner"] == "planner-test"
    assert view["counts"] == {"succeeded": view["tasks_total"]} and view["finished_at"]
    with pytest.raises(nats.errors.TimeoutError):  # nobody answers for another tenant
        await stack.client.nc.request(subjects.job_query("other-tenant", principal_of(stack.client.nc), reply.job_id), b"", timeout=0.5)


async def test_plugins_get_the_nodes_map_that_travelled_by_reference(stack: Stack) -> None:
    """#14.2: on the bus a task names the stored map; the plugin gets the map itself."""
    seen: list[Any] = []
    plugins = stack.workers.executor.inner

    class Recording:
        async def execute(self, task: Any) -> Any:
            seen.append(task)
            return await plugins.execute(task)

    stack.workers.executor.inner = Recording()
    on_bus: list[dict[str, Any]] = []

    async def on_task(msg: Any) -> None:
        on_bus.append(json.loads(msg.data))

    sub = await stack.client.nc.subscribe("muster.task.default.>", cb=on_task)
    reply = await _create(stack, nodes=3)
    assert isinstance(await stack.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await sub.unsubscribe()

    automators = [m for m in on_bus if m["action"] not in ("create", "confirm", "delete")]
    assert automators and all(m["nodes"] == {} and m["nodes_ref"] for m in automators)
    assert all(m["nodes_ref"] is None for m in on_bus if m["action"] in ("create", "confirm"))
    cluster = stack.planner.clusters[reply.cluster_id]
    starts = [t for t in seen if t.action.value == "start"]
    assert starts and all(t.nodes_ref is None and set(t.nodes) == set(cluster.nodes) for t in starts)
    # A start comes after its own node's confirm: the map it sees has that node's addresses.
    assert all(t.nodes[t.node.id].ipaddresses == cluster.ipaddresses[t.node.id] != {} for t in starts)
    assert all(t.nodes[n].services == sorted(cluster.nodes[n].services) for t in starts for n in t.nodes)
