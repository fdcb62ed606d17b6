"""The history checker itself (`history.check_history`), on made-up logs and histories: each
rule must name a client that saw what the log does not hold, and pass one that saw only the log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.events import ClusterStatusChanged, JobRequested, JobSucceeded
from contracts.records import Recorded

from .history import History, check_history

T, J, C = "acme", "j1", "c1"
JOB, CLUSTER = f"muster.evt.{T}.job.{J}", f"muster.evt.{T}.cluster.{C}"
AT = 1_000_000.0


def _log() -> list[Recorded]:
    """A cluster made active by job j1, which succeeded: decided at AT, AT+1, AT+2, AT+3."""
    entries: list[tuple[str, Any]] = [
        (CLUSTER, ClusterStatusChanged(cluster_id=C, status="pending", job_id=J)),
        (JOB, JobRequested(tenant=T, job_id=J, cluster_id=C, operation="create", request={"request_id": "r1"})),
        (CLUSTER, ClusterStatusChanged(cluster_id=C, status="active", job_id=J)),
        (JOB, JobSucceeded(job_id=J)),
    ]
    return [Recorded(seq, subject, datetime.fromtimestamp(AT + seq - 1, UTC), event) for seq, (subject, event) in enumerate(entries, 1)]


def _seen_as_logged() -> History:
    h = History()
    q = h.request("a1", T, "create", "r1")
    q.sent, q.answered, q.outcome, q.job_id, q.cluster_id = AT, AT + 1.5, "accepted", J, C
    h.events.append(("a1", AT + 2, 2, JOB, "JobRequested"))
    h.finals.append(("a1", AT + 4, J, "JobSucceeded", 4))
    h.reads += [("a1", AT + 2.5, "tracker-1", C, 2, "active", J), ("a1", AT + 5, "tracker-2", C, 2, "active", J)]
    return h


def test_a_history_that_saw_only_the_log_passes() -> None:
    report = check_history(_seen_as_logged(), _log())
    assert report.problems == []
    assert report.checked == {"requests accepted": 1, "events read": 1, "final states seen": 1, "cluster reads": 2}
    assert report.slowest_answer_s == 1.5


def test_an_acknowledged_event_missing_from_the_log_is_named() -> None:
    h = _seen_as_logged()
    h.events.append(("a2", AT + 3, 5, JOB, "JobFailed"))
    problems = check_history(h, _log()).problems
    assert problems == [f"a2 read JobFailed on {JOB} at seq 5; the log has nothing there"]


def test_a_state_the_log_does_not_hold_or_saw_early_is_named() -> None:
    h = _seen_as_logged()
    h.finals.append(("a2", AT + 4, J, "JobFailed", 4))
    h.reads.append(("a2", AT + 3, "tracker-1", C, 2, "failed", J))
    h.reads.append(("a3", AT + 1.5, "tracker-1", C, 3, "active", J))
    q = h.request("a3", T, "create", "r2")
    q.answered, q.outcome, q.job_id, q.cluster_id = AT + 0.1, "accepted", "j9", C
    problems = check_history(h, _log()).problems
    assert len(problems) == 4, problems
    assert "j9, which the log does not hold" in problems[0] and "a2 saw job j1 end with JobFailed" in problems[1]
    assert "at version 3 from tracker-1; the log has versions 1..2" in problems[2]
    assert "v2 as failed/j1 from tracker-1; the log's v2 is active/j1" in problems[3]


def test_a_read_back_in_time_and_a_request_never_answered_are_named() -> None:
    h = _seen_as_logged()
    h.reads.append(("a1", AT + 6, "tracker-1", C, 1, "pending", J))
    h.request("a1", T, "expand", "r3")
    h.request("a2", T, "delete", "r1").outcome = "refused"
    problems = check_history(h, _log()).problems
    assert len(problems) == 3, problems
    assert "expand r3 (acme) got no answer" in problems[0]
    assert "delete r1 was refused" in problems[1] and "yet the log acted on it" in problems[1]
    assert "at v1 from tracker-1 after v2 from tracker-2: back in time" in problems[2]
