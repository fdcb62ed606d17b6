"""One real operation through the four services over a real JetStream log."""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import pytest

from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected
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


async def test_a_repeated_request_id_maps_to_the_same_job(stack: Stack) -> None:
    first = await _create(stack, request_id="once")
    again = await _create(stack, request_id="once")
    assert again.job_id == first.job_id and again.duplicate
    await stack.client.wait(first.job_id, timeout=60)
    jobs = await stack.store.read(f"muster.evt.{stack.tenant}.job.*")
    assert len({r.subject for r in jobs}) == 1


@pytest.mark.parametrize(
    ("verb", "body", "expected"),
    [
        ("create", b"not json at all", "not JSON"),
        ("create", b"[1, 2]", "JSON object"),
        ("create", json.dumps({"name": "c", "template": "hadoop-small", "nodes": "five"}).encode(), "nodes"),
        ("create", json.dumps({"name": "c", "template": "hadoop-small", "nodes": 3, "extra": 1}).encode(), "extra"),
        ("create", json.dumps({"name": "c", "template": "no-such-template", "nodes": 3}).encode(), "no-such-template"),
        ("create", json.dumps({"name": "c", "template": "hadoop-small", "nodes": 51}).encode(), "between 2 and 50 nodes; 51 requested"),
        ("create", json.dumps({"type": "DeleteCluster", "cluster_id": "x"}).encode(), "takes a CreateCluster"),
        ("delete", json.dumps({"cluster_id": "no-such-cluster"}).encode(), "unknown cluster"),
        ("explode", b"{}", "unknown operation"),
    ],
)
async def test_bad_input_is_rejected_by_name_and_nothing_reaches_the_log(stack: Stack, verb: str, body: bytes, expected: str) -> None:
    before = (await stack.store.js.stream_info("EVENTS")).state.messages
    reply = await stack.client.send_raw(stack.tenant, verb, body)
    assert isinstance(reply, Rejected) and expected in reply.reason, reply
    assert (await stack.store.js.stream_info("EVENTS")).state.messages == before
    # ...and the planner still answers.
    assert isinstance(await stack.client.send_raw(stack.tenant, "create", b"{"), Rejected)


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
