"""What the clients saw, checked against the log afterwards (in the spirit of Jepsen's checkers).

Every answer a client gets is recorded with the wall time it came (`History`): each request
(accepted with a job id, refused with a reason, or never answered; how long it took), each event
it read while following a job (its log sequence, subject and type: acknowledged to it), each
job's final state, and each cluster it read from a tracker (version, status, current job).
`check_history` then replays them against the whole log:

- **No acknowledged event lost**: every event a client read is in the log at the same sequence,
  on the same subject, of the same type.
- **No client saw what the log does not hold**: an accepted job's `JobRequested` is there for
  the request, names the cluster the answer named, and was decided before the answer came; a
  final state is the job's, decided before it was seen; a refused request left no job and no
  job-control event carrying its request id; a cluster read as version v is the log's cluster
  at version v (status and current job), decided before it was read.
- **No read went back in time**: one client's reads of one cluster never show a lower version
  than an earlier read of it (through whichever tracker).
- **Every request answered in time**: answered or refused with a reason, none left without
  (the deadline: the client's tries, `MusterClient.request`); the slowest is reported.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from contracts.events import FINAL_JOB_EVENTS
from contracts.records import Recorded
from muster.readmodel.clusters import ClusterState

SECOND = 1.0
"""Slack when comparing a log time with a client's: the decide time is taken before the append,
and the two clocks are one (this machine's), so a client may not see a state before it was
decided; the slack only covers the clock's resolution."""


@dataclass
class Request:
    client: str
    tenant: str
    verb: str
    request_id: str
    sent: float
    answered: float | None = None
    outcome: str = "unanswered"
    """accepted | refused | unanswered"""
    job_id: str = ""
    cluster_id: str = ""
    reason: str = ""


@dataclass
class History:
    requests: list[Request] = field(default_factory=list)
    events: list[tuple[str, float, int, str, str]] = field(default_factory=list)
    """(client, when, seq, subject, type) of every event a client read."""
    finals: list[tuple[str, float, str, str, int]] = field(default_factory=list)
    """(client, when, job id, final event type, its seq)."""
    reads: list[tuple[str, float, str, str, int, str, str]] = field(default_factory=list)
    """(client, when, tracker, cluster id, version, status, job id)."""

    def request(self, client: str, tenant: str, verb: str, request_id: str) -> Request:
        r = Request(client, tenant, verb, request_id, time.time())
        self.requests.append(r)
        return r

    def event(self, client: str, r: Recorded) -> None:
        self.events.append((client, time.time(), r.seq, r.subject, r.type))

    def final(self, client: str, job_id: str, r: Recorded) -> None:
        self.finals.append((client, time.time(), job_id, r.type, r.seq))

    def read(self, client: str, tracker: str, body: dict[str, Any]) -> None:
        self.reads.append((client, time.time(), tracker, str(body.get("id", "")), int(body.get("version", -1)),
                           str(body.get("status", "")), str(body.get("job_id") or "")))


@dataclass
class HistoryReport:
    checked: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    slowest_answer_s: float = 0.0

    def summary(self) -> str:
        return f"history: checked {dict(self.checked)}; slowest answer {self.slowest_answer_s:.1f}s; {len(self.problems)} problems"


def check_history(history: History, log: list[Recorded]) -> HistoryReport:
    report = HistoryReport()
    by_seq = {r.seq: r for r in log}
    by_subject: dict[str, list[Recorded]] = defaultdict(list)
    for r in log:
        by_subject[r.subject].append(r)
    _acknowledged(report, history, by_seq)
    _requests(report, history, log)
    _finals(report, history, by_seq)
    _reads(report, history, by_subject)
    return report


def _acknowledged(report: HistoryReport, history: History, by_seq: dict[int, Recorded]) -> None:
    for client, _, seq, subject, kind in history.events:
        report.checked["events read"] += 1
        found = by_seq.get(seq)
        if found is None or found.subject != subject or found.type != kind:
            now = f"{found.type} on {found.subject}" if found else "nothing"
            report.problems.append(f"{client} read {kind} on {subject} at seq {seq}; the log has {now} there")


def _requests(report: HistoryReport, history: History, log: list[Recorded]) -> None:
    requested = {r.event.job_id: r for r in log if r.type == "JobRequested"}
    carried: set[str] = {str(r.event.request_id) for r in log if getattr(r.event, "request_id", None)}
    carried |= {str(r.event.request.get("request_id")) for r in requested.values() if r.event.request.get("request_id")}
    for q in history.requests:
        report.checked[f"requests {q.outcome}"] += 1
        if q.answered is not None:
            report.slowest_answer_s = max(report.slowest_answer_s, q.answered - q.sent)
        if q.outcome == "unanswered":
            report.problems.append(f"{q.client}: {q.verb} {q.request_id} ({q.tenant}) got no answer")
        elif q.outcome == "refused" and q.request_id in carried:
            report.problems.append(f"{q.client}: {q.verb} {q.request_id} was refused ({q.reason}), yet the log acted on it")
        elif q.outcome == "accepted":
            job = requested.get(q.job_id)
            if job is None:
                report.problems.append(f"{q.client}: {q.verb} accepted as job {q.job_id}, which the log does not hold")
            elif job.event.cluster_id != q.cluster_id:
                report.problems.append(f"{q.client}: job {q.job_id} answered for cluster {q.cluster_id}, "
                                       f"the log's is {job.event.cluster_id}")
            elif q.answered is not None and job.time.timestamp() > q.answered + SECOND:
                report.problems.append(f"{q.client}: job {q.job_id} accepted before the log decided it")


def _finals(report: HistoryReport, history: History, by_seq: dict[int, Recorded]) -> None:
    for client, when, job_id, kind, seq in history.finals:
        report.checked["final states seen"] += 1
        found = by_seq.get(seq)
        if found is None or found.type != kind or found.type not in FINAL_JOB_EVENTS or getattr(found.event, "job_id", "") != job_id:
            report.problems.append(f"{client} saw job {job_id} end with {kind} (seq {seq}); the log disagrees")
        elif found.time.timestamp() > when + SECOND:
            report.problems.append(f"{client} saw job {job_id} end before the log decided it")


def _reads(report: HistoryReport, history: History, by_subject: dict[str, list[Recorded]]) -> None:
    states: dict[str, list[tuple[int, str, str, float]]] = {}
    last: dict[tuple[str, str], tuple[int, float, str]] = {}
    for client, when, tracker, cluster_id, version, status, job_id in sorted(history.reads, key=lambda x: x[1]):
        report.checked["cluster reads"] += 1
        if cluster_id not in states:
            states[cluster_id] = _versions(by_subject, cluster_id)
        versions = states[cluster_id]
        if not 1 <= version <= len(versions):
            report.problems.append(f"{client} read cluster {cluster_id} at version {version} from {tracker}; "
                                   f"the log has versions 1..{len(versions)}")
            continue
        v, log_status, log_job, decided = versions[version - 1]
        if (log_status, log_job) != (status, job_id):
            report.problems.append(f"{client} read cluster {cluster_id} v{version} as {status}/{job_id} from {tracker}; "
                                   f"the log's v{version} is {log_status}/{log_job}")
        elif decided > when + SECOND:
            report.problems.append(f"{client} read cluster {cluster_id} v{version} before the log decided it")
        before = last.get((client, cluster_id))
        if before is not None and version < before[0]:
            report.problems.append(f"{client} read cluster {cluster_id} at v{version} from {tracker} after v{before[0]} "
                                   f"from {before[2]}: back in time")
        last[(client, cluster_id)] = (max(version, before[0] if before else 0), when, tracker)


def _versions(by_subject: dict[str, list[Recorded]], cluster_id: str) -> list[tuple[int, str, str, float]]:
    """The cluster's (version, status, current job, decided at) after each of its events."""
    history = next((h for s, h in by_subject.items() if s.endswith(f".cluster.{cluster_id}")), [])
    state = ClusterState()
    out = []
    for r in history:
        state.apply(r.event)
        out.append((state.version, state.status, state.job_id or "", r.time.timestamp()))
    return out
