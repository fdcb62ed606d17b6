"""The desired state per node with the real planner, solver, provisioner and tracker on a
nats-server: a stop on one node over the tracker's HTTP write API runs that node's tasks only,
the cluster view shows each node's desired state, a service that dies on another node is drift
there only and the repair starts it there alone; an unknown node is refused by name with nothing
recorded (docs/planner.md, "Services on nodes"). The rules are unit tests on the fakes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Catalog, Service
from contracts.commands import CheckCluster, CreateCluster
from contracts.events import JobSucceeded
from muster.catalog.store import apply_catalog, read_catalog
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator

from .conftest import succeeded

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any
SERVICE = "hdfs-datanode"


async def _view(stack: Stack, cid: str) -> dict[str, Any]:
    resp = await stack.http.get(f"/v1/clusters/{cid}")
    assert resp.status == 200
    return dict(await resp.json())


async def test_a_stop_on_one_node_over_http_is_desired_there_only_and_drift_and_repair_follow_it(stack: Stack) -> None:
    catalog = await read_catalog(stack.store, stack.tenant)  # the datanode answers `status`
    service = catalog.services[SERVICE].model_dump()
    service["provisioner"]["actions"]["status"] = {"type": "simulated", "fields": {}}
    await apply_catalog(stack.store, stack.tenant, Catalog.model_validate({"services": {SERVICE: Service.model_validate(service).model_dump()}}))
    cid = (await succeeded(stack, CreateCluster(name="pernode", template="hadoop-small", nodes=3))).cluster_id
    one, other = sorted(n.id for n in stack.planner.clusters[cid].nodes.values() if SERVICE in n.services)

    resp = await stack.http.post(f"/v1/clusters/{cid}/stop", json={"services": [SERVICE], "nodes": [one]})
    body = await resp.json()
    assert resp.status == 202, body
    assert isinstance(await stack.client.wait(body["job_id"], timeout=60), JobSucceeded)
    [planned] = [r.event for r in await stack.store.read(subjects.job_events(stack.tenant, body["job_id"])) if r.type == "JobPlanned"]
    assert {t.node for t in planned.tasks} == {one}
    view = await _view(stack, cid)
    desired = {n["id"]: n["desired"].get(SERVICE) for n in view["nodes"]}
    assert (desired[one], desired[other]) == ("stopped", "running")
    assert view["stopped_on"] == {SERVICE: [one]} and view["stopped"] == [] and view["drift"] == []
    page = await (await stack.http.get(f"/ui/clusters/{cid}")).text()  # the console: desired / observed per node
    rows = {n: re.search(rf'<th scope="row" class="mono">{n}</th>.*?data-testid="node-states">(.*?)</td>', page, re.S) for n in (one, other)}
    assert f"{SERVICE}: stopped / stopped" in rows[one].group(1)  # type: ignore[union-attr]
    assert f"{SERVICE}: running / running" in rows[other].group(1)  # type: ignore[union-attr]

    # Dead on the other node: drift there only; the repair starts it there, and leaves it
    # stopped where it is meant to be.
    automator = stack.workers.executor.inner.automator("simulated")
    assert isinstance(automator, SimulatedAutomator)
    automator.states[(cid, other, SERVICE)] = "stopped"
    await succeeded(stack, CheckCluster(cluster_id=cid))
    assert [(d["node"], d["desired"], d["observed"], d["repair"]) for d in (await _view(stack, cid))["drift"]] == [
        (other, "running", "stopped", "start")]
    resp = await stack.http.post(f"/v1/clusters/{cid}/repair", json={})  # over HTTP, as the rest of this story
    repair = await resp.json()
    assert resp.status == 202, repair
    assert isinstance(await stack.client.wait(repair["job_id"], timeout=60), JobSucceeded)
    [fixed] = [r.event for r in await stack.store.read(subjects.job_events(stack.tenant, repair["job_id"])) if r.type == "JobPlanned"]
    assert {(t.node, t.action.value) for t in fixed.tasks if t.service == SERVICE} == {(other, "start"), (other, "status")}
    assert (await _view(stack, cid))["drift"] == []

    # An unknown node: refused by name, nothing recorded.
    version = (await _view(stack, cid))["version"]
    resp = await stack.http.post(f"/v1/clusters/{cid}/start", json={"services": [SERVICE], "nodes": [one, "n9"]})
    refused = await resp.json()
    assert resp.status == 422 and refused["error"]["message"].startswith("cluster 'pernode' has no node n9"), refused
    assert (await _view(stack, cid))["version"] == version
