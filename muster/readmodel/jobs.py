"""A job as its events tell it: the read-side fold of `muster.evt.<tenant>.job.<id>` (pure).

The planner's Job aggregate decides; this only replays what it decided, so it needs none of
the planner's code: every state change is in an event. `JobView.view()` is the same document
the owning planner answers with (`Job.view()`): `tests/unit/readmodel/test_jobs.py` drives the
aggregate through retries, cleanups, pauses, rollbacks and job retries and compares the two
after every event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from contracts.events import FINAL_JOB_STATES, FINAL_STATE_OF
from contracts.records import Recorded


def trace_id(traceparent: str | None) -> str | None:
    """The id of a job's trace (`JobRequested.trace`, a W3C traceparent: its second field), which
    a tracing UI looks up; None when the job is not traced (tracing off). It was only in the
    job's first event, which a user dug out with curl and cut (docs/tracing.md)."""
    parts = traceparent.split("-") if traceparent else []
    return parts[1] if len(parts) == 4 else None


def shown_state(state: str | None, timed_out: bool, cancelled: bool) -> str:
    """A task's state as the views show it (`contracts.events.TaskState`) from the fold's:
    `timed_out` for a failed attempt that timed out; `cancelled` for a forward task never
    queued in a job cancelled meanwhile (`cancelled`: the job asked to cancel, the task forward)."""
    if state is None:
        return "cancelled" if cancelled else "planned"
    return "timed_out" if timed_out and state == "failed" else state


