"""The task queue lives in memory (docs/decisions/0013): when a restarted server lost it, the
planner publishes again, from the log, every attempt its open jobs have queued and nobody
claimed; a claimed one runs on and reports through the log."""

from __future__ import annotations

from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import JobSucceeded, TaskSucceeded
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryTaskQueue


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
    h.held.clear()
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.requeue_lost()
    assert {(m.task_id, m.attempt) for m in h.queue.messages} == waiting

    # The claimed create finishes on its provisioner and reports; the rest runs from the new queue.
    key = f"{reply.job_id}.{running}.1"
    await h.log.append(subjects.task_events("default", reply.job_id, running, "prov-fake"), [Append(TaskSucceeded(
        job_id=reply.job_id, task_id=running, attempt=1, provisioner="prov-fake", worker="w1",
        result={"providerid": "sim-n1000-1"}), msg_id=f"{key}.outcome")])
    h.behaviour = lambda m: "succeed"
    await h.settle()
    assert isinstance(h.final(reply.job_id), JobSucceeded)
    assert {e.attempt for e in h.events(reply.job_id, "TaskQueued")} == {1}  # no attempt had to time out


async def test_a_planner_with_nothing_queued_publishes_nothing(h: Harness) -> None:
    await h.cluster_of(nodes=2)
    h.queue = h.planner.execution.queue = MemoryTaskQueue()
    await h.planner.requeue_lost()
    assert h.queue.messages == []
