"""A cancel closes its job's claims (docs/decisions/0046): the attempts nobody claimed before the
fence end at once and can never run; a claim that got in before it runs to its end and is undone."""

from __future__ import annotations

from typing import Any

import pytest
from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CancelJob, CreateCluster, PauseJob, RetryJob
from contracts.events import JobRolledBack, TaskClaimed, TaskFailed, TaskSucceeded
from muster.ports.eventlog import Append, StoreError
from muster.ports.memory import matches
from muster.readmodel.jobs import job_view
from muster.readmodel.timeline import describe
from services.planner import cancels


def _claims(h: Harness, job_id: str) -> list[Any]:
    return [r for r in h.log.records if r.type == "TaskClaimed" and r.event.job_id == job_id]


async def test_a_cancel_ends_at_once_what_nobody_claimed_and_nothing_runs_it_later(h: Harness) -> None:
    h.behaviour = lambda m: "hold"  # no provisioner takes them
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    job = h.job(reply.job_id)
    queued = {t for t, s in job.task_state.items() if s == "queued"}
    waiting = {m.task_id for m in h.held}  # the messages (with segments, each create's carries its node's followers)
    assert waiting == {"n1000.create", "n1001.create"} and {m.task_id for m in h.sent()} == queued
    fence = subjects.claims_closed("default", reply.job_id, 0)
    assert {m.fence for m in h.held} == {fence}

    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    final = h.final(reply.job_id)  # at once: not at the attempts' timeout
    assert isinstance(final, JobRolledBack) and final.reason.startswith("cancelled by ")
    # who cancelled (it said "cancelled by request")
    [asked] = [r.event for r in h.log.records if r.type == "JobCancelRequested" and r.event.job_id == reply.job_id]
    assert final.reason == f"cancelled by {asked.by}" and asked.by != "request"
    [closed] = [r for r in h.log.records if r.subject == fence]
    assert closed.type == "ClaimsClosed" and closed.event.round == 0
    ended = h.events(reply.job_id, "TaskAttemptFailed")
    assert {e.task_id for e in ended} == queued and {e.state for e in ended} == {"cancelled"}
    assert h.events(reply.job_id, "RollbackPlanned")[0].tasks == []  # nothing ran: nothing to undo
    assert h.cluster(job.cluster_id).status == "failed"
    assert not h.planner.timers.armed("timeout")
    [queue] = h.planner.metrics.snapshot(h.clock.now())
    assert queue["queue_length"] == 0 and queue["recommended_workers"] == 0  # no worker wanted for them any more
    view = job.view()
    assert {t["state"] for t in view["tasks"]} == {"cancelled"}
    assert job_view(h.job_records(reply.job_id)) == view
    story = [describe(r.event) for r in h.log.records
             if any(matches(f, r.subject) for f in subjects.job_history_filters("default", reply.job_id))]
    assert any(line.startswith("claims closed") for line in story)  # the job's history shows the fence
    assert sum("cancelled: no provisioner claimed it" in line for line in story) == len(queued)

    # A provisioner frees up and takes the messages still queued: its claims are refused.
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert {m.task_id for m in h.refused} == waiting  # each message's first claim: none of it runs
    assert _claims(h, reply.job_id) == [] and h.history(reply.job_id).count("TaskCompleted") == 0
    assert h.job(reply.job_id).state == "rolled_back"


