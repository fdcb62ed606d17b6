"""The invariant checker on a segment's follower ended unrun because the step before it failed
(decision 58): never claimed, unless its claimer ran that step on a copy of the segment and
stored a success the planner did not take (it took the other copy's failure first). Played on
records made here, no server: the soak met that case once with segments on (a message
delivered to two provisioners around a nats-server's stop)."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts import subjects
from contracts.catalog import Action
from contracts.events import Event, TaskAttemptFailed, TaskClaimed, TaskFailed, TaskQueued, TaskSucceeded
from muster.bus.eventstore import Recorded
from services.planner.domain.segments import STRANDED

from .invariants import Report, _check_provisioner_side

JOB, TENANT, NOW = "j1", "acme", datetime(2026, 1, 1, tzinfo=UTC)


def _rec(seq: int, subject: str, event: Event) -> Recorded:
    return Recorded(seq, subject, NOW, event, JOB, seq)


def _on(task: str, provisioner: str, seq: int, event: Event) -> Recorded:
    return _rec(seq, subjects.task_events(TENANT, JOB, task, provisioner), event)


def _check(copy_succeeded: bool, same_claimer: bool = True) -> list[str]:
    job = subjects.job_events(TENANT, JOB)
    follower = TaskQueued(v=2, job_id=JOB, task_id="n1.configure", attempt=1, node="n1", action=Action.CONFIGURE, after="n1.install")
    stranded = _rec(9, job, TaskAttemptFailed(job_id=JOB, task_id="n1.configure", attempt=1, error=STRANDED, state="cancelled"))
    copy = "p1" if same_claimer else "p2"
    history = {
        "p3": [_on("n1.install", "p3", 2, TaskClaimed(job_id=JOB, task_id="n1.install", attempt=1, provisioner="p3", worker="p3/w0")),
               _on("n1.install", "p3", 4, TaskFailed(job_id=JOB, task_id="n1.install", attempt=1, provisioner="p3", worker="p3/w0", error="boom"))],
        "p1": [_on("n1.install", copy, 3, TaskClaimed(job_id=JOB, task_id="n1.install", attempt=1, provisioner=copy, worker=f"{copy}/w0")),
               _on("n1.configure", "p1", 11, TaskClaimed(job_id=JOB, task_id="n1.configure", attempt=1, provisioner="p1",
                                                          worker="p1/w0"))],
    }
    if copy_succeeded:
        history["p1"].append(_on("n1.install", copy, 10, TaskSucceeded(job_id=JOB, task_id="n1.install", attempt=1, provisioner=copy, worker=f"{copy}/w0")))
    by_subject: dict[str, list[Recorded]] = {}
    for r in [r for h in history.values() for r in h]:
        by_subject.setdefault(r.subject, []).append(r)
    queued = {("n1.configure", 1): _rec(1, job, follower)}
    outcomes = {("n1.install", 1): [_rec(5, job, TaskAttemptFailed(job_id=JOB, task_id="n1.install", attempt=1, error="boom"))],
                ("n1.configure", 1): [stranded]}
    report = Report()
    _check_provisioner_side(report, by_subject, TENANT, JOB, "job j1", stranded, queued, outcomes)
    return report.problems


def test_a_follower_run_on_after_its_claimers_late_success_of_the_failed_step_is_a_late_run() -> None:
    assert _check(copy_succeeded=True) == []


def test_a_follower_claimed_with_no_such_copy_is_a_problem() -> None:
    [problem] = _check(copy_succeeded=False)
    assert "n1.configure cancelled as unclaimed, and claimed" in problem


def test_a_success_of_the_step_before_by_another_provisioner_does_not_excuse_the_claim() -> None:
    assert len(_check(copy_succeeded=True, same_claimer=False)) == 1
