"""A large job's page (pure parts): the fold kept between requests, the graph by stage with
counts, the task table a page at a time, and the stream's batches (one entry per task changed,
counts moved task by task)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import subjects
from contracts.approvals import JobApprovalRequested, JobApproved
from contracts.events import (
    JobPlanned,
    JobRequested,
    PlannedTaskRecord,
    RollbackPlanned,
    TaskAttemptFailed,
    TaskClaimed,
    TaskCompleted,
    TaskQueued,
    TaskSucceeded,
)
from contracts.records import Recorded
from muster.readmodel.progress import JobProgress
from services.tracker.ui.batches import Batch, Tally
from services.tracker.ui.bigjob import JobFold, aggregate, planned_tasks, rows

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
JOB = "00000000-0000-0000-0000-000000000001"
NODES = [f"n{i}" for i in range(6)]


class Log:
    def __init__(self) -> None:
        self.records: list[Recorded] = []

    def add(self, event: Any, task: str | None = None) -> Recorded:
        subject = subjects.task_events("t", JOB, task, "p1") if task else subjects.job_events("t", JOB)
        r = Recorded(seq=len(self.records) + 1, subject=subject, time=T0 + timedelta(seconds=len(self.records)), event=event)
        self.records.append(r)
        return r


def _planned(log: Log) -> None:
    log.add(JobRequested(tenant="t", job_id=JOB, cluster_id="c", operation="create", request={}))
    creates = [PlannedTaskRecord(id=f"{n}.create", node=n, action="create") for n in NODES]  # type: ignore[arg-type]
    installs = [PlannedTaskRecord(id=f"{n}.install.base", node=n, action="install", service="base") for n in NODES]  # type: ignore[arg-type]
    log.add(JobPlanned(job_id=JOB, tasks=creates + installs, links=[([t.id for t in creates], [t.id for t in installs])],
                       stages=[[t.id for t in creates], [t.id for t in installs]]))


def _run(log: Log, task: str, fail: bool = False) -> None:
    log.add(TaskQueued(job_id=JOB, task_id=task, attempt=1, node=task.split(".")[0], action="create"))  # type: ignore[arg-type]
    log.add(TaskClaimed(job_id=JOB, task_id=task, attempt=1, provisioner="p1", worker="p1/w1"), task)
    if fail:
        log.add(TaskAttemptFailed(job_id=JOB, task_id=task, attempt=1, error="boom"))
    else:
        log.add(TaskSucceeded(job_id=JOB, task_id=task, attempt=1, provisioner="p1", worker="p1/w1"), task)
        log.add(TaskCompleted(job_id=JOB, task_id=task, attempt=1))


def _one_done_one_failed() -> Log:
    log = Log()
    _planned(log)
    _run(log, "n0.create")
    _run(log, "n1.create", fail=True)
    return log


def _fold(records: list[Recorded]) -> JobFold:
    fold = JobFold()
    for r in records:
        fold.add(r)
    return fold


def test_the_kept_fold_gives_the_progress_fold_status_and_skips_what_it_has() -> None:
    log = _one_done_one_failed()
    log.add(TaskQueued(job_id=JOB, task_id="n2.create", attempt=1, node="n2", action="create"))  # type: ignore[arg-type]
    log.add(TaskClaimed(job_id=JOB, task_id="n2.create", attempt=1, provisioner="p1", worker="p1/w2"), "n2.create")
    fold = _fold(log.records)
    progress = JobProgress()
    for r in log.records:
        progress.fold(r)
    assert fold.status() == progress.status()
    assert not any(fold.add(r) for r in log.records)  # a second reader's copies change nothing
    assert fold.status() == progress.status()
    assert planned_tasks(log.records) == 12 and fold.size == 12
    assert fold.lines_total == len(log.records) and fold.lines[-1]["type"] == "TaskClaimed"


def test_the_graph_is_one_group_per_stage_counted_by_state() -> None:
    fold = _fold(_one_done_one_failed().records)
    agg = aggregate(fold)
    assert agg["total"] == 12
    assert [(g["key"], g["total"], g["counts"]) for g in agg["groups"]] == [
        ("forward:1", 6, {"failed": 1, "planned": 4, "succeeded": 1}), ("forward:2", 6, {"planned": 6})]
    assert agg["groups"][1]["kinds"] == [["install base", 6]]


def test_the_table_shows_what_needs_a_look_first_a_page_at_a_time() -> None:
    fold = _fold(_one_done_one_failed().records)
    first, total = rows(fold, limit=3)
    assert total == 12 and [t["id"] for t in first] == ["n1.create", "n2.create", "n3.create"]
    assert first[0]["state"] == "failed" and first[0]["group"] == "forward:1" and first[0]["stage"] == 1
    later, _ = rows(fold, offset=10, limit=3)
    assert [t["id"] for t in later] == ["n5.install.base", "n0.create"]  # succeeded last
    only, total = rows(fold, state="planned", group="forward:2")
    assert total == 6 and {t["state"] for t in only} == {"planned"}


def _batching() -> tuple[Log, JobFold, Tally, Batch]:
    """A planned job's log and fold, with a tally and an empty batch for its stream."""
    log = Log()
    _planned(log)
    fold = _fold(log.records)
    return log, fold, Tally(fold), Batch()


