"""What operators rely on every day (#17), through the bus with the real services and workers:
config macros expanded by the provisioner, a saved rolling plan applied, a lease that expires
into a delete, observed state with its drift repaired, limits in the planner's metrics. The
rules themselves are unit tests on the fakes (tests/unit/planner_service/)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Catalog, Service
from contracts.commands import (
    Accepted,
    ApplyPlan,
    CheckCluster,
    ConfigureCluster,
    CreateCluster,
    DryRun,
    Rejected,
    RepairCluster,
    RestartServices,
    Rolling,
)
from contracts.events import JobSucceeded
from muster.bus.connect import principal_of
from muster.catalog.store import apply_catalog, read_catalog
from services.provisioner.plugins.builtin.simulated_automator.automator import SimulatedAutomator

pytestmark = [pytest.mark.nats, pytest.mark.timeout(150), pytest.mark.parametrize("stack", [{"http": False}], indirect=True)]
Stack = Any

MACROS = {"zookeeper": {"quorum": "%join(map(host.service.zookeeper-server,'$:2181'),',')%",
                        "myid": "%instance.self.service.zookeeper-server%"},
          "hdfs": {"namenode": "hdfs://%host.service.hdfs-namenode%:8020"}, "owner": "%cluster.owner%"}


async def _daily_catalog(stack: Stack, lease: dict[str, Any] | None = None) -> None:
    """The demo catalog with macros in the template's config, a `status` action on zookeeper,
    and (optionally) a lease."""
    catalog = await read_catalog(stack.store, stack.tenant)
    zk = catalog.services["zookeeper-server"].model_dump()
    zk["provisioner"]["actions"]["status"] = {"type": "simulated", "fields": {}}
    template = catalog.clustertemplates["hadoop-small"].model_dump()
    template["defaults"]["config"] = {**template["defaults"]["config"], **MACROS}
    if lease is not None:
        template["administration"] = {"leaseduration": lease}
    await apply_catalog(stack.store, stack.tenant, Catalog.model_validate(
        {"services": {"zookeeper-server": Service.model_validate(zk).model_dump()}, "clustertemplates": {"hadoop-small": template}}))


async def _ok(stack: Stack, command: Any) -> Accepted:
    reply = await stack.client.request(command)
    assert isinstance(reply, Accepted), reply
    final = await stack.client.wait(reply.job_id, timeout=90)
    assert isinstance(final, JobSucceeded), final
    return reply


def _automator(stack: Stack) -> SimulatedAutomator:
    plugin = stack.workers.executor.inner.automator("simulated")
    assert isinstance(plugin, SimulatedAutomator)
    return plugin


async def test_macros_reach_the_plugins_expanded_and_a_check_finds_and_repairs_drift(stack: Stack) -> None:
    await _daily_catalog(stack)
    cid = (await _ok(stack, CreateCluster(name="macros", template="hadoop-small", nodes=3, requested_by="alice"))).cluster_id
    cluster = stack.planner.clusters[cid]
    zk = sorted((n for n in cluster.nodes.values() if "zookeeper-server" in n.services), key=lambda n: n.nodenum)
    nn = next(n for n in cluster.nodes.values() if "hdfs-namenode" in n.services)
    runs = [r for r in _automator(stack).runs if r.cluster_id == cid and r.action.value == "configure"]
    assert runs, "no configure ran"
    for run in runs:
        assert run.config["zookeeper"]["quorum"] == ",".join(f"{cluster.hostname(n.id)}:2181" for n in zk)
        assert run.config["hdfs"]["namenode"] == f"hdfs://{cluster.hostname(nn.id)}:8020"
        # The owner is the authenticated requester (the subject's principal), not the body's claim.
        assert run.config["owner"] == principal_of(stack.client.nc) != "alice"
    [zk_run] = [r for r in runs if r.service == "zookeeper-server"]
    assert zk_run.config["zookeeper"]["myid"] == "1"

    # zookeeper's start was checked; then it dies on its node, and the namenode, which needs it
    # running, fails with it; a check sees both, a repair starts zookeeper, then the namenode (its
    # failure may be zookeeper's alone), rather than install and configure it again.
    [node] = [n.id for n in zk]
    assert cluster.observed[(node, "zookeeper-server")][0] == "running"
    _automator(stack).states[(cid, node, "zookeeper-server")] = "stopped"
    _automator(stack).states[(cid, nn.id, "hdfs-namenode")] = "failed"
    await _ok(stack, CheckCluster(cluster_id=cid))
    shown = await stack.client.cluster(cid)  # the drift says what the repair does (with the tenant's catalog)
    assert [d.to_json() for d in shown.drift] == sorted([
        {"node": node, "service": "zookeeper-server", "desired": "running", "observed": "stopped", "repair": "start", "after": []},
        {"node": nn.id, "service": "hdfs-namenode", "desired": "running", "observed": "failed", "repair": "start",
         "after": ["zookeeper-server"]}],
        key=lambda d: (d["node"], d["service"]))
    _automator(stack).runs.clear()
    await _ok(stack, RepairCluster(cluster_id=cid))
    assert [(r.service, r.action.value) for r in _automator(stack).runs if r.action.value != "status"] == [
        ("zookeeper-server", "start"), ("hdfs-namenode", "start")]
    assert (await stack.client.cluster(cid)).drift == []


async def test_a_saved_rolling_plan_applies_exactly_and_a_stale_one_is_refused(stack: Stack) -> None:
    cid = (await _ok(stack, CreateCluster(name="rolling", template="hadoop-small", nodes=4))).cluster_id
    shown = await stack.client.request(RestartServices(cluster_id=cid, rolling=Rolling(batch="50%"), dry_run=True))
    assert isinstance(shown, DryRun) and shown.plan_id is not None
    assert len(shown.plan["rolling"]["batches"]) == 2
    job = await _ok(stack, ApplyPlan(plan_id=shown.plan_id))
    planned = [r.event for r in await stack.store.read(subjects.job_events(stack.tenant, job.job_id)) if r.type == "JobPlanned"]
    assert [t.id for t in planned[0].tasks] == [t["id"] for t in shown.plan["tasks"]]
    assert planned[0].batches == shown.plan["rolling"]["batches"]
    stale = await stack.client.request(ApplyPlan(plan_id=shown.plan_id, request_id="another-key"))
    assert isinstance(stale, Accepted) and stale.duplicate  # the same plan is the same job, whatever the key
    again = await stack.client.request(RestartServices(cluster_id=cid, dry_run=True))
    assert isinstance(again, DryRun) and again.plan_id is not None
    await _ok(stack, ConfigureCluster(cluster_id=cid, config={"x": 1}))
    refused = await stack.client.request(ApplyPlan(plan_id=again.plan_id))
    assert isinstance(refused, Rejected) and "make a new plan" in refused.reason


async def test_a_lease_expires_into_a_delete(stack: Stack) -> None:
    await _daily_catalog(stack, lease={"initial": "3s", "max": "10s", "step": "2s"})
    cid = (await _ok(stack, CreateCluster(name="leased", template="hadoop-small", nodes=2))).cluster_id
    assert stack.planner.clusters[cid].expires_at is not None
    deleted = asyncio.Event()

    async def on_event(msg: Any) -> None:
        if msg.headers and msg.headers.get("Muster-Type") == "ClusterStatusChanged" and b'"deleted"' in msg.data:
            deleted.set()

    sub = await stack.client.nc.jetstream().subscribe(subjects.cluster_events(stack.tenant, cid), ordered_consumer=True,
                                                      cb=on_event)
    try:
        await asyncio.wait_for(deleted.wait(), timeout=60)  # the delete job ran to its end
    finally:
        await sub.unsubscribe()
    jobs = [r.event for r in await stack.store.read(f"muster.evt.{stack.tenant}.job.*") if r.type == "JobRequested"
            and r.event.cluster_id == cid and r.event.operation == "delete"]
    assert [j.requested_by for j in jobs] == ["lease-expiry"]

