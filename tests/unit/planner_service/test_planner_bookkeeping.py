"""The planner's bookkeeping made cheaper in session 29, each against what it replaced: timers
armed for one deadline share one call of the clock and still fire one by one; the claims seen
answer who holds an attempt and who ran the earlier ones, and forget the oldest first; a job's
events recorded the short way are the events the library's path records."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from contracts.catalog import Action
from contracts.events import JobRequested, TaskCompleted, TaskQueued
from contracts.records import Recorded
from muster.ports.memory import ManualClock
from services.planner import attempts as attempts_module
from services.planner.attempts import AttemptHolders
from services.planner.domain.job import Job
from services.planner.domain.model import PlannedTask
from services.planner.timers import Timers


async def test_timers_of_one_deadline_share_one_call_and_each_fires_alone() -> None:
    clock = ManualClock()
    timers, fired = Timers(clock), []

    async def on_timeout(*ids: object) -> None:
        fired.append(ids)

    timers.on("timeout", on_timeout)
    at = clock.now() + timedelta(seconds=900)
    for i in range(100):
        assert timers.arm(("timeout", "j", f"t{i}", 1), at)
    assert not timers.arm(("timeout", "j", "t0", 1), at + timedelta(seconds=1))  # the first deadline holds
    assert timers.arm(("timeout", "j", "late", 1), at + timedelta(seconds=5))
    assert clock.pending == 2  # one call for the hundred, one for the other deadline
    for i in range(1, 100):
        timers.disarm(("timeout", "j", f"t{i}", 1))
    await clock.advance(899)
    assert fired == []
    await clock.advance(1)
    assert fired == [("j", "t0", 1)] and ("timeout", "j", "t0", 1) not in timers.handles
    timers.disarm(("timeout", "j", "late", 1))
    assert clock.pending == 0  # the last key of a deadline disarmed: its call is cancelled
    await clock.advance(10)
    assert fired == [("j", "t0", 1)]


async def test_a_key_disarmed_and_armed_again_fires_at_its_new_deadline_only() -> None:
    clock = ManualClock()
    timers, fired = Timers(clock), []

    async def on_timeout(*ids: object) -> None:
        fired.append((clock.now(), ids))

    timers.on("timeout", on_timeout)
    first, second = clock.now() + timedelta(seconds=10), clock.now() + timedelta(seconds=20)
    timers.arm(("timeout", "j", "a", 1), first)
    timers.arm(("timeout", "j", "b", 1), first)
    timers.disarm(("timeout", "j", "a", 1))
    timers.arm(("timeout", "j", "a", 1), second)
    await clock.advance(30)
    assert fired == [(first, ("j", "b", 1)), (second, ("j", "a", 1))]


def _claim(job: str, task: str, attempt: int, provisioner: str) -> Recorded:
    event = SimpleNamespace(job_id=job, task_id=task, attempt=attempt, provisioner=provisioner)
    return Recorded(1, f"muster.evt.t.task.{job}.{task}.{provisioner}", None, event)  # type: ignore[arg-type]


def test_claims_say_who_holds_an_attempt_and_who_ran_the_earlier_ones() -> None:
    holders = AttemptHolders(None)  # type: ignore[arg-type]  # (no outcome is checked against the log here)
    holders.claimed(_claim("j", "t", 1, "p1"))
    holders.claimed(_claim("j", "t", 1, "p1"))  # a redelivery
    holders.claimed(_claim("j", "t", 1, "p2"))  # a copy run elsewhere
    holders.claimed(_claim("j", "t", 2, "p3"))
    assert holders.holders("j", "t", 1) == ("p1", "p2") and holders.holders("j", "t", 2) == ("p3",)
    assert holders.ran("j", "t", 1) == [] and holders.ran("j", "t", 2) == ["p1", "p2"]
    assert holders.ran("j", "t", 3) == ["p1", "p2", "p3"] and holders.holders("k", "t", 1) == ()


def test_claims_past_the_most_kept_forget_the_oldest_first(monkeypatch: object) -> None:
    monkeypatch.setattr(attempts_module, "MAX_REMEMBERED", 10)  # type: ignore[attr-defined]
    holders = AttemptHolders(None)  # type: ignore[arg-type]
    for i in range(4):
        holders.claimed(_claim("old", f"t{i}", 1, "p"))
    for i in range(6):
        holders.claimed(_claim("new", f"t{i}", 1, "p"))
    holders.claimed(_claim("newest", "t", 1, "p"))  # the eleventh: the oldest five go
    assert "old" not in holders.claims and holders.holders("new", "t0", 1) == ()
    assert holders.holders("new", "t1", 1) == ("p",) and holders.holders("newest", "t", 1) == ("p",)


def _job() -> Job:
    job = Job(JobRequested(job_id="00000000-0000-0000-0000-000000000001", tenant="t", cluster_id="c", operation="create",
                           request={}, requested_by="u", planner="p", max_attempts=3))
    job.tasks = {"n1.create": PlannedTask("n1.create", "n1", Action.CREATE, None)}
    return job


def test_events_recorded_the_short_way_are_the_librarys() -> None:
    short, library = _job(), _job()
    queued = short.queue("n1.create")
    library._queued(queued)
    done = TaskCompleted(job_id=queued.job_id, task_id="n1.create", attempt=1)
    assert short.complete(done)
    library._completed(done)
    mine: list[Any] = list(short.collect_events())
    theirs: list[Any] = list(library.collect_events())
    assert [type(e) for e in mine] == [type(e) for e in theirs]
    assert [(e.originator_id, e.originator_version, e.payload) for e in mine] == \
           [(e.originator_id, e.originator_version, e.payload) for e in theirs]
    assert isinstance(mine[1].payload, TaskQueued) and short.version == library.version == 3
    assert short.modified_on == mine[-1].timestamp
    fresh = TaskQueued(**queued.model_dump(exclude={"type"}))  # (its own set of the fields given)
    assert queued.model_dump_json(exclude_unset=True) == fresh.model_dump_json(exclude_unset=True)
    assert queued.model_copy(update={"attempt": 2}).model_fields_set == fresh.model_fields_set
    assert short.task_state == library.task_state == {"n1.create": "succeeded"} and short.attempts == library.attempts
    assert short.queue("n1.create").model_fields_set == queued.model_fields_set  # (shared, and unchanged by the copy)
