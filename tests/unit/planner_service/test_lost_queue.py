"""The task queue lives in memory (docs/decisions/0013): when a restarted server lost it, the
planner publishes again, from the log, every attempt its open jobs have queued and nobody
claimed, after a grace for claims sent before the restart to land; a claimed one runs on and
reports through the log."""

from __future__ import annotations

from typing import Any

from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded, TaskClaimed, TaskSucceeded
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryTaskQueue
from services.planner.app import REQUEUE_GRACE_S


async def test_the_unclaimed_attempts_go_out_again_and_the_job_finishes(h: Harness) -> None:
    # The first wave (one create per node): one claimed and running, two taken by nobody yet.
    running = "n1000.create"
    h.behaviour = lambda m: "silent" if m.task_id == running else "hold"
    reply = await h.send(CreateCluster(name="outage", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    waiting = {(m.task_id, m.attempt) for m in h.held}
    assert len(waiting) == 2 and running not in {t for t, _ in waiting}

    # The server restarts: the queue comes back empty.
    [claimed] = [m for m in h.queue.messages if m.task_id == running]
    h.held.clear()
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.queue_lost()
    await h.clock.advance(REQUEUE_GRACE_S - 0.1)
    assert h.queue.messages == []
    await h.clock.advance(0.1)
    assert {(m.task_id, m.attempt) for m in h.queue.messages} == waiting

    # The claimed create finishes on its provisioner and reports; the rest runs from the new queue.
    key = f"{reply.job_id}.{running}.1"
    await h.log.append(subjects.task_events("default", reply.job_id, running, "prov-fake"), [Append(TaskSucceeded(
        job_id=reply.job_id, task_id=running, attempt=1, provisioner="prov-fake", worker="w1",
        result={"providerid": "sim-n1000-1"}), msg_id=f"{key}.outcome")])
    h.behaviour = lambda m: "succeed"
    if claimed.then:  # with segments (docs/decisions/0058), it goes on with the rest of its message
        await h.work(claimed.model_copy(update={**dict(claimed.then[0]), "then": claimed.then[1:]}))
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert {e.attempt for e in h.events(reply.job_id, "TaskQueued")} == {1}  # no attempt had to time out


async def test_a_planner_with_nothing_queued_publishes_nothing(h: Harness) -> None:
    await h.cluster_of(nodes=2)
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.requeue_lost()
    assert h.queue.messages == []


async def test_a_claim_in_the_log_that_the_planner_has_not_taken_in_yet_counts(h: Harness) -> None:
    """A provisioner's claim that landed as it reconnected, still on its way to the planner's
    consumer: the attempt is claimed, and is not queued a second time."""
    h.behaviour = lambda m: "hold"
    reply = await h.send(CreateCluster(name="late", template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    [first, second] = sorted(h.held, key=lambda m: m.task_id)
    key = f"{reply.job_id}.{first.task_id}.1"
    await h.log.append(subjects.task_events("default", reply.job_id, first.task_id, "prov-fake"), [Append(TaskClaimed(
        job_id=reply.job_id, task_id=first.task_id, attempt=1, provisioner="prov-fake", worker="w1"), msg_id=f"{key}.claim.1")])
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.requeue_lost()  # before the claim is delivered to the planner
    assert [m.task_id for m in h.queue.messages] == [second.task_id]


class Provisioners:
    """Live provisioners that say what they hold (`Workers.holding`)."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    async def live(self) -> list[Any] | None:
        return None  # no warning: not what this test is about

    async def holding(self) -> set[str] | None:
        return self.held

    async def ended(self, tenant: str, provisioners: set[str]) -> dict[str, int]:
        return {}


async def test_with_the_provisioners_asked_only_what_none_of_them_holds_goes_out_again() -> None:
    """One create runs on a provisioner; one was claimed and let go back to the queue (a task
    claimed ahead that found no free slot), so the restart lost it; one was never taken."""
    h = Harness()
    h.workers = provisioners = Provisioners()
    await h.restart()
    claimed = {"n1000.create", "n1001.create"}
    h.behaviour = lambda m: "silent" if m.task_id in claimed else "hold"
    reply = await h.send(CreateCluster(name="asked", template="hadoop-small", nodes=3))
    assert isinstance(reply, Accepted)
    await h.settle()
    provisioners.held = {f"{reply.job_id}.n1000.create.1"}
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.requeue_lost()
    assert sorted(m.task_id for m in h.queue.messages) == ["n1001.create", "n1002.create"]