class JobView:
    """Folds one job's own events, in log order. Unknown event types are skipped, so an older
    reader survives a newer log."""

    def __init__(self) -> None:
        self.id = ""
        self.tenant = ""
        self.cluster_id = ""
        self.operation = ""
        self.requested_by = ""
        self.owner = ""
        self.state = "running"
        self.error = ""
        self.mode = "eager"
        self.paused = False
        self.tasks: dict[str, dict[str, Any]] = {}
        self.attempts: dict[str, int] = {}
        self.task_state: dict[str, str] = {}
        self.timed_out: set[str] = set()
        self.cancelled = False
        self.forward_tasks: list[dict[str, Any]] = []
        self.forward_links: list[tuple[list[str], list[str]]] = []
        self.forward_stages: list[list[str]] = []
        self.rollback_tasks: list[dict[str, Any]] = []
        self.rollback_links: list[tuple[list[str], list[str]]] = []
        self.rollback_stages: list[list[str]] | None = None
        self.started_at: str | None = None
        self.updated_at: str | None = None
        self.resources: dict[str, Any] | None = None
        self.approval: dict[str, Any] | None = None
        self.warnings: list[dict[str, Any]] = []
        self.trace: str | None = None

    @property
    def requested(self) -> bool:
        return bool(self.id)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_JOB_STATES

    @property
    def stages(self) -> list[list[str]]:
        """The stages of the plan being run: the rollback's while rolling back."""
        if self.state == "rolling_back" and self.rollback_stages is not None:
            return self.rollback_stages
        return self.forward_stages

    def graph(self) -> dict[str, Any]:
        """The plans as graphs: the forward plan and the rollback being (or last) run, each with
        its tasks, links (`[sources, targets]`: every source before every target) and stages;
        cleanup tasks (deletes of half-made machines) apart."""
        planned = {t["id"] for t in self.forward_tasks} | {t["id"] for t in self.rollback_tasks}
        return {
            "forward": {"tasks": self.forward_tasks, "links": self.forward_links, "stages": self.forward_stages},
            "rollback": None if self.rollback_stages is None else
            {"tasks": self.rollback_tasks, "links": self.rollback_links, "stages": self.rollback_stages},
            "cleanups": [t for t in self.tasks.values() if t["id"] not in planned],
        }

    def task(self, task_id: str) -> dict[str, Any] | None:
        """One task's state and attempt, as in the view (O(1))."""
        t = self.tasks.get(task_id)
        if t is None:
            return None
        return {**t, "state": self._state(task_id), "attempt": self.attempts.get(task_id, 0)}

    def _state(self, task_id: str) -> str:
        forward = self.cancelled and any(t["id"] == task_id for t in self.forward_tasks)
        return shown_state(self.task_state.get(task_id), task_id in self.timed_out, forward)

    def apply(self, r: Recorded) -> None:
        e = r.event
        handler = _APPLY.get(e.type)
        if handler is None or (not self.requested and e.type != "JobRequested"):
            return
        handler(self, e)
        self.started_at = self.started_at or r.time.isoformat()
        self.updated_at = r.time.isoformat()

    def states(self) -> Iterator[tuple[str, str, int]]:
        """(id, state as shown, attempt) of every task, in the view's order, without the view."""
        forward = {t["id"] for t in self.forward_tasks} if self.cancelled else set()
        for i in self.tasks:
            yield i, shown_state(self.task_state.get(i), i in self.timed_out, i in forward), self.attempts.get(i, 0)

    def shown(self) -> str:
        """The job's state as the view shows it."""
        waiting = (self.resources is not None and not self.resources["granted"] and not self.resources.get("ended")
                   and self.state == "running")
        approving = self.approval is not None and self.approval["decision"] is None and not self.is_final
        return ("paused" if self.paused and not self.is_final else "waiting_for_approval" if approving else
                "waiting_for_resources" if waiting else self.state)

    def view(self) -> dict[str, Any]:
        """The job as its owner sees it (the tracker adds where each task runs)."""
        tasks = [{**self.tasks[i], "state": state, "attempt": attempt} for i, state, attempt in self.states()]
        counts: dict[str, int] = {}
        for t in tasks:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        done = {t for t, s in self.task_state.items() if s == "succeeded"}
        stages = self.stages
        current = next((i for i, st in enumerate(stages, 1) if not set(st) <= done), None)
        return {
            "id": self.id, "tenant": self.tenant, "cluster_id": self.cluster_id, "operation": self.operation,
            "state": self.shown(),
            "error": self.error or None, "owner": self.owner, "mode": self.mode,
            "requested_by": self.requested_by, "started_at": self.started_at,
            "finished_at": self.updated_at if self.is_final else None,
            "counts": dict(sorted(counts.items())), "tasks_total": len(tasks),
            "stage": {"current": current, "total": len(stages)}, "tasks": tasks,
            "resources": dict(self.resources) if self.resources else None,
            "approval": dict(self.approval) if self.approval else None, "policy_warnings": list(self.warnings),
            "trace_id": trace_id(self.trace),
        }

    # -- one method per event type ---------------------------------------------------------

    def _requested(self, e: Any) -> None:
        self.id = e.job_id
        self.tenant, self.cluster_id, self.operation = e.tenant, e.cluster_id, e.operation
        self.requested_by, self.owner = e.requested_by, e.planner
        self.trace = getattr(e, "trace", None)

    def _planned(self, e: Any) -> None:
        self.mode = e.mode
        self.tasks = {t.id: _task(t.id, t.node, t.action.value, t.service) for t in e.tasks}
        self.forward_tasks = list(self.tasks.values())
        self.forward_links = [(list(a), list(b)) for a, b in e.links]
        self.forward_stages = [list(s) for s in e.stages]

    def _queued(self, e: Any) -> None:
        self.attempts[e.task_id] = e.attempt
        self.task_state[e.task_id] = "queued"

    def _completed(self, e: Any) -> None:
        self.task_state[e.task_id] = "succeeded"

    def _attempt_failed(self, e: Any) -> None:
        if e.state == "cancelled":  # (never claimed when its job was cancelled: it never ran)
            self.task_state[e.task_id] = "cancelled"
            return
        self.task_state[e.task_id] = "failed"
        if e.state == "timed_out":
            self.timed_out.add(e.task_id)
        else:
            self.timed_out.discard(e.task_id)

    def _cancel_requested(self, e: Any) -> None:
        self.paused, self.cancelled = False, True  # a cancel unpauses: the rollback must run

    def _cleanup_queued(self, e: Any) -> None:
        self.tasks[e.task_id] = _task(e.task_id, e.node, "delete", None)
        self.attempts[e.task_id] = e.attempt
        self.task_state[e.task_id] = "queued"
        create = next((t["id"] for t in self.forward_tasks if t["node"] == e.node and t["action"] == "create"), None)
        if create is not None and create != e.for_task:
            self.task_state.pop(create, None)  # the machine goes, so create runs again

    def _paused(self, e: Any) -> None:
        self.paused = True

    def _resumed(self, e: Any) -> None:
        self.paused = False

    def _adopted(self, e: Any) -> None:
        self.owner = e.planner

    def _retried(self, e: Any) -> None:
        self.paused = False
        if getattr(e, "rollback", False):  # (v2) the rest of its rollback, again: what it undid stays undone
            self.state, self.error = "rolling_back", e.reason
            for t in self.rollback_tasks:
                if self.task_state.get(t["id"]) != "succeeded":
                    self.task_state.pop(t["id"], None)
                    self.timed_out.discard(t["id"])
            return
        self.state, self.error, self.cancelled = "running", "", False
        self.task_state = {}
        if self.resources is not None:  # (as the planner's Job: the last run's pool request ended with it)
            self.resources = {**self.resources, "ended": True}

    def _layout_retried(self, e: Any) -> None:
        self.state, self.error = "running", ""
        self.tasks, self.task_state = {}, {}
        self.forward_tasks, self.forward_links, self.forward_stages = [], [], []
        self.rollback_tasks, self.rollback_links, self.rollback_stages = [], [], None

    def _rollback_planned(self, e: Any) -> None:
        self.state, self.error = "rolling_back", e.reason
        self.rollback_tasks = [_task(t.id, t.node, t.action.value, t.service) for t in e.tasks]
        self.rollback_links = [(list(a), list(b)) for a, b in e.links]
        self.rollback_stages = [list(s) for s in e.stages]
        self.tasks.update({t["id"]: t for t in self.rollback_tasks})

    def _resources_requested(self, e: Any) -> None:
        self.resources = {"pool": e.pool, "request_id": e.request_id, "hosts": e.hosts, "granted": False}

    def _resources_granted(self, e: Any) -> None:
        if self.resources is not None:
            self.resources = {**self.resources, "granted": True}

    def _approval_requested(self, e: Any) -> None:
        self.approval = {**e.model_dump(mode="json", exclude={"type", "v", "job_id"}), "decision": None, "by": None, "comment": ""}

    def _decided(self, e: Any) -> None:
        if self.approval is not None:
            decision = {"JobApproved": "approved", "JobRejected": "rejected"}.get(e.type, "expired")
            self.approval = {**self.approval, "decision": decision, "by": getattr(e, "by", None),
                             "comment": getattr(e, "comment", "")}
            if getattr(e, "cost", None) is not None:  # judged again at the approval (decision 42)
                self.approval["approved_cost"] = e.cost.model_dump(mode="json")

    def _warned(self, e: Any) -> None:
        self.warnings = [w.model_dump(mode="json") for w in e.warnings]

    def _ended(self, e: Any) -> None:
        self.state = FINAL_STATE_OF[e.type]
        if e.type in ("JobFailed", "JobNeedsAttention", "JobRolledBack"):  # (a rollback's: the reason it started with)
            self.error = e.reason


