"""The Job aggregate, without a broker: decisions are idempotent, replay gives the same state."""

from __future__ import annotations

from datetime import datetime, timezone

from contracts.events import JobPlanned, JobRequested, PlannedTaskRecord, TaskAttemptFailed, TaskCompleted
from muster.bus.eventstore import Recorded
from muster.bus.repository import pending_appends, rebuild
from services.planner.domain.job import Job, job_uuid


def _job(mode: str = "eager") -> Job:
    job_id = str(job_uuid("acme", "req-1"))
    job = Job(JobRequested(tenant="acme", job_id=job_id, cluster_id="c", operation="create", request={}))
    tasks = [
        PlannedTaskRecord(id="n1.create", node="n1", action="create"),
        PlannedTaskRecord(id="n2.create", node="n2", action="create"),
        PlannedTaskRecord(id="n1.install.a", node="n1", action="install", service="a"),
        PlannedTaskRecord(id="n2.install.b", node="n2", action="install", service="b"),
    ]
    edges = [("n1.create", "n1.install.a"), ("n2.create", "n2.install.b"), ("n1.install.a", "n2.install.b")]
    job.record_plan(JobPlanned(job_id=job_id, mode=mode, tasks=tasks, edges=edges,  # type: ignore[arg-type]
                               stages=[["n1.create", "n2.create"], ["n1.install.a"], ["n2.install.b"]]))
    return job


def _done(job: Job, task: str) -> bool:
    return job.complete(TaskCompleted(job_id=str(job.id), task_id=task, attempt=job.attempts[task]))


def test_job_ids_derive_from_the_idempotency_key() -> None:
    assert job_uuid("acme", "r1") == job_uuid("acme", "r1")
    assert job_uuid("acme", "r1") != job_uuid("other", "r1")
    assert job_uuid("acme", None) != job_uuid("acme", None)


def test_eager_dispatch_follows_edges_one_task_per_node() -> None:
    job = _job()
    first = job.ready()
    assert first == ["n1.create", "n2.create"]
    for t in first:
        job.queue(t)
    assert job.ready() == []  # both nodes busy
    assert _done(job, "n1.create")
    assert job.ready() == ["n1.install.a"]
    job.queue("n1.install.a")
    assert _done(job, "n2.create") and job.ready() == []  # n2.install.b waits for n1.install.a
    assert _done(job, "n1.install.a") and job.ready() == ["n2.install.b"]


def test_a_repeated_or_late_result_changes_nothing() -> None:
    job = _job()
    job.queue("n1.create")
    assert _done(job, "n1.create")
    assert not _done(job, "n1.create")  # redelivered
    job.queue("n2.create")
    assert job.fail_attempt(TaskAttemptFailed(job_id=str(job.id), task_id="n2.create", attempt=1, error="boom"))
    job.requeue("n2.create")
    late = TaskCompleted(job_id=str(job.id), task_id="n2.create", attempt=1)
    assert not job.complete(late)  # attempt 1 is superseded by attempt 2
    assert job.task_state["n2.create"] == "queued" and job.attempts["n2.create"] == 2


def test_retry_limit() -> None:
    job = _job()
    job.queue("n1.create")
    assert job.retry_allowed("n1.create", 3)
    job.requeue("n1.create")
    job.requeue("n1.create")
    assert job.attempts["n1.create"] == 3 and not job.retry_allowed("n1.create", 3)


def test_staged_mode_waits_for_the_whole_stage() -> None:
    job = _job(mode="staged")
    assert job.ready() == ["n1.create", "n2.create"]
    job.queue("n1.create")
    job.queue("n2.create")
    assert _done(job, "n1.create") and job.ready() == []  # eager would start n1.install.a now
    assert _done(job, "n2.create") and job.ready() == ["n1.install.a"]


def test_final_states_are_final() -> None:
    job = _job()
    assert job.fail("no provisioner")
    assert not job.fail("again") and not job.succeed()
    assert job.ready() == []


def test_rebuilding_from_recorded_events_gives_the_same_state() -> None:
    job = _job()
    for t in job.ready():
        job.queue(t)
    _done(job, "n1.create")
    appends = pending_appends(job)
    history = [
        Recorded(seq=i + 1, subject="s", time=a.time or datetime.now(timezone.utc), event=a.event,
                 aggregate_id=a.aggregate_id, version=a.version)
        for i, a in enumerate(appends)
    ]
    rebuilt = rebuild(Job, history)
    assert rebuilt is not None
    assert rebuilt.task_state == job.task_state and rebuilt.attempts == job.attempts
    assert rebuilt.ready() == job.ready() and rebuilt.version == job.version
