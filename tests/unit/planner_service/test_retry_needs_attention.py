"""`muster job retry` of a job that needs attention (its rollback failed: a node could not be
deleted, a service not removed): the rollback's tasks that did not succeed run again, with fresh
attempts, and the job ends as its rollback would have (`rolled_back`), or needs attention again.
Recorded as `JobRetried {rollback: true}`; a repeated request is the same retry; refused once
another job has been admitted on the cluster."""

from __future__ import annotations

from planner_harness import SIMPLE, Harness, demo_catalog

from contracts.commands import Accepted, AddServices, DeleteCluster, Rejected, RetryJob
from contracts.events import JobNeedsAttention, JobRetried, JobRolledBack
from contracts.tasks import TaskMessage
from muster.readmodel.jobs import job_view
from muster.readmodel.locations import updates_from
from muster.readmodel.progress import JobProgress
from services.planner.domain.saga import Effects


def _is(m: TaskMessage, action: str, service: str | None = None, node: str | None = None) -> bool:
    return (m.action.value == action and (service is None or (m.service is not None and m.service.name == service))
            and (node is None or m.node.id == node))


async def _needs_attention() -> tuple[Harness, str, str]:
    """An add-services whose install fails on n1001 and whose rollback cannot remove the service
    from n1000 (its remove fails every time)."""
    h = Harness(catalog=demo_catalog(flaky=SIMPLE))
    cid = await h.cluster_of(2)
    h.behaviour = lambda m: "fail" if (_is(m, "install", "flaky", "n1001") or _is(m, "remove", "flaky")) else "succeed"
    reply = await h.send(AddServices(cluster_id=cid, services=["flaky"]))
    assert isinstance(reply, Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobNeedsAttention) and h.cluster(cid).status == "needs_attention"
    return h, cid, reply.job_id


async def test_a_retry_runs_the_failed_rollback_tasks_again_and_the_job_rolls_back() -> None:
    h, cid, job_id = await _needs_attention()
    [rollback] = h.events(job_id, "RollbackPlanned")
    sent = len(h.queue.messages)
    h.behaviour = lambda m: "succeed"  # the cause is fixed (the node answers again)
    reply = await h.send(RetryJob(job_id=job_id, request_id="retry-1"))
    assert isinstance(reply, Accepted) and not reply.duplicate, reply
    [retried] = h.events(job_id, "JobRetried")
    assert retried.rollback and retried.reason == rollback.reason and retried.v == 2
    assert h.job(job_id).state == "rolling_back" and h.job(job_id).error == rollback.reason
    await h.settle()
    final = h.final(job_id)
    assert isinstance(final, JobRolledBack) and final.reason == rollback.reason, h.history(job_id)
    again = [(m.task_id, m.attempt) for m in h.queue.messages[sent:]]
    assert again == [("undo.n1000.remove.flaky", 4)]  # the failed one only, a fresh attempt; no forward task
    assert h.cluster(cid).status == "active" and "flaky" not in {s for n in h.services(cid).values() for s in n}
    assert job_view(h.job_records(job_id)) == h.job(job_id).view()  # the read model folds the retry the same way


async def test_the_same_retry_again_is_one_retry_and_a_second_one_is_refused_while_it_runs() -> None:
    h, _, job_id = await _needs_attention()
    h.behaviour = lambda m: "hold"
    first = await h.send(RetryJob(job_id=job_id, request_id="retry-1"))
    await h.settle()
    same = await h.send(RetryJob(job_id=job_id, request_id="retry-1"))
    assert isinstance(first, Accepted) and isinstance(same, Accepted) and same.duplicate
    other = await h.send(RetryJob(job_id=job_id, request_id="retry-2"))
    assert isinstance(other, Rejected) and other.reason == f"job {job_id} is rolling_back: cannot retry it"
    assert len(h.events(job_id, "JobRetried")) == 1
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(job_id), JobRolledBack)


