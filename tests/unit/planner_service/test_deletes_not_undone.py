"""A delete cannot be undone: a delete or shrink rolled back after some of its nodes were
deleted leaves those nodes out of the cluster, which is `incomplete`, not `active` as before."""

from __future__ import annotations

from planner_harness import Harness

from contracts.commands import Accepted, DeleteCluster, ShrinkCluster


async def _delete_failing_on_n1001(h: Harness) -> tuple[str, str]:
    """A 3-node cluster's delete, whose n1001 the cloud would not delete; (cluster, job)."""
    cid = await h.cluster_of(3)
    h.behaviour = lambda m: "fail" if m.action.value == "delete" and m.node.id == "n1001" else "succeed"
    reply = await h.send(DeleteCluster(cluster_id=cid))
    assert isinstance(reply, Accepted)
    await h.settle()
    return cid, reply.job_id


async def test_a_delete_that_deleted_some_nodes_and_rolled_back_leaves_them_out() -> None:
    """A delete whose n1001 the cloud would not delete ended `rolled_back` with the cluster
    `active` and its 3 nodes, n1000 and n1002 among them, whose machines were gone."""
    h = Harness()
    cid, job_id = await _delete_failing_on_n1001(h)
    assert h.job(job_id).state == "rolled_back"
    cluster = h.cluster(cid)
    assert sorted(cluster.nodes) == ["n1001"]
    assert cluster.status == "incomplete"
    assert "n1000, n1002 deleted all the same (a delete cannot be undone)" in cluster.status_reason
    h.behaviour = lambda m: "succeed"
    again = await h.send(DeleteCluster(cluster_id=cid))  # the rest goes as any delete
    assert isinstance(again, Accepted)
    await h.settle()
    assert h.job(again.job_id).state == "succeeded" and h.cluster(cid).status == "deleted"


async def test_a_shrink_rolled_back_keeps_the_nodes_it_had_not_deleted_and_runs_nothing_on_the_others() -> None:
    """Its rollback started the services again on every node it removes, the deleted too: on a
    machine that was gone (the simulated one pretends; over SSH it failed, and the job needed
    attention for good). Nothing is undone there now."""
    h = Harness()
    cid = await h.cluster_of(4)
    h.behaviour = lambda m: "fail" if m.action.value == "delete" and m.node.id == "n1003" else "succeed"
    reply = await h.send(ShrinkCluster(cluster_id=cid, nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert h.job(reply.job_id).state == "rolled_back"
    gone = {t.node for t in h.job(reply.job_id).plan.tasks
            if t.action.value == "delete" and h.job(reply.job_id).task_state.get(t.id) == "succeeded"}
    assert gone and not gone & set(h.cluster(cid).nodes)
    assert h.cluster(cid).status == "incomplete" and len(h.cluster(cid).nodes) == 4 - len(gone)
    undone = [t for t in h.job(reply.job_id).tasks.values() if t.id.startswith("undo.")]
    assert undone and not [t.id for t in undone if t.node in gone]
    assert not [m.task_id for m in h.sent() if m.job_id == reply.job_id and m.task_id.startswith("undo.") and m.node.id in gone]


async def test_a_retry_of_that_delete_deletes_the_rest_and_ends() -> None:
    """The retry started the whole plan over, the deletes of nodes already gone too: their
    messages named nodes the cluster no longer had, were never sent, and the job ran for good."""
    from contracts.commands import RetryJob

    h = Harness()
    cid, job_id = await _delete_failing_on_n1001(h)
    ran: list[str] = []
    h.behaviour = lambda m: ran.append(m.task_id) or "succeed"  # type: ignore[func-returns-value]
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()
    assert ran == ["n1001.delete"]
    assert h.job(job_id).state == "succeeded" and h.cluster(cid).status == "deleted"