def _task(task_id: str, node: str, action: str, service: str | None) -> dict[str, Any]:
    return {"id": task_id, "node": node, "action": action, "service": service}


_APPLY = {
    "JobRequested": JobView._requested,
    "JobPlanned": JobView._planned,
    "TaskQueued": JobView._queued,
    "TaskCompleted": JobView._completed,
    "TaskAttemptFailed": JobView._attempt_failed,
    "CleanupQueued": JobView._cleanup_queued,
    "JobPaused": JobView._paused,
    "JobResumed": JobView._resumed,
    "JobAdopted": JobView._adopted,
    "JobCancelRequested": JobView._cancel_requested,
    "JobRetried": JobView._retried,
    "JobLayoutRetried": JobView._layout_retried,
    "RollbackPlanned": JobView._rollback_planned,
    "JobResourcesRequested": JobView._resources_requested,
    "JobResourcesGranted": JobView._resources_granted,
    "JobApprovalRequested": JobView._approval_requested,
    "JobApproved": JobView._decided,
    "JobRejected": JobView._decided,
    "JobApprovalExpired": JobView._decided,
    "PolicyWarned": JobView._warned,
    **{t: JobView._ended for t in FINAL_STATE_OF},
}
"""Routing table: which job event changes the view, and how (every other type is skipped)."""


def job_view(job_history: Iterable[Recorded]) -> dict[str, Any] | None:
    """The owner's view, rebuilt from the job's own events; None without a JobRequested."""
    job = JobView()
    for r in job_history:
        job.apply(r)
    return job.view() if job.requested else None
