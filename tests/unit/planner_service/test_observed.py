"""Observed service state (#17.7): `status` tasks after starts and stops and at a check record
each service's state per node; a start that leaves its service not running fails; drift from
the desired state is listed, and one repair re-runs the missing starts (and installs)."""

from __future__ import annotations

from typing import Any

from planner_harness import CHECKED, Harness, demo_catalog

from contracts.catalog import Action, ServiceConstraint
from contracts.commands import Accepted, CheckCluster, CreateCluster, DryRun, Rejected, RepairCluster, StartServices, StopServices
from services.planner.domain.observed import repairs


def checked() -> Harness:
    catalog = demo_catalog(checked=CHECKED)
    catalog.clustertemplates["hadoop-small"].defaults.services.append("checked")
    return Harness(catalog=catalog)


def _observed(h: Harness, cid: str) -> list[Any]:
    return [r.event for r in h.log.records if r.subject == f"muster.evt.default.cluster.{cid}" and r.type == "ServiceStateObserved"]


async def _job(h: Harness, command: Any) -> str:
    reply = await h.send(command)
    assert isinstance(reply, Accepted), reply
    await h.settle()
    return reply.job_id


async def test_a_start_is_checked_and_its_state_recorded() -> None:
    h = checked()
    cid = await h.cluster_of(2)
    seen = _observed(h, cid)
    assert {(e.node_id, e.service, e.state, e.expected) for e in seen} == {
        (n, "checked", "running", "running") for n in h.cluster(cid).nodes}
    assert h.cluster(cid).drift() == []


async def test_a_service_that_does_not_come_up_fails_its_start() -> None:
    h = checked()
    cid = await h.cluster_of(2)
    node = sorted(h.cluster(cid).nodes)[0]
    await _job(h, StopServices(cluster_id=cid, services=["checked"]))
    h.states[(node, "checked")] = "failed"  # it will not start there
    job_id = await _job(h, StartServices(cluster_id=cid, services=["checked"]))
    job = h.job(job_id)
    assert job.state == "rolled_back"
    assert job.error == f"task {node}.status.checked failed 3 times: checked is failed on {node}, not running"
    fails = h.events(job_id, "TaskAttemptFailed")
    assert fails[0].error == f"checked is failed on {node}, not running"


async def test_stop_makes_services_desired_stopped_and_start_running_again() -> None:
    h = checked()
    cid = await h.cluster_of(2)
    await _job(h, StopServices(cluster_id=cid, services=["checked"]))
    assert h.cluster(cid).stopped == ["checked"] and h.cluster(cid).drift() == []
    await _job(h, StartServices(cluster_id=cid, services=["checked"]))
    assert h.cluster(cid).stopped == [] and h.cluster(cid).drift() == []


async def test_a_check_lists_drift_and_one_repair_starts_what_is_missing() -> None:
    h = checked()
    cid = await h.cluster_of(3)
    a, b, _ = sorted(h.cluster(cid).nodes)
    h.states[(a, "checked")] = "stopped"  # died meanwhile
    h.states[(b, "checked")] = "failed"  # broken
    job_id = await _job(h, CheckCluster(cluster_id=cid))
    assert h.job(job_id).state == "succeeded" and h.cluster(cid).status == "active"
    drift = {(d.node, d.service): (d.desired, d.observed, d.repair) for d in h.cluster(cid).drift()}
    assert drift == {(a, "checked"): ("running", "stopped", "start"), (b, "checked"): ("running", "failed", "reinstall")}
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    planned = {(t["node"], t["action"]) for t in dry.plan["tasks"] if t["service"] == "checked"}
    assert planned == {(b, "install"), (b, "configure"), (a, "start"), (b, "start"), (a, "status"), (b, "status")}
    del h.states[(a, "checked")], h.states[(b, "checked")]  # what the repair puts right
    repair = await _job(h, RepairCluster(cluster_id=cid))
    assert h.job(repair).state == "succeeded" and h.cluster(cid).drift() == []
    again = await h.send(RepairCluster(cluster_id=cid))
    assert isinstance(again, Rejected) and "has no drift to repair" in again.reason


def primary_and_replicas() -> Harness:
    """One `primary` and a `replica` on every other node that needs it running (Redis's
    replicaof): a replica whose primary is gone says it is failed (its link is down)."""
    replica = {**CHECKED, "dependencies": {"runtime": {"requires": ["primary"], "uses": []}}}
    catalog = demo_catalog(primary=CHECKED, replica=replica)
    template = catalog.clustertemplates["hadoop-small"]
    template.defaults.services += ["primary", "replica"]
    template.constraints.layout.cantcoexist.append(["primary", "replica"])
    template.constraints.services["primary"] = ServiceConstraint.model_validate({"quantities": {"min": 1, "max": 1}})
    return Harness(catalog=catalog)


