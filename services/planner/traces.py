"""The planner's part of a job's trace (docs/tracing.md), through `muster.tracing`.

The job's span and each task attempt's span are made when they end, with ids fixed before
(the job's in `JobRequested.trace`, an attempt's derived from it): whichever planner holds the
job then makes them, with the times the log gives. An attempt's span runs from its queueing to
its outcome; the provisioner's claim and run are in it (the task message's `traceparent`).
The planner's own steps (planning, taking an outcome) are spans under the job's; its turns
(a retry, a rollback, a pause) are marks: spans of no length under the job's. A retried job's
later runs are spans of their own (`job <operation> (retry <n>)`), children of the job's, each
holding its run's steps, attempts and marks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from muster import tracing

from .domain.job import Job

tracer = tracing.Tracer("muster.planner")

MARKS = {
    "TaskAttemptFailed": "attempt failed", "RollbackPlanned": "rollback planned", "JobRetried": "job retried",
    "JobPaused": "job paused", "JobResumed": "job resumed", "JobCancelRequested": "job cancel requested",
    "JobAdopted": "job adopted", "CleanupQueued": "cleanup queued",
    # Governance (docs/governance.md): a job that waited an hour for its approver showed an hour
    # of nothing in its trace; who decided, and when, is the job's turn as a retry is.
    "JobApprovalRequested": "waits for approval", "JobApproved": "job approved", "JobRejected": "job rejected",
    "JobApprovalExpired": "approval expired", "PolicyWarned": "policy warned",
}
"""The job's turns worth a mark, by event type."""


def _told(event: Any) -> dict[str, Any]:
    """What a governance mark says: who decided, the rules and until when it waits, a policy's
    warnings. Never an approver's comment: their own words, which may hold anything."""
    rules, warnings = getattr(event, "rules", None), getattr(event, "warnings", None)
    expires = getattr(event, "expires_at", None)
    return {"by": getattr(event, "by", None), "rules": ", ".join(rules) if rules else None,
            "expires_at": expires.isoformat() if isinstance(expires, datetime) else expires,
            "warnings": "; ".join(warnings)[:200] if warnings else None}


def of(job: Job) -> str | None:
    """The job's span (None: not traced, or a job from before traces)."""
    return getattr(job, "trace", None)


def of_run(job: Job) -> str | None:
    """The span of the job's current run: the job's own for its first, then each retry's
    (`muster job retry`), a child of the job's made once at that run's end."""
    return tracing.run(of(job), str(job.id), getattr(job, "runs", 0))


def attributes(job: Job) -> dict[str, Any]:
    return {"tenant": job.tenant, "cluster": job.cluster_id, "job": str(job.id), "operation": job.operation}


def span(job: Job, name: str, parent: str | None = None, **attrs: Any) -> Any:
    """A span of the planner's about a traced job, under `parent` (default: its run's span);
    nothing for a job that is not traced."""
    trace = of_run(job)
    if trace is None or not tracing.enabled():
        return nullcontext()
    return tracer.span(name, parent or trace, **attributes(job), **attrs)


def answered(span: Any, reply: Any) -> None:
    """What a request came to, on its span."""
    tracing.set_attributes(span, answer=reply.type, job=getattr(reply, "job_id", None),
                           cluster=getattr(reply, "cluster_id", None), plan=getattr(reply, "plan_id", None))
    if reply.type == "Rejected":
        tracing.set_error(span, reply.reason)


class JobTraces:
    """When each attempt was queued (its span's start), while the planner holds its job."""

    def __init__(self) -> None:
        self.queued: dict[tuple[str, str, int], datetime] = {}

    def queue(self, job: Job, attempts: Sequence[tuple[str, int, datetime]]) -> list[str | None] | None:
        """The task messages' contexts for these attempts (None when the job is not traced)."""
        parent = of(job) if tracing.enabled() else None
        if parent is None:
            return None
        job_id = str(job.id)
        out: list[str | None] = []
        for task_id, attempt, at in attempts:
            self.queued.setdefault((job_id, task_id, attempt), at)
            out.append(tracing.attempt(parent, job_id, task_id, attempt))
        return out

    def queued_at(self, job: Job, times: dict[tuple[str, int], datetime]) -> None:
        """The log's queueing times of a job taken up (after a restart or a takeover)."""
        if tracing.enabled() and of(job) is not None:
            job_id = str(job.id)
            for (task_id, attempt), at in times.items():
                self.queued.setdefault((job_id, task_id, attempt), at)

    def attempt_ended(self, job: Job, task_id: str, attempt: int, at: datetime, *, error: str | None = None,
                      **attrs: Any) -> None:
        """The attempt's span, from its queueing to `at`, under its run's."""
        parent = of(job)
        if parent is None or not tracing.enabled():
            return
        job_id = str(job.id)
        start = self.queued.pop((job_id, task_id, attempt), at)
        tracer.record(f"task {task_id}", tracing.attempt(parent, job_id, task_id, attempt), of_run(job), start, at, error=error,
                      task=task_id, attempt=attempt, **attributes(job), **attrs)

    def ended(self, job: Job, at: datetime) -> None:
        """The span of the job's run that just ended (its final event just recorded): the job's
        own, from its request to `at`; after a retry, the retry's, from the retry to `at`, under
        the job's. Each is made once: a retried job's span made again with the same id was
        shown twice (Jaeger warned of a duplicate span id)."""
        if of(job) is None or not tracing.enabled():
            return
        job_id = str(job.id)
        for key in [k for k in self.queued if k[0] == job_id]:
            del self.queued[key]
        run = getattr(job, "runs", 0)
        name, parent, start = f"job {job.operation}", getattr(job, "trace_parent", None), job.created_on
        if run:
            name, parent, start = f"job {job.operation} (retry {run})", of(job), getattr(job, "run_started", None) or at
        tracer.record(name, of_run(job), parent, start, at, error=job.error or job.state if job.state != "succeeded" else None,
                      state=job.state, run=run, **attributes(job))


def marks(job: Job, events: Iterable[Any]) -> None:
    """A mark under the run's span for each turn among these events (about to be recorded): a
    retry's `job retried` opens its run."""
    parent = of_run(job)
    if parent is None or not tracing.enabled():
        return
    for event in events:
        name = MARKS.get(getattr(event, "type", ""))
        if name is not None:
            # A failed attempt's event names its reason `error` (masked as the log has it); cut as
            # a failed span's status is.
            reason = getattr(event, "reason", None) or getattr(event, "error", None)
            with tracer.span(name, parent, task=getattr(event, "task_id", None), attempt=getattr(event, "attempt", None),
                             reason=reason[:200] if isinstance(reason, str) else reason, **_told(event), **attributes(job)):
                pass
