"""The Job aggregate: one operation on one cluster, from request to its final state.

Pure: no IO, no clock reads in apply (times come with the events), no randomness.
Commands return whether they changed anything, so a redelivered message is harmless.
"""

from __future__ import annotations

from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

from eventsourcing.domain import Aggregate, event

from contracts.events import (
    JobFailed,
    JobPlanned,
    JobRequested,
    JobSucceeded,
    TaskAttemptFailed,
    TaskCompleted,
    TaskQueued,
)

from .plan import Plan
from .scheduling import ready

FINAL_STATES = frozenset({"succeeded", "failed", "rolled_back", "needs_attention"})


def job_uuid(tenant: str, request_id: str | None) -> UUID:
    """Derived from the idempotency key when there is one, so a retried request maps to the
    same job; random otherwise."""
    if request_id:
        return uuid5(NAMESPACE_URL, f"muster:{tenant}:request:{request_id}")
    return uuid4()


class Job(Aggregate):
    @staticmethod
    def create_id(payload: JobRequested) -> UUID:  # type: ignore[override]
        return UUID(payload.job_id)

    @event("JobRequested")
    def __init__(self, payload: JobRequested) -> None:
        self.tenant = payload.tenant
        self.cluster_id = payload.cluster_id
        self.operation = payload.operation
        self.request: dict[str, Any] = dict(payload.request)
        self.requested_by = payload.requested_by
        self.planner = payload.planner
        self.state = "running"
        self.error = ""
        self.tasks: dict[str, dict[str, Any]] = {}
        self.plan: Plan | None = None
        self.mode = "eager"
        self.attempts: dict[str, int] = {}
        self.task_state: dict[str, str] = {}
        self.planned = False

    # -- planning -----------------------------------------------------------------------

    @event("JobPlanned")
    def _planned(self, payload: JobPlanned) -> None:
        self.planned = True
        self.mode = payload.mode
        self.tasks = {t.id: t.model_dump(mode="json") for t in payload.tasks}
        self.plan = Plan.from_json({"tasks": list(self.tasks.values()), "edges": payload.edges})

    def record_plan(self, payload: JobPlanned) -> bool:
        if self.planned or self.is_final:
            return False
        self._planned(payload)
        return True

    # -- dispatch -----------------------------------------------------------------------

    @event("TaskQueued")
    def _queued(self, payload: TaskQueued) -> None:
        self.attempts[payload.task_id] = payload.attempt
        self.task_state[payload.task_id] = "queued"

    def queue(self, task_id: str, provisioner_class: str = "default") -> TaskQueued:
        task = self.tasks[task_id]
        payload = TaskQueued(
            job_id=str(self.id),
            task_id=task_id,
            attempt=self.attempts.get(task_id, 0) + 1,
            node=task["node"],
            action=task["action"],
            service=task["service"],
            provisioner_class=provisioner_class,
        )
        self._queued(payload)
        return payload

    def ready(self) -> list[str]:
        """Tasks to dispatch now, by the job's mode (eager or staged), never two at once on
        one node."""
        if self.plan is None or self.state != "running":
            return []
        done = [t for t, s in self.task_state.items() if s == "succeeded"]
        running = [t for t, s in self.task_state.items() if s == "queued"]
        return list(ready(self.plan, done, running, self.mode))

    # -- outcomes -------------------------------------------------------------------------

    def is_current(self, task_id: str, attempt: int) -> bool:
        return self.attempts.get(task_id) == attempt and self.task_state.get(task_id) == "queued"

    @event("TaskCompleted")
    def _completed(self, payload: TaskCompleted) -> None:
        self.task_state[payload.task_id] = "succeeded"

    def complete(self, payload: TaskCompleted) -> bool:
        if not self.is_current(payload.task_id, payload.attempt):
            return False  # a late or repeated result of an attempt that is no longer current
        self._completed(payload)
        return True

    @event("TaskAttemptFailed")
    def _attempt_failed(self, payload: TaskAttemptFailed) -> None:
        self.task_state[payload.task_id] = "failed"

    def fail_attempt(self, payload: TaskAttemptFailed) -> bool:
        if not self.is_current(payload.task_id, payload.attempt):
            return False
        self._attempt_failed(payload)
        return True

    def retry_allowed(self, task_id: str, max_attempts: int) -> bool:
        return self.attempts.get(task_id, 0) < max_attempts

    def requeue(self, task_id: str, provisioner_class: str = "default") -> TaskQueued:
        del self.task_state[task_id]
        return self.queue(task_id, provisioner_class)

    @property
    def all_done(self) -> bool:
        return self.planned and all(self.task_state.get(t) == "succeeded" for t in self.tasks)

    @property
    def in_flight(self) -> int:
        return sum(1 for s in self.task_state.values() if s == "queued")

    # -- views --------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The job as its owner sees it (the tracker adds where each task runs)."""
        tasks = [
            {**t, "state": self.task_state.get(t["id"], "planned"), "attempt": self.attempts.get(t["id"], 0)}
            for t in self.tasks.values()
        ]
        counts: dict[str, int] = {}
        for t in tasks:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        done = {t for t, s in self.task_state.items() if s == "succeeded"}
        stages = self.plan.stages if self.plan is not None else ()
        current = next((i for i, st in enumerate(stages, 1) if not set(st) <= done), None)
        return {
            "id": str(self.id), "tenant": self.tenant, "cluster_id": self.cluster_id, "operation": self.operation,
            "state": self.state, "error": self.error or None, "owner": self.planner, "mode": self.mode,
            "requested_by": self.requested_by, "started_at": self.created_on.isoformat(),
            "finished_at": self.modified_on.isoformat() if self.is_final else None,
            "counts": dict(sorted(counts.items())), "tasks_total": len(tasks),
            "stage": {"current": current, "total": len(stages)}, "tasks": tasks,
        }

    # -- the end --------------------------------------------------------------------------

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @event("JobSucceeded")
    def _succeeded(self, payload: JobSucceeded) -> None:
        self.state = "succeeded"

    def succeed(self) -> bool:
        if self.is_final:
            return False
        self._succeeded(JobSucceeded(job_id=str(self.id)))
        return True

    @event("JobFailed")
    def _failed(self, payload: JobFailed) -> None:
        self.state = "failed"
        self.error = payload.reason

    def fail(self, reason: str) -> bool:
        if self.is_final:
            return False
        self._failed(JobFailed(job_id=str(self.id), reason=reason))
        return True