async def test_replicas_failed_while_their_primary_is_down_are_started_after_it_not_reinstalled() -> None:
    h = primary_and_replicas()
    cid = await h.cluster_of(3)
    nodes = h.cluster(cid).nodes
    [primary] = [n for n in sorted(nodes) if "primary" in nodes[n].services]
    replicas = [n for n in sorted(nodes) if "replica" in nodes[n].services]
    h.states[(primary, "primary")] = "stopped"  # killed
    for node in replicas:
        h.states[(node, "replica")] = "failed"  # link to the primary down
    await _job(h, CheckCluster(cluster_id=cid))
    assert {d.repair for d in h.cluster(cid).drift() if d.service == "replica"} == {"reinstall"}  # taken alone
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    stage = {t: i for i, ids in enumerate(dry.plan["stages"]) for t in ids}
    tasks = [(t["node"], t["service"], t["action"], stage[t["id"]]) for t in dry.plan["tasks"] if t["service"] in ("primary", "replica")]
    assert repairs(h.catalogs.by_tenant["default"].services, h.cluster(cid)) == {(primary, "primary"): "start", **{(n, "replica"): "start" for n in replicas}}
    assert {(n, s, a) for n, s, a, _ in tasks if s == "replica"} == {(n, "replica", a) for n in replicas for a in ("start", "status")}
    # after the primary's start, as a create orders them (before session 36 after its status too:
    # the repair planned each set of nodes' starts a phase after another's)
    started = min(i for n, s, a, i in tasks if (s, a) == ("primary", "start"))
    assert all(i > started for _, s, _, i in tasks if s == "replica")
    del h.states[(primary, "primary")]
    for node in replicas:
        del h.states[(node, "replica")]
    repair = await _job(h, RepairCluster(cluster_id=cid))
    assert h.job(repair).state == "succeeded" and h.cluster(cid).drift() == []
    # A replica that fails while its primary runs is reinstalled, as before.
    h.states[(replicas[0], "replica")] = "failed"
    await _job(h, CheckCluster(cluster_id=cid))
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    assert {(t["node"], t["action"]) for t in dry.plan["tasks"] if t["action"] in ("install", "configure")} == {
        (replicas[0], "install"), (replicas[0], "configure")}


async def test_a_check_tolerates_nodes_that_do_not_answer_and_changes_no_status() -> None:
    h = checked()
    cid = await h.cluster_of(2)
    node = sorted(h.cluster(cid).nodes)[0]
    h.behaviour = lambda m: "fail" if m.action.value == "status" and m.node.id == node else "succeed"
    job_id = await _job(h, CheckCluster(cluster_id=cid))
    assert h.job(job_id).state == "succeeded" and h.cluster(cid).status == "active"
    assert h.cluster(cid).observed[(node, "checked")] == ("unknown", job_id)
    # Its repair reconnects the node: its provider confirms it (the namespaces provider starts
    # its sshd again), then its services start and are asked again. (A repair was refused:
    # nothing could bring back a node whose sshd died.)
    assert [d.repair for d in h.cluster(cid).drift()] == ["reconnect"]
    dry = await h.send(RepairCluster(cluster_id=cid, dry_run=True))
    assert isinstance(dry, DryRun)
    assert {(t["node"], t["action"], t["service"]) for t in dry.plan["tasks"]} == {
        (node, "confirm", None), (node, "start", "checked"), (node, "status", "checked")}
    h.behaviour = lambda m: "succeed"
    repair = await _job(h, RepairCluster(cluster_id=cid))
    assert h.job(repair).state == "succeeded" and h.cluster(cid).drift() == []
    assert h.cluster(cid).observed[(node, "checked")] == ("running", repair)


async def test_a_repair_whose_confirm_fails_never_deletes_the_node() -> None:
    """A failed confirm of a create is followed by a delete of what the create made; a repair's
    confirm of a node the cluster has is only tried again."""
    h = checked()
    cid = await h.cluster_of(2)
    node = sorted(h.cluster(cid).nodes)[0]
    h.behaviour = lambda m: "fail" if m.action.value == "status" and m.node.id == node else "succeed"
    await _job(h, CheckCluster(cluster_id=cid))
    h.behaviour = lambda m: "fail" if m.action.value == "confirm" else "succeed"
    repair = await _job(h, RepairCluster(cluster_id=cid))
    assert h.job(repair).state in ("rolled_back", "needs_attention", "failed")
    actions = {m.action.value for m in h.queue.messages if m.job_id == repair}
    assert "confirm" in actions and "delete" not in actions
    assert node in h.cluster(cid).nodes


async def test_a_check_needs_a_service_with_a_status_action() -> None:
    h = Harness()
    cid = await h.cluster_of(2)
    reply = await h.send(CheckCluster(cluster_id=cid))
    assert isinstance(reply, Rejected) and "none of its services defines a `status` action" in reply.reason


async def test_a_check_of_a_cluster_whose_create_rolled_back_says_it_has_no_nodes() -> None:
    """It said `none of its services defines a status action`, of services that do (walking the
    real clusters: a create whose playbook was not found rolled back, then `muster cluster check`)."""
    h = checked()
    h.behaviour = lambda m: "refuse" if m.action is Action.INSTALL else "succeed"
    reply = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.cluster(reply.cluster_id).nodes == {}
    said = await h.send(CheckCluster(cluster_id=reply.cluster_id))
    assert isinstance(said, Rejected) and said.reason == "nothing to check on cluster 'c1': it has no nodes (cluster failed)", said
