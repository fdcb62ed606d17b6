"""A failure the provider says no retry can mend (`TaskFailed.permanent`: the cloud refused the
credentials, an unknown image) is not retried: the task has no attempt left, the job stops at once
and its reason says the task was not retried. Other failures keep their attempts."""

from __future__ import annotations

from planner_harness import SIMPLE, Harness, demo_catalog

from contracts.commands import Accepted, AddServices, CreateCluster, RetryJob
from contracts.events import JobNeedsAttention, JobRolledBack, JobSucceeded
from contracts.tasks import TaskMessage


async def test_a_refused_create_is_not_retried_and_the_reason_says_so(h: Harness) -> None:
    h.behaviour = lambda m: "refuse" if m.action.value == "create" and m.node.id == "n1000" else "succeed"
    reply = await h.send(CreateCluster(name="refused", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack), h.history(reply.job_id)
    assert final.reason == ("task n1000.create failed, not retried: its plugin says a retry cannot succeed: "
                            "simulated refusal")
    creates = [(m.task_id, m.attempt) for m in h.queue.messages if m.task_id == "n1000.create"]
    assert creates == [("n1000.create", 1)]
    [failed] = [e for e in h.events(reply.job_id, "TaskAttemptFailed") if e.task_id == "n1000.create"]
    assert failed.permanent and failed.v == 5
    # n1001 was made, and the rollback deletes it; n1000 made nothing
    assert [t.id for t in h.events(reply.job_id, "RollbackPlanned")[0].tasks] == ["undo.n1001.delete"]


async def test_a_transient_failure_keeps_its_attempts(h: Harness) -> None:
    h.behaviour = lambda m: "fail" if m.action.value == "create" and m.node.id == "n1000" and m.attempt < 3 else "succeed"
    reply = await h.send(CreateCluster(name="flaky", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert [m.attempt for m in h.queue.messages if m.task_id == "n1000.create"] == [1, 2, 3]


async def test_a_refusal_after_transient_failures_stops_there() -> None:
    h = Harness()
    h.behaviour = lambda m: ("fail" if m.attempt == 1 else "refuse") if m.action.value == "create" and m.node.id == "n1000" \
        else "succeed"
    reply = await h.send(CreateCluster(name="mixed", template="hadoop-small", nodes=2))
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack) and final.reason.startswith(
        "task n1000.create failed 2 times, not retried: its plugin says a retry cannot succeed")
    assert [m.attempt for m in h.queue.messages if m.task_id == "n1000.create"] == [1, 2]


async def test_a_refused_rollback_task_needs_attention_at_once_and_a_retry_tries_it_again() -> None:
    h = Harness(catalog=demo_catalog(flaky=SIMPLE))
    cid = await h.cluster_of(2)

    def refused_remove(m: TaskMessage) -> str:
        if m.action.value == "install" and m.service is not None and m.service.name == "flaky" and m.node.id == "n1001":
            return "fail"
        return "refuse" if m.action.value == "remove" else "succeed"

    h.behaviour = refused_remove
    reply = await h.send(AddServices(cluster_id=cid, services=["flaky"]))
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobNeedsAttention) and final.reason.startswith(
        "rollback failed: task undo.n1000.remove.flaky failed, not retried: its plugin says a retry cannot succeed")
    assert [m.attempt for m in h.queue.messages if m.task_id == "undo.n1000.remove.flaky"] == [1]
    h.behaviour = lambda m: "succeed"  # the credentials are mended: a retry gives the task fresh attempts
    assert isinstance(await h.send(RetryJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
