"""A rollback ends each service in its state of before the job, as the log recorded it
(`JobPlanned.previous_stopped`): running where it was meant to run, stopped where the user had
stopped it (docs/planner.md, "Rollback")."""

from __future__ import annotations

from planner_harness import Harness, checked_harness, demo_catalog

from contracts.commands import (
    Accepted,
    CheckCluster,
    ConfigureCluster,
    Rejected,
    RemoveServices,
    RestartServices,
    RetryJob,
    StopServices,
    UpgradeService,
)


async def test_a_configure_restart_configures_a_service_the_user_stopped_and_leaves_it_stopped() -> None:
    """`checked` stopped by the user, then a configure --restart: it stopped and started every
    service, `checked` too, which was then meant to run. Now the services meant to run are
    restarted, `checked` is configured only (a phase of its own), and stays stopped."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    nodes = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"]))
    job_id = (await h.ok(ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))).job_id
    ran = {(t.node, t.action.value) for t in h.job(job_id).plan.tasks if t.service == "checked"}
    assert ran == {(n, "configure") for n in nodes}
    assert any(t.action.value == "start" and t.service == "hdfs-namenode" for t in h.job(job_id).plan.tasks)
    assert h.stopped >= {(n, "checked") for n in nodes} and h.cluster(cid).stopped == ["checked"]
    assert h.cluster(cid).drift() == []


async def test_a_failed_restart_leaves_a_service_the_user_stopped_stopped() -> None:
    """`checked` stopped by the user, then a restart of every service whose namenode would not
    start: the rollback started `checked` again (the inverse of the job's stop of it) on every
    node, and the cluster said it was meant to be stopped while it ran (a configure --restart
    did the same before it left such services out). Since session 37 a plain restart leaves
    what the user stopped out of its plan (decision 53, amended): nothing of `checked` to undo."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    nodes = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"]))
    h.behaviour = lambda m: "fail" if m.task_id == f"{nodes[0]}.start.hdfs-namenode" else "succeed"
    reply = await h.send(RestartServices(cluster_id=cid))
    assert isinstance(reply, Accepted)
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "rolled_back", job.view()["error"]
    assert not any(t.service == "checked" for t in job.plan.tasks), "a plain restart left out what the user stopped"
    undone = {(t.node, t.action.value) for t in job.tasks.values() if t.id.startswith("undo.") and t.service == "checked"}
    assert "start" not in {a for _, a in undone}, undone
    assert h.stopped >= {(n, "checked") for n in nodes}  # what the workers last did: stopped
    cluster = h.cluster(cid)
    assert cluster.stopped == ["checked"] and cluster.status == "active"


async def test_a_remove_services_rolled_back_configures_the_service_again_before_it_starts() -> None:
    """Installed again and started, without its config: the remove had taken it (the real
    catalog's redis deletes its directory), so the start failed."""
    removable = {"provisioner": {"actions": {a: {"type": "simulated", "fields": {}}
                                             for a in ("install", "configure", "start", "stop", "remove")}}}
    catalog = demo_catalog(gone=removable)
    catalog.clustertemplates["hadoop-small"].defaults.services.append("gone")
    h = Harness(catalog=catalog)
    cid = await h.cluster_of(2)
    nodes = sorted(h.cluster(cid).nodes)
    h.behaviour = lambda m: "fail" if m.task_id == f"{nodes[-1]}.remove.gone" else "succeed"
    reply = await h.send(RemoveServices(cluster_id=cid, services=["gone"]))
    assert isinstance(reply, Accepted)
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "rolled_back", job.error
    ran = [m.task_id.removeprefix("undo.") for m in h.sent() if m.job_id == reply.job_id and m.task_id.startswith("undo.")]
    assert ran == [f"{nodes[0]}.install.gone", f"{nodes[0]}.configure.gone", f"{nodes[0]}.start.gone", f"{nodes[1]}.start.gone"]
    assert all("gone" in h.services(cid)[n] for n in nodes) and h.cluster(cid).status == "active"
    assert h.cluster(cid).drift() == []  # installed, configured, running: as before the job


async def test_an_upgrade_installs_and_configures_a_service_stopped_on_one_node_and_leaves_it_stopped_there() -> None:
    """`checked` stopped by the user on one node: an upgrade stopped, installed, configured and
    started it on every node, that one too, which was then meant to run."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    a, b = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"], nodes=[a]))
    job_id = (await h.ok(UpgradeService(cluster_id=cid, service="checked"))).job_id
    ran = {(t.node, t.action.value) for t in h.job(job_id).plan.tasks if t.service == "checked"}
    assert ran == {(a, "install"), (a, "configure"), (b, "stop"), (b, "install"), (b, "configure"), (b, "start"), (b, "status")}
    assert (a, "checked") in h.stopped and (b, "checked") not in h.stopped
    assert h.cluster(cid).stopped_pairs() == {(a, "checked")} and h.cluster(cid).drift() == []


async def _restart_rolled_back() -> tuple[Harness, str, str]:
    """A 2-node cluster whose restart of `checked` was rolled back (its starts failed); then
    every task succeeds. (harness, cluster, job)."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    h.behaviour = lambda m: "fail" if m.task_id.endswith(".start.checked") and not m.task_id.startswith("undo.") else "succeed"
    reply = await h.send(RestartServices(cluster_id=cid, services=["checked"]))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.job(reply.job_id).state == "rolled_back"
    h.behaviour = lambda m: "succeed"
    return h, cid, reply.job_id


async def test_a_check_after_a_rollback_keeps_the_cluster_s_reason() -> None:
    """A check only looks, and the cluster keeps its status: it kept `active` or `incomplete`
    but dropped the reason (`expand rolled back: task ...`, `n1000 deleted all the same`), so
    `muster cluster show` no longer said why after the user checked what runs."""
    h, cid, _ = await _restart_rolled_back()
    reason = h.cluster(cid).status_reason
    assert reason.startswith("restart rolled back: task ")
    check = (await h.ok(CheckCluster(cluster_id=cid))).job_id
    cluster = h.cluster(cid)
    assert (cluster.status, cluster.status_reason, cluster.job_id) == ("active", reason, check)


async def test_a_rolled_back_job_is_retried_after_checks_that_only_looked() -> None:
    """A restart rolled back, the user checked what runs (twice): the retry was refused, the
    cluster's last job being the check (`is not the last job of cluster 'c1'`), though a check
    changes nothing a retry's plan was made on. A job that changed the cluster since still
    refuses it."""
    h, cid, job_id = await _restart_rolled_back()
    await h.ok(CheckCluster(cluster_id=cid))
    await h.ok(CheckCluster(cluster_id=cid))
    retried = await h.send(RetryJob(job_id=job_id))
    assert isinstance(retried, Accepted), retried
    await h.settle()
    assert h.job(job_id).state == "succeeded" and h.cluster(cid).job_id == job_id
    # once another change came, the retry of the one before is refused, checks or not
    h, cid, job_id = await _restart_rolled_back()
    await h.ok(StopServices(cluster_id=cid, services=["checked"]))
    await h.ok(CheckCluster(cluster_id=cid))
    refused = await h.send(RetryJob(job_id=job_id))
    assert isinstance(refused, Rejected) and "is not the last job of cluster 'c1'" in refused.reason
