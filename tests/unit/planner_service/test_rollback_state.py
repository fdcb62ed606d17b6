"""A rollback ends each service in its state of before the job, as the log recorded it
(`JobPlanned.previous_stopped`): running where it was meant to run, stopped where the user had
stopped it (docs/planner.md, "Rollback")."""

from __future__ import annotations

from planner_harness import checked_harness

from contracts.commands import Accepted, ConfigureCluster, StopServices


async def test_a_failed_configure_restart_leaves_a_service_the_user_stopped_stopped() -> None:
    """`checked` stopped by the user, then a configure --restart whose namenode would not start:
    the rollback started `checked` again (the inverse of the job's stop of it), on every node,
    and the cluster said it was meant to be stopped while it ran."""
    h = checked_harness()
    cid = await h.cluster_of(2)
    nodes = sorted(h.cluster(cid).nodes)
    await h.ok(StopServices(cluster_id=cid, services=["checked"]))
    assert h.stopped == {(n, "checked") for n in nodes}
    h.behaviour = lambda m: "fail" if m.task_id == f"{nodes[0]}.start.hdfs-namenode" else "succeed"
    reply = await h.send(ConfigureCluster(cluster_id=cid, config={"hdfs": {"replication": 1}}, restart=True))
    assert isinstance(reply, Accepted)
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "rolled_back", job.view()["error"]
    undone = {(t.node, t.action.value) for t in job.tasks.values() if t.id.startswith("undo.") and t.service == "checked"}
    assert undone and not {a for _, a in undone} & {"start"}, undone
    assert h.stopped >= {(n, "checked") for n in nodes}  # what the workers last did: stopped
    cluster = h.cluster(cid)
    assert cluster.stopped == ["checked"] and cluster.status == "active"
