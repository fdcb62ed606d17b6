"""The saga, executed on fakes: retries, cleanup before a create is tried again, timeouts on a
clock that moves only when told, rollback, needs_attention, lost publishes and lost acks."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest
from planner_harness import SIMPLE, Behaviour, Harness, demo_catalog, steps_of

from contracts.commands import Accepted, AddServices, CancelJob, CreateCluster, PauseJob, Rejected
from contracts.events import JobNeedsAttention, JobRolledBack, JobSucceeded
from contracts.tasks import TaskMessage
from muster.readmodel.jobs import job_view
from services.planner.app import PlannerConfig
from services.planner.domain import saga, segments
from services.planner.execution import REPUBLISH_QUEUED_EVERY_S, STALE_WAIT_S, UNSENT_CHECK_S


def _is(m: TaskMessage, action: str, service: str | None = None, node: str | None = None) -> bool:
    return (m.action.value == action and (service is None or (m.service is not None and m.service.name == service))
            and (node is None or m.node.id == node))


def _fail_first(pred: Any) -> Any:
    """A behaviour: attempt 1 of the tasks matching `pred` fails, everything else succeeds."""
    return lambda m: "fail" if pred(m) and m.attempt == 1 else "succeed"


async def test_a_failed_attempt_is_retried_on_another_provisioner_where_possible(h: Harness) -> None:
    h.behaviour = _fail_first(lambda m: _is(m, "install", "base"))
    reply = await h.send(CreateCluster(name="retry", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    retried = [m for m in h.sent() if _is(m, "install", "base") and m.attempt == 2]
    assert len(retried) == 2 and all(m.avoid == ["prov-fake"] for m in retried)
    assert len(h.failures(reply.job_id)) == 2


async def test_a_failed_confirm_deletes_the_machine_before_creating_it_again(h: Harness) -> None:
    h.behaviour = _fail_first(lambda m: _is(m, "confirm", node="n1000"))
    reply = await h.send(CreateCluster(name="cleanup", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    # What ran there, in order (its claims: a segment's message carries steps a failure stops).
    on_node = [(t, a) for t, a in h.claimed(reply.job_id) if t.startswith("n1000.")][:5]
    assert on_node == [("n1000.create", 1), ("n1000.confirm", 1), ("n1000.cleanup1", 1), ("n1000.create", 2), ("n1000.confirm", 2)]
    cleanup = next(m for m in h.sent() if m.task_id == "n1000.cleanup1")
    assert cleanup.action.value == "delete" and cleanup.results["providerid"] == "sim-n1000-1"  # the machine it deletes
    assert h.events(reply.job_id, "CleanupQueued")[0].for_task == "n1000.confirm"


async def test_a_create_that_lost_its_answer_is_deleted_by_the_rollback(h: Harness) -> None:
    """n1000's creates reach the cloud and lose the answer (the endpoint went away mid-create):
    the rollback deletes n1000 too, with no providerid. n1001's plain failures made nothing."""
    h.behaviour = lambda m: "lose" if _is(m, "create", node="n1000") and m.attempt == 1 else \
        "fail" if _is(m, "create") else "succeed"
    reply = await h.send(CreateCluster(name="lost", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert [e.may_have_made for e in h.events(reply.job_id, "TaskAttemptFailed") if e.task_id == "n1000.create"] == [True, False, False]
    [rollback] = h.events(reply.job_id, "RollbackPlanned")
    assert [t.id for t in rollback.tasks] == ["undo.n1000.delete"]
    [delete] = [m for m in h.queue.messages if m.task_id == "undo.n1000.delete"]
    assert delete.action.value == "delete" and not delete.results.get("providerid")


async def test_a_failed_cleanup_is_deleted_again(h: Harness) -> None:
    h.behaviour = _fail_first(lambda m: _is(m, "confirm", node="n1000") or m.task_id == "n1000.cleanup1")
    reply = await h.send(CreateCluster(name="cleanup2", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert [m.attempt for m in h.queue.messages if m.task_id == "n1000.cleanup1"] == [1, 2]


async def test_a_silent_worker_times_out_and_its_late_result_changes_nothing() -> None:
    h = Harness(config=PlannerConfig(instance="planner-test", task_timeout_s=1.5, max_attempts=2), catalog=demo_catalog(slow=SIMPLE))
    created = await h.cluster_of(2)
    h.behaviour = lambda m: "silent" if _is(m, "install", "slow") else "succeed"
    reply = await h.send(AddServices(cluster_id=created, services=["slow"]))
    assert isinstance(reply, Accepted)
    await h.settle()
    await h.clock.advance(1.4)
    assert "TaskAttemptFailed" not in h.history(reply.job_id)  # not yet
    await h.clock.advance(0.2)  # attempt 1 times out; attempt 2 is queued
    await h.settle()
    await h.clock.advance(1.5)  # so does attempt 2: out of attempts, the job rolls back
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobRolledBack) and "failed 2 times" in final.reason
    timeouts = [e for e in h.events(reply.job_id, "TaskAttemptFailed") if e.state == "timed_out"]
    assert {e.attempt for e in timeouts} == {1, 2} and "within 1.5s" in timeouts[0].error
    install = timeouts[0].task_id
    # A task state of its own, in the owner's view and in the read model's fold of the log.
    shown = {t["id"]: t["state"] for t in h.job(reply.job_id).view()["tasks"]}
    assert {t for t, s in shown.items() if s == "timed_out"} == {e.task_id for e in timeouts}
    fold = job_view(r for r in h.job_records(reply.job_id))
    assert fold == h.job(reply.job_id).view()
    # The slow worker does finish attempt 1, after the job ended: its result changes nothing.
    late = next(m for m in h.sent() if m.task_id == install and m.attempt == 1)
    await h.work(late, "succeed")
    await h.settle()
    assert h.job(reply.job_id).state == "rolled_back"
    assert "slow" not in {s for n in h.cluster(created).nodes.values() for s in n.services}
    assert not h.planner.timers.handles  # every timeout disarmed or fired


@pytest.mark.parametrize("behaviour", ["hold", "silent"])
async def test_a_timed_out_attempt_leaves_the_queue_metrics(behaviour: Behaviour) -> None:
    """An attempt that timed out, whether nobody claimed it (`hold`) or its provisioner went
    silent, is waited for no more: out of the backlog and of the work in progress, so the
    autoscaler does not keep asking workers for it."""
    h = Harness(config=PlannerConfig(instance="planner-test", task_timeout_s=1.5, max_attempts=1), catalog=demo_catalog(slow=SIMPLE))
    created = await h.cluster_of(2)
    h.behaviour = lambda m: behaviour if _is(m, "install", "slow") else "succeed"
    reply = await h.send(AddServices(cluster_id=created, services=["slow"]))
    await h.settle()
    [queue] = [q for q in h.planner.metrics.snapshot(h.clock.now()) if q["queue_length"] or q["in_progress"]]
    assert queue["queue_length" if behaviour == "hold" else "in_progress"] == 2  # the two installs, waited for
    await h.clock.advance(1.6)  # it times out; out of attempts, the job rolls back
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    assert all(q["queue_length"] == 0 and q["in_progress"] == 0 for q in h.planner.metrics.snapshot(h.clock.now()))


async def test_the_tasks_a_cancel_keeps_from_running_are_cancelled(h: Harness) -> None:
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="c", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(await h.send(CancelJob(job_id=reply.job_id)), Accepted)
    # Nobody had claimed the queued creates: they are cancelled too (their claims are closed),
    # and the job ends at once, with nothing to undo (decision 46).
    assert isinstance(h.final(reply.job_id), JobRolledBack)
    h.behaviour = lambda m: "succeed"
    await h.release()
    assert {m.task_id for m in h.refused} == {"n1000.create", "n1001.create"}
    view = h.job(reply.job_id).view()
    states = {t["id"]: t["state"] for t in view["tasks"]}
    assert set(states.values()) == {"cancelled"} and view["counts"]["cancelled"] == len(states)
    fold = job_view(r for r in h.job_records(reply.job_id))
    assert fold == view


async def test_an_outcome_disarms_its_timeout(h: Harness) -> None:
    await h.cluster_of(2)
    assert h.planner.timers.armed("timeout") == [] and h.clock.pending == 0


async def test_a_rollback_that_fails_too_needs_attention() -> None:
    h = Harness(catalog=demo_catalog(flaky=SIMPLE))
    cid = await h.cluster_of(2)
    # Install fails on one node only, so the other node's install succeeded and must be undone;
    # the undo (remove) fails too.
    h.behaviour = lambda m: "fail" if (_is(m, "install", "flaky", "n1001") or _is(m, "remove", "flaky")) else "succeed"
    reply = await h.send(AddServices(cluster_id=cid, services=["flaky"]))
    await h.settle()
    final = h.final(reply.job_id)
    assert isinstance(final, JobNeedsAttention), h.history(reply.job_id)
    assert final.reason.startswith("rollback failed: task undo.") and "failed 3 times" in final.reason
    assert h.cluster(cid).status == "needs_attention" and h.job(reply.job_id).is_final
    assert "RollbackPlanned" in h.history(reply.job_id)


async def test_a_failed_publish_is_made_again_from_a_timer(h: Harness) -> None:
    h.queue.fail(lambda m: _is(m, "install"), TimeoutError("simulated: no stream response"), times=2)
    reply = await h.send(CreateCluster(name="lossy", template="hadoop-small", nodes=2))
    await h.settle()
    assert h.final(reply.job_id) is None  # stalled: two installs are queued in the log, not in the queue
    assert len(h.planner.timers.armed("republish")) == 2
    await h.clock.advance(0.25)  # the first back-off
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert all(a == 1 for a in (m.attempt for m in h.queue.messages))  # repaired, not retried


async def test_a_redelivered_outcome_republishes_what_its_first_delivery_queued(h: Harness) -> None:
    """As in a server failover: TaskQueued recorded, its publish lost; the outcome that led to it
    is delivered again, changes nothing, and the job's queued attempts go out again."""
    h.queue.fail(lambda m: _is(m, "install"), TimeoutError("lost"), times=1)
    reply = await h.send(CreateCluster(name="lossy", template="hadoop-small", nodes=2))
    await h.settle()
    lost = next(t for t, s in h.job(reply.job_id).task_state.items() if s == "queued" and ".install." in t)
    node = lost.split(".")[0]
    trigger = [r for r in h.log.records if r.type == "TaskSucceeded" and r.event.task_id.startswith(f"{node}.")][-1]
    h.planner.timers.cancel_all()  # no timer repairs it this time
    await h.deliver(trigger)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert all(r.event.attempt == 1 for r in h.log.records if r.type == "TaskQueued")


async def test_redelivered_outcomes_republish_a_job_s_queued_attempts_at_most_once_a_while(h: Harness) -> None:
    """A planner slow to ack gets an outcome redelivered again and again; each asks for the job's
    queued attempts to go out again, and at 10,000 nodes that is thousands of publishes each."""
    h.behaviour = lambda m: "succeed" if m.action.value == "create" else "hold"
    reply = await h.send(CreateCluster(name="slow-acks", template="hadoop-small", nodes=3))
    await h.settle()
    queued = saga.queued_attempts(h.job(reply.job_id))
    assert len(queued) > 1
    trigger = [r for r in h.log.records if r.type == "TaskSucceeded"][-1]
    before = h.queue.published
    await h.deliver(trigger)
    # One message per queued attempt, or per segment (a follower goes in its head's message).
    messages = len(segments.groups(h.job(reply.job_id), [a.task_id for a in queued]))
    assert h.queue.published == before + messages  # the first redelivery repairs
    for _ in range(5):
        await h.deliver(trigger)
    assert h.queue.published == before + messages  # the next ones, soon after, do not repeat it
    await h.clock.advance(REPUBLISH_QUEUED_EVERY_S)
    await h.deliver(trigger)
    assert h.queue.published == before + 2 * messages


async def _failed_delivery(h: Harness) -> Any:
    """Settle until the injected fault fails a handler (a timeout); the event it was given."""
    with pytest.raises(TimeoutError):
        await h.settle()
    return h.log.records[h.cursor - 1]


async def test_a_lost_ack_reloads_the_log_s_view_and_the_redelivery_changes_nothing_twice(h: Harness) -> None:
    # The append of one TaskCompleted lands, but its ack is lost: the handler fails.
    h.log.inject(lambda subject, items: any(i.event.type == "TaskCompleted" for i in items), TimeoutError("ack lost"), lands=True)
    reply = await h.send(CreateCluster(name="acks", template="hadoop-small", nodes=2))
    failed_delivery = await _failed_delivery(h)
    await h.deliver(failed_delivery)  # the consumer delivers it again
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    completed = [e.task_id for e in h.events(reply.job_id, "TaskCompleted")]
    assert len(completed) == len(set(completed))  # recorded once


async def test_an_outcome_recorded_without_its_successor_queues_it_when_it_comes_again(h: Harness) -> None:
    # A lone outcome's save is a chain (execution.CHAINED_OUTCOMES): its TaskCompleted lands,
    # the link queueing the next task is lost (a timeout, nothing stored). The log holds the
    # outcome and not what it let go; the outcome, delivered again, is a duplicate, and the
    # job's step must still queue the successor, or the job waits for good.
    reply = await h.send(CreateCluster(name="cut", template="hadoop-small", nodes=2))

    def alone(subject: str, items: Sequence[Any]) -> bool:
        """The link queueing the one task the job would then have in flight: no other outcome
        is on its way to take the job a step further."""
        queued = [t for t, state in h.planner.state.jobs[reply.job_id].task_state.items() if state == "queued"]
        return [i.event.type for i in items] == ["TaskQueued"] and subject.endswith(".tasks") and len(queued) == 1

    h.log.inject(alone, TimeoutError("lost"))
    failed_delivery = await _failed_delivery(h)
    assert failed_delivery.type == "TaskSucceeded"
    job = h.planner.state.jobs[reply.job_id]
    assert job.task_state[failed_delivery.event.task_id] == "succeeded"  # the prefix: recorded, nothing after it
    await h.deliver(failed_delivery)  # the consumer delivers it again
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    queued = [(e.task_id, e.attempt) for e in h.events(reply.job_id, "TaskQueued")]
    assert len(queued) == len(set(queued))  # nothing queued twice
    assert len({m.task_id for m in h.sent()}) == len(h.job(reply.job_id).tasks)


async def test_a_copy_the_log_could_not_correct_is_not_acted_on_until_it_can(h: Harness) -> None:
    """As in a partition (test-long's compose topology, nats-2 split off): an outcome's append is
    refused, and the log cannot be read to take its view. The copy in memory holds what was
    never stored (the outcome taken, its successors queued). Its redelivery must neither
    publish tasks the log never queued nor pass as a duplicate (acked, the outcome lost for
    good: the job waited for a timeout): it fails until the log can be read again."""
    reply = await h.send(CreateCluster(name="split", template="hadoop-small", nodes=2))
    unavailable = TimeoutError("nats: JetStream system temporarily unavailable")

    def split(subject: str, items: Sequence[Any]) -> bool:
        if any(i.event.type == "TaskCompleted" for i in items):
            h.log.unreadable = unavailable  # (the reload after the failed save fails too)
            return True
        return False

    h.log.inject(split, unavailable)
    failed_delivery = await _failed_delivery(h)
    for _ in range(2):
        with pytest.raises(TimeoutError):
            await h.deliver(failed_delivery)  # redelivered while split: not taken, not acked
    answer = await h.send(PauseJob(job_id=reply.job_id))
    assert isinstance(answer, Rejected) and answer.retry  # "send it again", not decided on the stale copy
    await h.clock.advance(h.config.task_timeout_s + 1)  # timeouts fall due: they wait
    queued = {(e.task_id, e.attempt) for e in h.events(reply.job_id, "TaskQueued")}
    assert {(m.task_id, m.attempt) for m in h.queue.messages} <= queued  # nothing the log never queued
    assert not h.events(reply.job_id, "TaskAttemptFailed")
    h.log.unreadable = None  # healed
    await h.deliver(failed_delivery)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    completed = [e.task_id for e in h.events(reply.job_id, "TaskCompleted")]
    assert len(completed) == len(set(completed))


async def test_a_timeout_of_a_stale_copy_waits_for_the_log_then_is_taken(h: Harness) -> None:
    """A timeout falling due while the job's copy is stale and the log unreadable was decided on
    the copy: its save refused, the timer spent, and the attempt, silent for good, never timed
    out again once the log came back."""
    h.behaviour = lambda m: "silent"
    reply = await h.send(CreateCluster(name="mute", template="hadoop-small", nodes=2))
    await h.settle()
    unavailable = TimeoutError("nats: JetStream system temporarily unavailable")

    def split(subject: str, items: Sequence[Any]) -> bool:
        if any(i.event.type == "JobPaused" for i in items):
            h.log.unreadable = unavailable
            return True
        return False

    h.log.inject(split, unavailable)
    answer = await h.send(PauseJob(job_id=reply.job_id))
    assert isinstance(answer, Rejected) and answer.retry
    await h.clock.advance(h.config.task_timeout_s + 1)
    assert not h.events(reply.job_id, "TaskAttemptFailed")
    h.log.unreadable = None
    await h.clock.advance(STALE_WAIT_S)
    assert h.events(reply.job_id, "TaskAttemptFailed")  # timed out, on the log's view


async def test_an_outcome_s_save_is_a_chain_and_a_failure_s_is_atomic(h: Harness) -> None:
    h.behaviour = _fail_first(lambda m: _is(m, "install", "base"))
    chains: list[list[str]] = []
    batches: list[list[str]] = []
    chain, fenced = h.log.append_chain, h.log.append_fenced

    async def watch_chain(parts: Sequence[Any]) -> Any:
        chains.append([a.event.type for _, items, _ in parts for a in items])
        return await chain(parts)

    async def watch_fenced(entries: Sequence[Any], *args: Any, **kw: Any) -> Any:
        batches.append([a.event.type for _, a in entries])
        return await fenced(entries, *args, **kw)

    h.log.append_chain, h.log.append_fenced = watch_chain, watch_fenced
    reply = await h.send(CreateCluster(name="shape", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert ["TasksRecorded", "TaskCompleted", "TaskQueued"] in chains
    assert all(set(c) <= {"TasksRecorded", "TaskCompleted", "TaskQueued", "NodeResultsRecorded", "ServiceStateObserved"}
               for c in chains)
    assert any("TaskAttemptFailed" in b for b in batches)  # a failure and its retry: all or nothing


async def test_a_stale_writer_is_refused_and_takes_the_log_s_view(h: Harness) -> None:
    from muster.ports.eventlog import ConcurrencyError

    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="stale", template="hadoop-small", nodes=2))
    await h.settle()
    stale = h.job(reply.job_id)
    # Another writer moves the job on (here: a second planner instance pausing it).
    other = Harness(log=h.log, catalog=h.catalogs.by_tenant["default"])
    await other.planner.resume()
    assert isinstance(await other.send(PauseJob(job_id=reply.job_id)), Accepted)
    h.behaviour = lambda m: "succeed"
    held = h.held.pop(0)
    await h.work(held, "succeed")
    try:
        await h.settle()
        raise AssertionError("a stale write went through")
    except ConcurrencyError:
        pass
    fresh = h.job(reply.job_id)
    assert fresh is not stale and fresh.paused  # the log's view, with the other writer's pause


class HoldCreatesUntilGranted:
    """A dispatch policy as resource pools would use it: no create before a grant."""

    def __init__(self) -> None:
        self.granted: set[str] = set()

    def admit(self, job: Any, cluster: Any, ready: Sequence[str]) -> Sequence[str]:
        return [t for t in ready if str(job.id) in self.granted or not t.endswith(".create")]


async def test_a_dispatch_policy_holds_tasks_back_until_nudged() -> None:
    policy = HoldCreatesUntilGranted()
    h = Harness(dispatch=policy)
    reply = await h.send(CreateCluster(name="pooled", template="hadoop-small", nodes=2))
    await h.settle()
    assert h.job(reply.job_id).planned and h.queue.messages == [] and "TaskQueued" not in h.history(reply.job_id)
    policy.granted.add(reply.job_id)
    await h.planner.nudge(reply.job_id)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)


def _watch_publishes(h: Harness) -> tuple[list[int], list[str], list[int]]:
    """The size of each publish of the planner (in messages), the tasks published before their
    `TaskQueued` was in the log (none, ever: a segment's steps too), and how many `TaskQueued`
    the log held at each publish."""
    publish_many = h.queue.publish_many
    sizes: list[int] = []
    early: list[str] = []
    logged_at: list[int] = []

    async def checked(messages: Sequence[TaskMessage]) -> list[BaseException | None]:
        logged = {(r.event.task_id, r.event.attempt) for r in h.log.records if r.type == "TaskQueued"}
        early.extend(m.task_id for m in messages for m in steps_of(m) if (m.task_id, m.attempt) not in logged)
        sizes.append(len(messages))
        logged_at.append(len(logged))
        return await publish_many(messages)

    h.queue.publish_many = checked
    return sizes, early, logged_at


async def test_a_wave_larger_than_one_append_is_published_part_by_part_each_after_its_own_record(h: Harness) -> None:
    """A wave of more attempts than one atomic append takes is recorded in parts, and each
    part's tasks are published once that part is in the log: never a task before its
    `TaskQueued`."""
    h.planner.state.part = 4
    sizes, early, logged_at = _watch_publishes(h)
    reply = await h.send(CreateCluster(name="wide", template="hadoop-small", nodes=10))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert early == []
    # The first wave (the 10 creates; with segments, each with its node's followers) went out
    # part by part: a publish for each part that made attempts whole (a segment is whole once
    # its last step's part is in), none larger than a part (one message a segment).
    claimed = next(i for i, r in enumerate(h.log.records) if r.type == "TaskClaimed")
    wave = sum(1 for r in h.log.records[:claimed] if r.type == "TaskQueued")
    assert logged_at.count(wave) >= 3 and max(sizes) <= 4
    assert {(m.task_id, m.attempt) for m in h.sent()} == {
        (r.event.task_id, r.event.attempt) for r in h.log.records if r.type == "TaskQueued"}


async def test_a_part_of_a_wave_refused_by_the_log_is_not_published(h: Harness) -> None:
    h.planner.state.part = 4
    _, early, _ = _watch_publishes(h)
    parts = iter(range(100))
    h.log.inject(lambda subject, items: all(i.event.type in ("TaskQueued", "TasksRecorded") for i in items)
                 and next(parts) == 1,
                 ConnectionError("simulated: the second part is lost"))
    reply = await h.send(CreateCluster(name="wide", template="hadoop-small", nodes=10))
    with pytest.raises(ConnectionError):
        await h.settle()
    published = {m.task_id for m in h.queue.messages}
    assert 0 < len(published) < 10 and early == []  # the parts before the lost one went out
    await h.deliver(h.log.records[h.cursor - 1])  # the consumer delivers it again
    await h.settle()
    # With segments, one the lost part cut (its first steps stored, the rest not) goes out with
    # the check after a failed save (`send_unsent`), from its first step: decided again, the
    # node is busy with it, and its steps follow as the next segment.
    await h.clock.advance(UNSENT_CHECK_S)
    await h.settle()
    assert early == []
    queued = [(r.event.task_id, r.event.attempt) for r in h.log.records if r.type == "TaskQueued"]
    assert len(queued) == len(set(queued))  # the lost part was decided again, not recorded twice
    assert isinstance(h.final(reply.job_id), JobSucceeded)


async def test_an_attempt_queued_by_a_save_whose_ack_was_lost_goes_out_though_redeliveries_were_just_republished() -> None:
    """test-long's compose topology, the EVENTS leader split off (session 19): a job stopped with
    outcomes recorded and nothing after them for 180 s, and no timeout either. An outcome's save
    (its TaskCompleted and the successor's TaskQueued, one atomic batch on a replicated log)
    landed and its ack was lost; the log's view was taken, holding the successor queued, and the
    handler failed before publishing it. The outcome delivered again was a duplicate, whose
    republish of the job's queued attempts is throttled (REPUBLISH_QUEUED_EVERY_S) and had just
    been spent on an earlier redelivery: the successor was never published, nor its timeout
    armed (it is armed with the publish), and nothing else would ever send it."""
    h = Harness(PlannerConfig(instance="planner-test", replicas=3))  # atomic saves, as on the compose topology
    h.behaviour = lambda m: "succeed" if m.action.value == "create" else "hold"
    reply = await h.send(CreateCluster(name="split", template="hadoop-small", nodes=3))
    await h.settle()
    created = [r for r in h.log.records if r.type == "TaskSucceeded"][-1]
    await h.deliver(created)  # an outcome delivered again (a slow ack in the partition): the republish is spent
    lost = _lose_the_ack_of_a_save_that_queues(h, TimeoutError("ack lost"))
    h.behaviour = lambda m: "succeed"
    with pytest.raises(TimeoutError):
        await h.release()
    failed_delivery = h.log.records[h.cursor - 1]
    assert failed_delivery.type == "TaskSucceeded"
    await h.deliver(failed_delivery)  # a duplicate now: acked
    await h.settle()
    job = h.job(reply.job_id)
    assert h.final(reply.job_id) is None
    assert lost and all(job.task_state[t] == "queued" for t, _ in lost)  # in the log: the rest of the job waits on them ...
    assert not [m for m in h.sent() if (m.task_id, m.attempt) in lost]  # ... and they never went out
    await h.clock.advance(UNSENT_CHECK_S)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded), h.history(reply.job_id)[-4:]
    queued = [(e.task_id, e.attempt) for e in h.events(reply.job_id, "TaskQueued")]
    assert len(queued) == len(set(queued)) and all(a == 1 for _, a in queued)  # sent, not retried


def _lose_the_ack_of_a_save_that_queues(h: Harness, error: BaseException, then: Any = None) -> list[tuple[str, int]]:
    """The next outcome's save that queues attempts lands and raises `error` (`then()` first);
    the attempts it queued (filled in then). One by one, a successor; with segments (docs/
    decisions/0058), the heads a node's segment's end lets go: its followers went with it."""
    lost: list[tuple[str, int]] = []

    def queues(subject: str, items: Sequence[Any]) -> bool:
        if not any(i.event.type == "TaskCompleted" for i in items) or not any(i.event.type == "TaskQueued" for i in items):
            return False
        lost.extend((i.event.task_id, i.event.attempt) for i in items if i.event.type == "TaskQueued")
        if then is not None:
            then()
        return True

    h.log.inject(queues, error, lands=True)
    return lost


@pytest.mark.parametrize("lands", [False, True], ids=["refused", "ack-lost"])
async def test_a_timeout_whose_save_failed_is_decided_again_and_what_it_queued_goes_out(h: Harness, lands: bool) -> None:
    """A timeout's save fails (the log away, or its ack lost): its timer is spent, and no event
    comes again to take it up. Refused, the attempt is still current in the log and would never
    time out; landed, the retry it queued would never go out nor time out."""
    h.behaviour = lambda m: "silent" if _is(m, "create", node="n1000") and m.attempt == 1 else "succeed"
    reply = await h.send(CreateCluster(name="mute", template="hadoop-small", nodes=2))
    await h.settle()
    h.log.inject(lambda subject, items: any(i.event.type == "TaskAttemptFailed" for i in items),
                 TimeoutError("nats: timeout"), lands=lands)
    with contextlib.suppress(TimeoutError):  # (a timer's error goes nowhere: the asyncio clock's task)
        await h.clock.advance(h.config.task_timeout_s + 1)
    await h.settle()
    await h.clock.advance(STALE_WAIT_S)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded), h.history(reply.job_id)[-4:]
    assert [e.attempt for e in h.failures(reply.job_id)] == [1]


