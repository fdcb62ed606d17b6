"""Dry runs make the same decisions as the real request and record nothing but the plan they
show (`PlanSaved`, for `ApplyPlan`): every verb that plans answers `DryRun` with its layout and
plan."""

from __future__ import annotations

from typing import Any

import pytest
from planner_harness import SIMPLE, Harness, demo_catalog, unsolvable

from contracts.commands import (
    AddServices,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    Rejected,
    RemoveServices,
    RestartServices,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)
from services.planner.bootstrap import bootstrap

DRY: dict[str, Any] = {
    "delete": lambda cid: DeleteCluster(cluster_id=cid, dry_run=True),
    "expand": lambda cid: ExpandCluster(cluster_id=cid, nodes=5, dry_run=True),
    "shrink": lambda cid: ShrinkCluster(cluster_id=cid, nodes=2, dry_run=True),
    "add-services": lambda cid: AddServices(cluster_id=cid, services=["extra"], dry_run=True),
    "remove-services": lambda cid: RemoveServices(cluster_id=cid, services=["yarn-nodemanager"], dry_run=True),
    "configure": lambda cid: ConfigureCluster(cluster_id=cid, config={"x": 1}, restart=True, dry_run=True),
    "start": lambda cid: StartServices(cluster_id=cid, dry_run=True),
    "stop": lambda cid: StopServices(cluster_id=cid, services=["zookeeper-server"], dry_run=True),
    "restart": lambda cid: RestartServices(cluster_id=cid, dry_run=True),
    "upgrade": lambda cid: UpgradeService(cluster_id=cid, service="base", dry_run=True),
}
EXPECTED_ACTIONS = {
    "delete": {"delete"}, "expand": {"create", "confirm", "install", "start"}, "shrink": {"stop", "delete"},
    "add-services": {"install", "start"}, "remove-services": {"stop"},  # it has no `remove` action
    "configure": {"stop", "configure", "start"}, "start": {"start"}, "stop": {"stop"}, "restart": {"stop", "start"},
    "upgrade": {"install", "configure"},  # `base` has neither stop nor start
}


async def test_a_create_dry_run_answers_a_layout_and_a_plan_and_records_nothing(h: Harness) -> None:
    reply = await h.send(CreateCluster(name="dry", template="hadoop-small", nodes=4, dry_run=True))
    assert isinstance(reply, DryRun) and reply.layout is not None and reply.layout.nodes == 4
    assert {t["action"] for t in reply.plan["tasks"]} >= {"create", "confirm", "install", "start"}
    assert [r.type for r in h.log.records] == ["PlanSaved"] and h.planner.jobs == {}
    assert h.log.records[0].subject == f"muster.evt.default.plan.{reply.plan_id}"


@pytest.mark.parametrize("verb", sorted(DRY))
async def test_each_cluster_operation_dry_runs(verb: str) -> None:
    h = Harness(catalog=demo_catalog(extra=SIMPLE))
    cid = await h.cluster_of(3)
    before = len(h.log.records)
    reply = await h.send(DRY[verb](cid))
    assert isinstance(reply, DryRun), reply
    assert {t["action"] for t in reply.plan["tasks"]} >= EXPECTED_ACTIONS[verb]
    assert reply.layout is not None and reply.layout.nodes == {"expand": 5, "shrink": 2}.get(verb, 3)
    assert [r.type for r in h.log.records[before:]] == ["PlanSaved"] and h.cluster(cid).status == "active"
    assert reply.cluster_version == h.cluster(cid).version and reply.plan_id


async def test_an_expands_dry_run_names_its_thrown_in_starts_on_the_old_nodes(h: Harness) -> None:
    """Walk of session 27: an expand's dry run planned `start hdfs-namenode` on an old node, read
    as the expand touching it. It is the thrown-in start of what the new nodes need running
    (docs/planner.md, "Subsets"), and the answer says which tasks those are."""
    cid = await h.cluster_of(2)
    old = set(h.cluster(cid).nodes)
    reply = await h.send(ExpandCluster(cluster_id=cid, nodes=3, dry_run=True))
    assert isinstance(reply, DryRun), reply
    nodes = {t["id"]: t["node"] for t in reply.plan["tasks"]}
    thrown = reply.plan["thrown_in"]
    assert {"hdfs-namenode", "yarn-resourcemanager"} <= {tid.split(".start.")[1] for tid in thrown}, thrown
    assert {nodes[tid] for tid in thrown} <= old  # on old nodes, only starts
    assert not {node for tid, node in nodes.items() if tid not in thrown} & old  # the rest: the new node only


async def test_a_dry_run_without_a_layout_or_a_solver_is_refused_by_name(h: Harness) -> None:
    reply = await h.send(unsolvable(h, "dry", nodes=4, dry_run=True))
    assert isinstance(reply, Rejected) and reply.reason.startswith("no layout:") and reply.code == "invalid", reply
    lone = bootstrap(h.log, h.queue, catalogs=h.catalogs, clock=h.clock)
    from services.planner.messages import RequestContext

    body = CreateCluster(name="dry", template="hadoop-small", nodes=4, dry_run=True).model_dump_json().encode()
    reply = await lone.handle(RequestContext(tenant="default", verb="create", body=body))
    assert isinstance(reply, Rejected) and "needs a solver" in reply.reason
