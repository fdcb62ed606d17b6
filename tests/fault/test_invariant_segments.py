"""The invariant checker on a segment's follower the planner ended unrun (decision 58), and on an
attempt that timed out (decision 59): its `StepClosed` is in the log, and no claim of it after
that. A claim before it is a late copy's (its step before's success and this claim landed before the planner's end), a late result; one
after it would mean the fence failed. Played on records made here, no server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import pytest

from contracts import subjects
from contracts.events import Event, StepClosed, TaskAttemptFailed, TaskClaimed
from muster.bus.eventstore import Recorded
from services.planner.domain.segments import STRANDED, STRANDED_BY_TIMEOUT

from .invariants import Report, _check_provisioner_side

JOB, TENANT, NOW = "j1", "acme", datetime(2026, 1, 1, tzinfo=UTC)


def _rec(seq: int, subject: str, event: Event) -> Recorded:
    return Recorded(seq, subject, NOW, event, JOB, seq)


def _check(error: str, claimed_at: int | None, closed_at: int | None,
           state: Literal["cancelled", "timed_out"] = "cancelled") -> list[str]:
    """n1.configure (after n1.install) ended unrun at seq 10 with `error` (or timed out, `state`);
    its claim by p1 at `claimed_at`, its `StepClosed` at `closed_at` (None: not in the log)."""
    ended = _rec(10, subjects.job_tasks(TENANT, JOB),
                 TaskAttemptFailed(job_id=JOB, task_id="n1.configure", attempt=1, error=error, state=state))
    by_subject: dict[str, list[Recorded]] = {}
    if claimed_at is not None:
        claim = TaskClaimed(job_id=JOB, task_id="n1.configure", attempt=1, provisioner="p1", worker="p1/w0")
        r = _rec(claimed_at, subjects.task_events(TENANT, JOB, "n1.configure", "p1"), claim)
        by_subject[r.subject] = [r]
    if closed_at is not None:
        r = _rec(closed_at, subjects.step_closed(TENANT, JOB, "n1.configure", 1),
                 StepClosed(job_id=JOB, task_id="n1.configure", attempt=1))
        by_subject[r.subject] = [r]
    report = Report()
    _check_provisioner_side(report, by_subject, TENANT, JOB, "job j1", ended)
    return report.problems


@pytest.mark.parametrize("error", [STRANDED, STRANDED_BY_TIMEOUT])
def test_a_follower_ended_unrun_and_never_claimed_holds(error: str) -> None:
    assert _check(error, claimed_at=None, closed_at=9) == []


@pytest.mark.parametrize("error", [STRANDED, STRANDED_BY_TIMEOUT])
def test_a_claim_before_the_planners_end_is_a_late_copys_run(error: str) -> None:
    assert _check(error, claimed_at=8, closed_at=9) == []


@pytest.mark.parametrize("error", [STRANDED, STRANDED_BY_TIMEOUT])
def test_a_claim_after_the_planners_end_is_a_problem(error: str) -> None:
    [problem] = _check(error, claimed_at=11, closed_at=9)
    assert "n1.configure ended unrun, and claimed after its StepClosed (seq 9)" in problem


def test_a_follower_ended_unrun_without_its_step_closed_is_a_problem() -> None:
    [problem] = _check(STRANDED, claimed_at=None, closed_at=None)
    assert "no StepClosed" in problem


def test_a_cancels_unclaimed_attempt_claimed_is_still_a_problem() -> None:
    [problem] = _check("cancelled: not claimed before the job's cancel", claimed_at=8, closed_at=None)
    assert "cancelled as unclaimed, and claimed" in problem


def test_a_timed_out_attempt_claimed_before_its_close_runs_late_and_after_it_is_a_problem() -> None:
    """An attempt that timed out (decision 59): closed before its end; a claim before the close
    is a late run (its deadline read it and passed), one after it would mean the fence failed."""
    assert _check("timed out after 5s", claimed_at=8, closed_at=9, state="timed_out") == []
    assert _check("timed out after 5s", claimed_at=None, closed_at=9, state="timed_out") == []
    [problem] = _check("timed out after 5s", claimed_at=11, closed_at=9, state="timed_out")
    assert "n1.configure timed out, and claimed after its StepClosed (seq 9)" in problem
    [problem] = _check("timed out after 5s", claimed_at=None, closed_at=None, state="timed_out")
    assert "no StepClosed" in problem