async def test_a_rollback_that_fails_again_needs_attention_again_and_may_be_retried_again() -> None:
    h, cid, job_id = await _needs_attention()
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()  # the remove still fails
    ends = [r.type for r in h.job_records(job_id) if r.type in ("JobNeedsAttention", "JobRetried")]
    assert ends == ["JobNeedsAttention", "JobRetried", "JobNeedsAttention"]
    assert "failed 3 times" in h.final(job_id).reason and h.cluster(cid).status == "needs_attention"
    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(job_id), JobRolledBack) and h.cluster(cid).status == "active"


async def test_a_retry_is_refused_once_another_job_ran_on_the_cluster() -> None:
    h, cid, job_id = await _needs_attention()
    delete = await h.send(DeleteCluster(cluster_id=cid))  # the other way out, taken first
    assert isinstance(delete, Accepted)
    h.behaviour = lambda m: "hold"
    await h.settle()
    refused = await h.send(RetryJob(job_id=job_id))
    assert isinstance(refused, Rejected) and refused.code == "conflict" and refused.reason == (
        f"job {job_id} is not the last job of cluster 'c1': its last job is {delete.job_id}, which came after it and left "
        f"the cluster as it is; ask for the operation again (or `muster job retry {delete.job_id}` if that one is to "
        "retry)"), refused
    assert h.events(job_id, "JobRetried") == []


async def test_a_retried_rollback_keeps_the_cluster_busy() -> None:
    h, cid, job_id = await _needs_attention()
    h.behaviour = lambda m: "hold"
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()
    busy = await h.send(DeleteCluster(cluster_id=cid))
    assert isinstance(busy, Rejected) and f"busy with job {job_id} (add-services, rolling_back)" in busy.reason
    assert h.cluster(cid).status_reason.startswith(f"job {job_id} retries its rollback (task n1001.install.flaky failed")


async def test_a_planner_restarted_during_the_retry_carries_it_on() -> None:
    h, _, job_id = await _needs_attention()
    h.behaviour = lambda m: "hold"
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()
    planner = await h.restart()
    assert planner.jobs[job_id].state == "rolling_back"
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert isinstance(h.final(job_id), JobRolledBack)


async def test_a_job_that_needs_attention_with_no_rollback_says_so() -> None:
    h = Harness(catalog=demo_catalog(flaky=SIMPLE))
    cid = await h.cluster_of(2)
    h.behaviour = lambda m: "hold"
    reply = await h.send(AddServices(cluster_id=cid, services=["flaky"]))
    await h.settle()
    job, cluster = h.job(reply.job_id), h.cluster(cid)
    job.needs_attention("the planner could not take in TaskSucceeded")  # as `Planner.on_poison` ends a job mid-plan
    cluster.set_status("needs_attention", reply.job_id, "poison")
    await h.planner.execution.execute(job, cluster, Effects())
    refused = await h.send(RetryJob(job_id=reply.job_id))
    assert isinstance(refused, Rejected) and refused.reason == (
        f"job {reply.job_id} needs attention with no rollback to retry (it stopped before one began: the planner could "
        "not take in TaskSucceeded); `muster cluster delete` removes what it made")
    assert not any(isinstance(e, JobRetried) for e in h.events(reply.job_id, "JobRetried"))


async def test_the_progress_stream_and_the_trackers_index_follow_the_retried_rollback() -> None:
    h, _, job_id = await _needs_attention()
    h.behaviour = lambda m: "hold"
    assert isinstance(await h.send(RetryJob(job_id=job_id)), Accepted)
    await h.settle()
    records = h.job_records(job_id)
    [at] = [i for i, r in enumerate(records) if r.type == "JobRetried"]
    progress = JobProgress()
    sent = [progress.apply(r) for r in records][at]
    [rollback] = h.events(job_id, "RollbackPlanned")
    assert sent["phase"] == "rollback" and sent["text"] == "job retried: its rollback's failed tasks run again"
    assert progress.stages == [list(s) for s in rollback.stages]
    [update] = updates_from(records[at].seq, records[at].subject, records[at].time.isoformat(), records[at].event)
    assert update.fields["state"] == "rolling_back" and update.fields["error"] == rollback.reason