def test_a_batch_sends_each_task_once_in_its_latest_state_and_moves_the_counts() -> None:
    log, fold, tally, batch = _batching()
    start = len(log.records)
    _run(log, "n0.create")
    _run(log, "n1.create")
    for r in log.records[start:]:
        fold.add(r)
        batch.note(r)
    body = batch.body(tally)
    assert [(t["id"], t["state"]) for t in body["tasks"]] == [("n0.create", "succeeded"), ("n1.create", "succeeded")]
    assert body["seq"] == log.records[-1].seq and len(body["lines"]) == 8 and not body["replan"]
    assert body["groups"]["forward:1"] == {"planned": 4, "succeeded": 2}
    assert body["counts"] == {"planned": 10, "succeeded": 2} and body["stage"] == {"current": 1, "total": 2}
    assert body["counts"] == (fold.status() or {})["counts"]


def test_a_rollback_in_a_batch_counts_again_and_says_the_plan_changed() -> None:
    log, fold, tally, batch = _batching()
    r = log.add(RollbackPlanned(job_id=JOB, reason="n1 failed", tasks=[PlannedTaskRecord(id="undo.n0", node="n0", action="delete")],  # type: ignore[arg-type]
                                links=[], stages=[["undo.n0"]]))
    fold.add(r)
    batch.note(r)
    body = batch.body(tally)
    assert body["replan"] and body["state"] == "rolling_back" and body["tasks_total"] == 13
    assert body["groups"]["rollback:1"] == {"planned": 1} and body["stage"] == {"current": 1, "total": 1}


def test_a_batch_says_an_approval_once_it_is_decided_and_not_its_costs() -> None:
    """The page of a job waiting for approval offered Reject after someone else had approved it
    and the job had run (session 34's walk): the batch now carries the decision, for job.js."""
    log, fold, tally, batch = _batching()
    asked = log.add(JobApprovalRequested(job_id=JOB, rules=["big"], expires_at=T0 + timedelta(hours=1), cluster_version=0, digest="d"))
    fold.add(asked)
    batch.note(asked)
    assert batch.body(tally)["approval"] is None and tally.state == "waiting_for_approval"  # nothing decided yet
    batch = Batch()
    approved = log.add(JobApproved(job_id=JOB, by="ada", comment="fine"))
    fold.add(approved)
    batch.note(approved)
    body = batch.body(tally)
    assert body["approval"] == {"decision": "approved", "by": "ada", "comment": "fine"} and body["state"] == "running"
