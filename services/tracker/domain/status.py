"""A job's status, folded from its events (pure). Used when the owner of the job's state does
not answer, and by tools that read the log directly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from contracts.events import (
    JobFailed,
    JobPlanned,
    JobRequested,
    JobSucceeded,
    LayoutSolved,
    LayoutUnsolvable,
    TaskAttemptFailed,
    TaskClaimed,
    TaskCompleted,
    TaskFailed,
    TaskQueued,
    TaskSucceeded,
)
from muster.bus.eventstore import Recorded


def job_status(history: Iterable[Recorded]) -> dict[str, Any] | None:
    status: dict[str, Any] | None = None
    tasks: dict[str, dict[str, Any]] = {}
    stages: list[list[str]] = []
    for r in history:
        e = r.event
        if isinstance(e, JobRequested):
            status = {
                "id": e.job_id, "tenant": e.tenant, "cluster_id": e.cluster_id, "operation": e.operation,
                "state": "running", "requested_by": e.requested_by, "owner": e.planner,
                "started_at": r.time.isoformat(), "finished_at": None, "error": None, "layout": None,
            }
        if status is None:
            continue
        if isinstance(e, LayoutSolved):
            status["layout"] = e.layout.model_dump(mode="json")
        elif isinstance(e, LayoutUnsolvable):
            status["error"] = e.message
        elif isinstance(e, JobPlanned):
            stages = e.stages
            for t in e.tasks:
                tasks[t.id] = {"id": t.id, "node": t.node, "action": t.action.value, "service": t.service,
                               "state": "planned", "attempt": 0, "provisioner": None, "worker": None}
        elif isinstance(e, TaskQueued) and e.task_id in tasks:
            tasks[e.task_id].update(state="queued", attempt=e.attempt, provisioner=None, worker=None)
        elif isinstance(e, TaskClaimed) and _current(tasks, e.task_id, e.attempt):
            tasks[e.task_id].update(state="claimed", provisioner=e.provisioner, worker=e.worker)
        elif isinstance(e, (TaskSucceeded, TaskCompleted)) and _current(tasks, e.task_id, e.attempt):
            tasks[e.task_id]["state"] = "succeeded"
        elif isinstance(e, (TaskFailed, TaskAttemptFailed)) and _current(tasks, e.task_id, e.attempt):
            tasks[e.task_id]["state"] = "failed"
        elif isinstance(e, JobSucceeded):
            status.update(state="succeeded", finished_at=r.time.isoformat())
        elif isinstance(e, JobFailed):
            status.update(state="failed", finished_at=r.time.isoformat(), error=e.reason)
    if status is None:
        return None
    done = {t for t, v in tasks.items() if v["state"] == "succeeded"}
    current = next((i for i, s in enumerate(stages, 1) if not set(s) <= done), None)
    status.update(
        counts=dict(sorted(Counter(v["state"] for v in tasks.values()).items())),
        tasks_total=len(tasks),
        stage={"current": current, "total": len(stages)},
        tasks=list(tasks.values()),
    )
    return status


def _current(tasks: dict[str, dict[str, Any]], task_id: str, attempt: int) -> bool:
    return task_id in tasks and tasks[task_id]["attempt"] == attempt
