"""The desired state per node: start, stop, restart and configure on chosen nodes plan only those
nodes' tasks and record what each (node, service) is meant to be; drift, repair and a rollback
to an earlier job read it per node; an old (v1) desired state reads as cluster-wide; bad nodes
are refused by name with nothing recorded (docs/planner.md, "Services on nodes")."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness, checked_harness

from contracts.commands import (
    CheckCluster,
    ConfigureCluster,
    DryRun,
    ExpandCluster,
    Rejected,
    RepairCluster,
    RestartServices,
    RollbackCluster,
    StartServices,
    StopServices,
)
from contracts.events import ClusterRequested, ServicesDesired
from contracts.layout import NodeSpec
from muster.readmodel import desired
from muster.readmodel.timeline import describe
from services.planner.domain.cluster import Cluster


def _desired_events(h: Harness, cid: str) -> list[Any]:
    return [r.event for r in h.log.records if r.subject == f"muster.evt.default.cluster.{cid}" and r.type == "ServicesDesired"]


async def test_a_stop_on_one_node_plans_its_tasks_only_and_is_desired_there_only() -> None:
    h = checked_harness()
    cid = await h.cluster_of(3)
    a, b, c = sorted(h.cluster(cid).nodes)
    dry = await h.send(StopServices(cluster_id=cid, services=["checked"], nodes=[a], dry_run=True))
    assert isinstance(dry, DryRun) and {t["node"] for t in dry.plan["tasks"]} == {a}
    job_id = (await h.ok(StopServices(cluster_id=cid, services=["checked"], nodes=[a]))).job_id
    assert {m.node.id for m in h.queue.messages if m.job_id == job_id} == {a}
    cluster = h.cluster(cid)
    assert cluster.stopped_pairs() == {(a, "checked")} and cluster.drift() == []
    [event] = _desired_events(h, cid)
    assert (event.v, event.stopped, event.stopped_on) == (2, [], {"checked": [a]})
    assert describe(event) == f"desired: stopped checked on {a}"  # the history's line
    # Started by hand on a, stopped by hand on b: each is drift on its own node, and the
    # repair stops it on a and starts it on b, nowhere else.
    h.stopped.discard((a, "checked"))
    h.stopped.add((b, "checked"))
    await h.ok(CheckCluster(cluster_id=cid))
    drift = {(d.node, d.service): (d.desired, d.observed, d.repair) for d in h.cluster(cid).drift()}
    assert drift == {(a, "checked"): ("stopped", "running", "stop"), (b, "checked"): ("running", "stopped", "start")}
    repair = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(repair, DryRun)
    moved = {(t["node"], t["action"]) for t in repair.plan["tasks"] if t["service"] == "checked" and t["action"] != "status"}
    assert moved == {(a, "stop"), (b, "start")}
    # A start on a: meant to run everywhere again.
    await h.ok(StartServices(cluster_id=cid, services=["checked"], nodes=[a]))
    assert h.cluster(cid).stopped_pairs() == set() and c in h.cluster(cid).nodes


async def test_a_stop_on_every_node_that_has_it_is_cluster_wide_and_a_later_start_on_one_splits_it() -> None:
    h = checked_harness()
    cid = await h.cluster_of(2)
    a, b = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"]))
    assert (h.cluster(cid).stopped, h.cluster(cid).stopped_on) == (["checked"], {})
    await h.ok(RestartServices(cluster_id=cid, services=["checked"], nodes=[b]))
    assert (h.cluster(cid).stopped, h.cluster(cid).stopped_on) == ([], {"checked": [a]})


async def test_a_plain_restart_leaves_stopped_what_the_user_stopped_and_says_so() -> None:
    """Session 37: `muster cluster restart` naming no services started `checked`, stopped on a,
    and it was meant to run from then on (decision 53: "the request as given"); it now restarts
    what runs, its dry run and its answer say what it leaves stopped and how to start it, and
    naming the service restarts it there too."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    a, b = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"], nodes=[a]))
    note = (f"the restart leaves stopped what was stopped (`muster cluster stop`): checked on {a}; `muster cluster start c1 "
            "checked` starts them, or name them to the restart")
    dry = await h.send(RestartServices(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun) and note in dry.warnings, dry.warnings
    assert (a, "checked") not in {(t["node"], t["service"]) for t in dry.plan["tasks"]}
    assert (b, "checked", "start") in {(t["node"], t["service"], t["action"]) for t in dry.plan["tasks"]}
    accepted = await h.ok(RestartServices(cluster_id=cid))
    assert note in accepted.warnings
    assert h.cluster(cid).stopped_pairs() == {(a, "checked")}
    await h.ok(RestartServices(cluster_id=cid, services=["checked"]))
    assert h.cluster(cid).stopped_pairs() == set()


async def test_configure_with_restart_on_one_node_leaves_the_others_outdated() -> None:
    h = checked_harness()
    cid = await h.cluster_of(2)
    a, b = sorted(h.cluster(cid).nodes)
    job_id = (await h.ok(ConfigureCluster(cluster_id=cid, config={"x": 2}, restart=True, nodes=[a]))).job_id
    assert {m.node.id for m in h.queue.messages if m.job_id == job_id} == {a}
    # b's services run the old config and were not even configured with the new one: a restart
    # would start them on the old file again (it was `outdated`, repaired by a restart only).
    stale = {(d.node, d.service): d.repair for d in h.cluster(cid).drift() if d.observed == "stale"}
    assert stale and {n for n, _ in stale} == {b} and set(stale.values()) == {"reconfigure"}
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    assert {(t["node"], t["service"]) for t in dry.plan["tasks"] if t["action"] == "configure"} == set(stale)
    await h.ok(RepairCluster(cluster_id=cid))
    assert h.cluster(cid).drift() == []


async def test_unknown_nodes_and_nodes_without_the_service_are_refused_by_name_with_nothing_recorded() -> None:
    h = checked_harness()
    cid = await h.cluster_of(2)
    before = len(h.log.records)
    unknown = await h.send(StopServices(cluster_id=cid, services=["checked"], nodes=["n9"]))
    assert isinstance(unknown, Rejected) and unknown.field == "nodes"
    assert unknown.reason.startswith("cluster 'c1' has no node n9 (its nodes: ")
    master, worker = sorted(h.cluster(cid).nodes)  # the namenode is on the first node only
    refused = await h.send(RestartServices(cluster_id=cid, services=["hdfs-namenode"], nodes=[worker]))
    assert isinstance(refused, Rejected) and refused.field == "nodes"
    assert refused.reason == (f"node {worker} of cluster 'c1' has none of hdfs-namenode (it has: base, checked, hdfs-datanode, "
                              "yarn-nodemanager): nothing to restart there")
    absent = await h.send(StartServices(cluster_id=cid, services=["hdfs-namenode", "hdfs-datanode"], nodes=[worker]))
    assert isinstance(absent, Rejected) and absent.reason == f"hdfs-namenode is on none of the nodes {worker} of cluster 'c1'"
    assert master in h.cluster(cid).nodes
    assert len(h.log.records) == before  # nothing recorded


async def test_a_rollback_to_a_job_puts_back_the_state_of_each_node() -> None:
    h = checked_harness()
    cid = await h.cluster_of(2)
    a, b = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"], nodes=[a]))
    later = (await h.ok(StartServices(cluster_id=cid, services=["checked"]))).job_id
    assert h.cluster(cid).stopped_pairs() == set()
    dry = await h.send(RollbackCluster(cluster_id=cid, to_job=later, dry_run=True))
    assert isinstance(dry, DryRun)
    assert {(t["node"], t["action"]) for t in dry.plan["tasks"] if t["service"] == "checked" and t["action"] != "status"} == {(a, "stop")}
    await h.ok(RollbackCluster(cluster_id=cid, to_job=later))
    assert h.cluster(cid).stopped_pairs() == {(a, "checked")}


def test_a_v1_desired_state_reads_as_cluster_wide() -> None:
    cluster = Cluster(ClusterRequested(tenant="t", cluster_id="33333333-3333-4333-8333-333333333333", name="w", template="x",
                                       provider="sim", config={}, job_id="j0"))
    cluster.change_layout("j0", [NodeSpec(id=n, hardwaretype="h", imagetype="i", services=["zk", "web"]) for n in ("n1", "n2")])
    old = ServicesDesired.model_validate({"v": 1, "cluster_id": str(cluster.id), "job_id": "j1", "stopped": ["zk"]})
    cluster._desired(old)
    assert cluster.stopped_pairs() == {("n1", "zk"), ("n2", "zk")}
    assert desired.compact(cluster.layout(), {("n1", "zk")}) == ([], {"zk": ["n1"]})
    assert desired.compact(cluster.layout(), {("n1", "zk"), ("n2", "zk"), ("n3", "zk")}) == (["zk"], {})


async def test_a_start_elsewhere_or_an_expand_does_not_start_a_service_meant_to_be_stopped(h: Harness) -> None:
    """The namenode stopped on its node (the datanodes there too, and a worker's kept running),
    then a start of a worker's datanode and an expand: each threw in the namenode's start (the
    datanode needs it), and the job made it meant to run again (decision 53)."""
    cid = await h.cluster_of(3)
    nodes = h.cluster(cid).nodes
    [master] = [n for n in sorted(nodes) if "hdfs-namenode" in nodes[n].services]
    worker = next(n for n in sorted(nodes) if n != master and "hdfs-datanode" in nodes[n].services)
    await h.ok(StopServices(cluster_id=cid, services=["hdfs-namenode"], nodes=[master]))
    for cmd in (StartServices(cluster_id=cid, services=["hdfs-datanode"], nodes=[worker]), ExpandCluster(cluster_id=cid, nodes=4)):
        dry = await h.send(cmd.model_copy(update={"dry_run": True}))
        assert isinstance(dry, DryRun), dry
        assert not [t["id"] for t in dry.plan["tasks"] if t["service"] == "hdfs-namenode" and t["action"] == "start"]
        await h.ok(cmd)
        assert (master, "hdfs-namenode") in h.cluster(cid).stopped_pairs()