async def test_a_claim_that_got_in_before_the_fence_runs_to_its_end_and_is_undone(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    # A provisioner claims n1000's create just before the cancel: the claim is in the log, and the
    # planner has not been told of it yet (its consumer is behind).
    [racing] = [m for m in h.held if m.task_id == "n1000.create"]
    h.held.remove(racing)
    subject = subjects.task_events("default", reply.job_id, racing.task_id, "prov-fake")
    claim = TaskClaimed(job_id=reply.job_id, task_id=racing.task_id, attempt=racing.attempt, provisioner="prov-fake", worker="w1")
    # (keyed in another form than this muster's provisioners key claims: the close reads its body)
    await h.log.append(subject, [Append(claim, msg_id="race.claim", only_if_empty=racing.fence)])

    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    job = h.job(reply.job_id)
    assert job.state == "running" and job.task_state["n1000.create"] == "queued"  # waits for the claimed one only
    assert job.task_state["n1001.create"] == "cancelled"

    # Its outcome comes after the cancel: taken, and the rollback deletes what it made.
    done = TaskSucceeded(job_id=reply.job_id, task_id=racing.task_id, attempt=racing.attempt, provisioner="prov-fake",
                         worker="w1", result={"providerid": "sim-n1000"})
    await h.log.append(subject, [Append(done, msg_id="race.outcome")])
    h.behaviour = lambda m: "succeed"
    await h.settle()
    assert [t.id for t in h.events(reply.job_id, "RollbackPlanned")[0].tasks] == ["undo.n1000.delete"]
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert h.job(reply.job_id).task_state["undo.n1000.delete"] == "succeeded"
    await h.release()
    assert {m.task_id for m in h.refused} == {"n1001.create"}


async def test_a_planner_that_stopped_before_closing_has_its_successor_close(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()

    async def stopped(*args: Any) -> None:
        return None

    monkeypatch.setattr(cancels, "close_claims", stopped)
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    assert h.job(reply.job_id).state == "running"  # the cancel recorded, its fence not closed
    monkeypatch.undo()
    await h.restart()
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert {e.state for e in h.events(reply.job_id, "TaskAttemptFailed")} == {"cancelled"}


async def test_a_close_the_log_could_not_take_is_tried_again(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    h.log.unreadable = StoreError("the log is away")
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    assert h.job(reply.job_id).state == "running" and h.planner.timers.armed("claims")
    h.log.unreadable = None
    await h.clock.advance(cancels.RETRY_S + 0.1)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)


async def test_a_retried_job_is_fenced_by_its_next_cancel_only(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    h.held.clear()
    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(RetryJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    job = h.job(reply.job_id)
    assert job.state == "succeeded" and h.refused == []
    fences = {m.fence for m in h.queue.messages if m.attempt > 1}
    assert fences == {subjects.claims_closed("default", reply.job_id, 1)}
    assert all(m.fence is None for m in h.queue.messages if m.task_id.startswith("undo."))


async def test_a_cleanup_nobody_claimed_is_cancelled_and_the_rollback_deletes_its_node(h: Harness) -> None:
    # n1000's confirm fails after its create made a machine: a cleanup delete is queued, and nobody takes it.
    h.behaviour = lambda m: ("fail" if m.task_id == "n1000.confirm" else "hold" if m.task_id.startswith("n1000.cleanup")
                             else "hold" if m.node.id == "n1001" else "succeed")
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    job = h.job(reply.job_id)
    assert job.task_state.get("n1000.cleanup1") == "queued"

    h.behaviour = lambda m: "succeed"
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert job.task_state["n1000.cleanup1"] == "cancelled"
    assert [t.id for t in h.events(reply.job_id, "RollbackPlanned")[0].tasks] == ["undo.n1000.delete"]
    assert isinstance(h.final(reply.job_id), JobRolledBack) and job.task_state["undo.n1000.delete"] == "succeeded"
    await h.release()
    assert {m.task_id for m in h.refused} == {"n1000.cleanup1", "n1001.create"}


async def test_a_claimed_attempt_that_fails_after_the_cancel_is_not_cleaned_up_but_rolled_back(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    [create] = [m for m in h.held if m.task_id == "n1000.create"]
    h.held.remove(create)
    await h.work(create, "succeed")  # made the machine (its outcome not taken in yet: nothing settles)
    await h.settle()
    [confirm] = [m for m in h.held if m.task_id == "n1000.confirm"]
    h.held.remove(confirm)
    await h.work(confirm, "silent")  # claimed before the cancel...
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    subject = subjects.task_events("default", reply.job_id, confirm.task_id, "prov-fake")
    failed = TaskFailed(job_id=reply.job_id, task_id=confirm.task_id, attempt=confirm.attempt, provisioner="prov-fake",
                        worker="w1", error="no address")
    await h.log.append(subject, [Append(failed, msg_id="late.outcome")])  # ...and fails after it
    h.behaviour = lambda m: "succeed"
    await h.settle()
    job = h.job(reply.job_id)
    assert not [t for t in job.tasks if ".cleanup" in t]  # no cleanup under a closed fence
    assert [t.id for t in h.events(reply.job_id, "RollbackPlanned")[0].tasks] == ["undo.n1000.delete"]
    assert isinstance(h.final(reply.job_id), JobRolledBack)


async def test_a_cancel_with_nothing_queued_closes_the_fence_on_a_message_left_in_the_queue(h: Harness) -> None:
    # n1000's first create attempt is never taken; the job is paused, and the attempt times out
    # (no retry while paused): nothing is queued when the cancel comes, but its message still is.
    h.behaviour = lambda m: "hold" if m.task_id == "n1000.create" else "succeed"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(await h.send(PauseJob(job_id=reply.job_id)), Accepted)
    await h.clock.advance(h.config.task_timeout_s + 1)
    await h.settle()
    job = h.job(reply.job_id)
    assert job.task_state["n1000.create"] == "failed" and job.in_flight == 0

    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert [r.type for r in h.log.records if r.subject == subjects.claims_closed("default", reply.job_id, 0)] == ["ClaimsClosed"]
    h.behaviour = lambda m: "succeed"
    await h.release()  # a provisioner takes the old message at last: it is not run
    assert [m.task_id for m in h.refused] == ["n1000.create"] and _claims(h, reply.job_id)
    assert not [r for r in _claims(h, reply.job_id) if r.event.task_id == "n1000.create"]


def test_a_claim_s_key_names_its_attempt_and_a_key_of_another_form_nothing() -> None:
    subject = subjects.task_events("acme", "job-1", "n1000.install.hdfs", "prov-1")
    assert cancels.claim_key("job-1", subject, "job-1.n1000.install.hdfs.3.claim.2") == ("n1000.install.hdfs", 3)
    for odd in (None, "race.claim", "job-1.n1000.install.hdfs.3.claim", "job-1.n1000.install.hdfs.x.claim.1",
                "job-1.n1001.install.hdfs.3.claim.1", "job-2.n1000.install.hdfs.3.claim.1"):
        assert cancels.claim_key("job-1", subject, odd) is None, odd


async def test_the_close_reads_claims_from_their_keys_and_never_decodes_them(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job far along has some 10^5 claims and outcomes, read under the planner's lock: the close
    takes them from their headers (docs/benchmarks.md "A cancel's close")."""
    h.behaviour = lambda m: "hold" if m.task_id == "n1001.create" else "silent"  # n1000's claimed, n1001's not
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    decoded: list[str] = []
    read = h.log.read

    async def counted(subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> Any:
        decoded.append(subject_filter)
        return await read(subject_filter, start_seq, up_to_seq)

    monkeypatch.setattr(h.log, "read", counted)
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    job = h.job(reply.job_id)
    assert job.task_state == {**job.task_state, "n1000.create": "queued", "n1001.create": "cancelled"}
    assert subjects.job_task_outcomes("default", reply.job_id) not in decoded


async def test_a_close_refused_while_nothing_is_on_the_fence_is_not_taken_for_closed() -> None:
    """On a replicated stream the close's own append (expecting the fence empty) is refused while a
    claim on the fence is being replicated (10164), and nothing is there yet. Taken for "closed
    before", the close read the claims up to sequence 0 and ended every queued attempt while
    claims still landed; it is tried again instead (`close_claims` arms the retry)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from muster.ports.eventlog import ConcurrencyError
    from services.planner import cancels

    class Busy:
        async def append(self, subject: str, items: Any, expect_last_seq: int | None = None) -> list[int]:
            raise ConcurrencyError(f"{subject}: wrong last sequence")

        async def last_seq(self, subject: str) -> int:
            return 0

    execution = cast(Any, SimpleNamespace(state=SimpleNamespace(log=Busy())))
    job = cast(Any, SimpleNamespace(cancels=1, tenant="t", id="8f669c0a-421a-5975-81bd-a390cac7827c"))
    with pytest.raises(RuntimeError, match="not closed yet"):
        await cancels._close(execution, job)
