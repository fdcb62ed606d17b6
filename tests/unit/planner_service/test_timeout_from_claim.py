"""An attempt's timeout and the time its message waited in the queue (docs/decisions/0059): an
attempt claimed late (every provisioner of its class busy, or paused) is given the whole timeout
from its claim, not what was left of it when it was queued. On the harness's fakes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from planner_harness import Harness

from contracts import subjects
from contracts.commands import Accepted, CreateCluster
from contracts.events import TaskClaimed
from contracts.records import Append
from services.planner.app import PlannerConfig

TIMEOUT_S = 100.0
CREATE = "n1000.create"


async def _create_held(name: str) -> tuple[Harness, str]:
    """A create whose first attempt waits in the queue (held: nobody has a slot for it)."""
    h = Harness(config=PlannerConfig(instance="p1", segments=False, task_timeout_s=TIMEOUT_S))
    h.behaviour = lambda m: "hold" if (m.task_id, m.attempt) == (CREATE, 1) else "succeed"
    reply = await h.send(CreateCluster(name=name, template="hadoop-small", nodes=2))
    assert isinstance(reply, Accepted)
    await h.settle()
    return h, reply.job_id


def _timed_out(h: Harness, job_id: str) -> list[tuple[str, int]]:
    return [(e.task_id, e.attempt) for e in h.events(job_id, "TaskAttemptFailed") if e.state == "timed_out"]


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after-a-restart"])
async def test_an_attempt_claimed_late_times_out_a_whole_timeout_after_its_claim(restart: bool) -> None:
    """`after-a-restart`: the planner that saw the claim dies; the one rebuilt from the log
    counts from the claim it reads there (timers rebuilt from the log)."""
    h, job_id = await _create_held("late")
    [waiting] = [m for m in h.held if (m.task_id, m.attempt) == (CREATE, 1)]
    h.held.remove(waiting)

    await h.clock.advance(90)  # nobody had a slot for it: 90 s in the queue
    await h.settle()
    await h._work(waiting, "silent")  # claimed now, and running (no outcome yet)
    await h.settle()
    if restart:
        await h.clock.advance(5)
        await h.restart()
        await h.settle()
    await h.clock.advance(15 if restart else 20)  # 110 s after its queueing, 20 s after its claim
    await h.settle()
    assert _timed_out(h, job_id) == []

    await h.clock.advance(TIMEOUT_S - 20 + 1)  # a whole timeout after the claim: silent for it
    await h.settle()
    assert _timed_out(h, job_id) == [(CREATE, 1)]


async def test_a_claim_stamped_by_a_clock_ahead_puts_the_deadline_off_no_further_than_from_when_it_was_seen() -> None:
    """A claim's time is its provisioner's clock (`Muster-Time`): an hour ahead, it is taken as
    when the planner saw it."""
    h, job_id = await _create_held("ahead")
    await h.clock.advance(90)
    subject = subjects.task_events("default", job_id, CREATE, "prov-fake")
    claim = TaskClaimed(job_id=job_id, task_id=CREATE, attempt=1, provisioner="prov-fake", worker="w1")
    await h.log.append(subject, [Append(claim, msg_id=f"{job_id}.{CREATE}.1.claim.1",
                                        time=h.clock.now() + timedelta(hours=1))])
    await h.settle()
    await h.clock.advance(TIMEOUT_S - 1)
    await h.settle()
    assert _timed_out(h, job_id) == []
    await h.clock.advance(2)  # a timeout after the planner saw the claim, not after its stamp
    await h.settle()
    assert _timed_out(h, job_id) == [(CREATE, 1)]


def _closed(h: Harness, job_id: str, task_id: str, attempt: int) -> list[int]:
    subject = subjects.step_closed("default", job_id, task_id, attempt)
    return [r.seq for r in h.log.records if r.subject == subject and r.type == "StepClosed"]


async def test_an_attempt_that_times_out_unclaimed_is_closed_before_its_end() -> None:
    """Its `StepClosed` is stored before the save that ends it: a provisioner that takes its
    message later has its claim refused (its marker expects that subject empty: decision 59)."""
    h, job_id = await _create_held("closed")
    await h.clock.advance(TIMEOUT_S + 1)
    await h.settle()
    assert _timed_out(h, job_id) == [(CREATE, 1)]
    [end] = [r.seq for r in h.job_records(job_id) if r.type == "TaskAttemptFailed" and r.event.task_id == CREATE]
    assert [seq for seq in _closed(h, job_id, CREATE, 1) if seq < end] != []


async def test_a_claim_stored_before_the_deadline_and_not_yet_taken_moves_it_instead_of_failing_the_attempt() -> None:
    """Part 1's race: the claim is in the log a second before the deadline, the planner's consumer
    has not delivered it. The timeout closes the attempt, reads its claims up to the close, finds
    it, and counts the deadline from it: the attempt runs on, and ends a whole timeout after its
    claim if its provisioner stays silent."""
    h, job_id = await _create_held("race")
    await h.clock.advance(TIMEOUT_S - 1)
    await h.settle()
    subject = subjects.task_events("default", job_id, CREATE, "prov-fake")
    claim = TaskClaimed(job_id=job_id, task_id=CREATE, attempt=1, provisioner="prov-fake", worker="w1")
    await h.log.append(subject, [Append(claim, msg_id=f"{job_id}.{CREATE}.1.claim.1")])  # (not delivered: no settle)
    await h.clock.advance(2)  # the first deadline passes
    assert _timed_out(h, job_id) == [] and _closed(h, job_id, CREATE, 1) != []
    await h.settle()  # (the claim is delivered now: it moves nothing more)
    await h.clock.advance(TIMEOUT_S - 3)
    await h.settle()
    assert _timed_out(h, job_id) == []
    await h.clock.advance(2)  # a whole timeout after the claim
    await h.settle()
    assert _timed_out(h, job_id) == [(CREATE, 1)]
    assert len(_closed(h, job_id, CREATE, 1)) == 1  # (closed once: read before it is stored again)
