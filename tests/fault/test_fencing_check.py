"""The fencing check itself (`fencing.check_fencing`), on made-up logs: it must name a planner
that wrote for a job another planner owned, and accept hand-overs the log records (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.events import ClusterStatusChanged, JobAdopted, JobRequested, JobRetried, JobSucceeded
from contracts.records import Recorded

from .fencing import check_fencing

T, J, C = "acme", "j1", "c1"
JOB, CLUSTER = f"muster.evt.{T}.job.{J}", f"muster.evt.{T}.cluster.{C}"


def _log(*entries: tuple[str, Any, str]) -> tuple[list[Recorded], dict[int, str]]:
    """(subject, event, writer) in log order -> the log and who wrote what."""
    log = [Recorded(seq, subject, datetime.now(UTC), event) for seq, (subject, event, _) in enumerate(entries, 1)]
    return log, {seq: writer for seq, (_, _, writer) in enumerate(entries, 1)}


def _accepted_by(planner: str) -> list[tuple[str, Any, str]]:
    return [(CLUSTER, ClusterStatusChanged(cluster_id=C, status="pending", job_id=J), planner),
            (JOB, JobRequested(tenant=T, job_id=J, cluster_id=C, operation="create", request={}, planner=planner), planner)]


def test_the_owner_and_an_adopter_may_write_and_no_one_else() -> None:
    log, writers = _log(*_accepted_by("p1"), (JOB, JobAdopted(job_id=J, planner="p2", previous="p1"), "p2"),
                        (CLUSTER, ClusterStatusChanged(cluster_id=C, status="active", job_id=J), "p2"),
                        (JOB, JobSucceeded(job_id=J), "p2"))
    assert check_fencing(log, writers).problems == []
    stale, writers = _log(*_accepted_by("p1"), (JOB, JobAdopted(job_id=J, planner="p2", previous="p1"), "p2"),
                          (CLUSTER, ClusterStatusChanged(cluster_id=C, status="active", job_id=J), "p1"))
    problems = check_fencing(stale, writers).problems
    assert len(problems) == 1 and "written by p1 while p2 owned job j1" in problems[0]


def test_whoever_retries_a_final_job_owns_it_then() -> None:
    log, writers = _log(*_accepted_by("p1"), (JOB, JobSucceeded(job_id=J), "p1"),
                        (CLUSTER, ClusterStatusChanged(cluster_id=C, status="pending", job_id=J), "p2"),
                        (JOB, JobRetried(job_id=J), "p2"), (JOB, JobSucceeded(job_id=J), "p2"))
    report = check_fencing(log, writers)
    assert report.problems == [] and report.reopened == 1 and report.unattributed == 1
    late, writers = _log(*_accepted_by("p1"), (JOB, JobSucceeded(job_id=J), "p1"), (JOB, JobRetried(job_id=J), "p2"),
                         (JOB, JobSucceeded(job_id=J), "p1"))
    assert len(check_fencing(late, writers).problems) == 1