async def test_an_outcome_whose_save_was_refused_keeps_its_attempt_s_timeout_and_is_not_sent_again(h: Harness) -> None:
    """The check after a failed save sends only what was never sent from here (no timeout armed):
    an attempt whose outcome came and could not be recorded ran already, and a second message of
    it, once the queue's de-duplication window has passed, would run it twice (a second machine)."""
    reply = await h.send(CreateCluster(name="refused", template="hadoop-small", nodes=2))
    h.log.inject(lambda subject, items: any(i.event.type == "TaskCompleted" for i in items), TimeoutError("refused"))
    failed_delivery = await _failed_delivery(h)
    task = (reply.job_id, failed_delivery.event.task_id, failed_delivery.event.attempt)
    assert ("timeout", *task) in h.planner.timers.handles  # still the net while the outcome is not recorded
    before = h.queue.published
    await h.clock.advance(UNSENT_CHECK_S)
    assert h.queue.published == before  # nothing sent again
    await h.deliver(failed_delivery)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)


async def test_the_check_after_a_landed_save_waits_for_a_log_that_cannot_be_read() -> None:
    """The landed save of `test_an_attempt_queued_by_a_save_whose_ack_was_lost_...`, with the log
    unreadable after it (a partition): the copy is stale, and the check waits for the log, then
    sends what the save queued."""
    h = Harness(PlannerConfig(instance="planner-test", replicas=3))
    h.behaviour = lambda m: "succeed" if m.action.value == "create" else "hold"
    reply = await h.send(CreateCluster(name="split", template="hadoop-small", nodes=3))
    await h.settle()
    await h.deliver([r for r in h.log.records if r.type == "TaskSucceeded"][-1])  # the republish is spent
    unavailable = TimeoutError("nats: JetStream system temporarily unavailable")

    def split() -> None:
        h.log.unreadable = unavailable

    _lose_the_ack_of_a_save_that_queues(h, unavailable, then=split)
    h.behaviour = lambda m: "succeed"
    with pytest.raises(TimeoutError):
        await h.release()
    failed_delivery = h.log.records[h.cursor - 1]
    await h.clock.advance(UNSENT_CHECK_S)  # the log still unreadable: the check waits
    h.log.unreadable = None
    await h.deliver(failed_delivery)  # a duplicate on the log's view
    await h.settle()
    assert h.final(reply.job_id) is None
    await h.clock.advance(STALE_WAIT_S)
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded), h.history(reply.job_id)[-4:]


async def test_a_wave_s_node_results_are_saved_in_the_wave_s_own_store() -> None:
    """Decision 45: the cluster's `NodeResultsRecorded` of a wave goes in the atomic batch of the
    wave's records, each fenced on its own subject, not as a store of its own before it."""
    h = Harness(config=PlannerConfig(instance="planner-test", replicas=3))  # (a replicated log: no chains)
    alone: list[list[str]] = []
    together: list[list[str]] = []
    append, fenced = h.log.append, h.log.append_fenced

    async def watch_append(subject: str, items: Sequence[Any], *args: Any, **kw: Any) -> Any:
        if ".cluster." in subject:
            alone.append([a.event.type for a in items])
        return await append(subject, items, *args, **kw)

    async def watch_fenced(entries: Sequence[Any], *args: Any, **kw: Any) -> Any:
        together.append([a.event.type for _, a in entries])
        return await fenced(entries, *args, **kw)

    h.log.append, h.log.append_fenced = watch_append, watch_fenced
    reply = await h.send(CreateCluster(name="results", template="hadoop-small", nodes=2))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert not any("NodeResultsRecorded" in types for types in alone)
    assert any(types[0] == "NodeResultsRecorded" and "TaskCompleted" in types for types in together)
