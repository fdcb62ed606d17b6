"""A job's status as the tracker answers it (pure).

The job's own view comes from its owner (the planner answers with `Job.view()`) or, when the
owner is gone, from the job's events folded by `jobs.JobView`, which gives the very same view.
Either way the tracker adds where each task runs (its location) and the layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contracts.records import Recorded

from .jobs import job_view
from .locations import Record, merge_all, parse_subject, updates_from

JOB_FIELDS = ("id", "tenant", "cluster_id", "operation", "state", "error", "owner", "requested_by", "mode",
              "started_at", "finished_at", "resources", "approval", "policy_warnings", "trace_id")


def located(t: Mapping[str, Any], loc: Record | None) -> dict[str, Any]:
    """A task of the job's view with where its current attempt runs (a claimed current
    attempt counts as `claimed`); an older attempt's location is not shown."""
    attempt = int(t.get("attempt") or 0)
    run_attempt, run_state = (loc.get("attempt"), loc.get("state")) if loc is not None else (None, None)
    here = loc is not None and attempt > 0 and run_attempt == attempt
    return {
        "id": t.get("id"), "node": t.get("node"), "action": t.get("action"), "service": t.get("service"),
        "state": running_state(t.get("state"), attempt, run_attempt, run_state), "attempt": attempt,
        "provisioner": loc.get("provisioner") if here else None,  # type: ignore[union-attr]
        "worker": loc.get("worker") if here else None,  # type: ignore[union-attr]
    }


def running_state(state: Any, attempt: int, run_attempt: Any, run_state: Any) -> Any:
    """A task's state with its current attempt's latest claim or outcome (`run_*`): a claimed
    current attempt counts as `claimed` (a claim of an older attempt says nothing)."""
    if state == "queued" and attempt > 0 and run_attempt == attempt and run_state == "claimed":
        return "claimed"
    return state


def compose(view: Mapping[str, Any], locations: Mapping[str, Record], layout: Any, source: str) -> dict[str, Any]:
    """The answer of `GET /v1/jobs/{id}`: the job's view, each task with its location, counts
    of tasks by state."""
    tasks = [located(t, locations.get(str(t.get("id")))) for t in view.get("tasks", ())]
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    body = {k: view.get(k) for k in JOB_FIELDS}
    body.update(
        counts=dict(sorted(counts.items())), tasks_total=len(tasks),
        stage=dict(view.get("stage") or {"current": None, "total": 0}),
        layout=layout, tasks=tasks, source=source,
    )
    return body


def split_history(history: Iterable[Recorded]) -> tuple[list[Recorded], list[Recorded], list[Recorded]]:
    """A job's story by subject kind: (job, layout, task events)."""
    job: list[Recorded] = []
    layout: list[Recorded] = []
    tasks: list[Recorded] = []
    by_kind = {"job": job, "layout": layout, "task": tasks}
    for r in history:
        parsed = parse_subject(r.subject)
        if parsed is not None and parsed[1] in by_kind:
            by_kind[parsed[1]].append(r)
    return job, layout, tasks


def task_records(task_history: Iterable[Recorded], base: Mapping[str, Record] | None = None) -> dict[str, Record]:
    """Task locations folded from task events, on top of `base` (records by task id)."""
    records: dict[str, Record] = dict(base or {})
    for r in task_history:
        for u in updates_from(r.seq, r.subject, r.time.isoformat(), r.event):
            task_id = u.ident.get("task_id")
            if task_id is not None:
                records[task_id] = merge_all(records.get(task_id), [u])  # type: ignore[assignment]
    return records


def layout_of(layout_history: Iterable[Recorded]) -> Any:
    """The job's layout: the last solved one, as JSON."""
    solved = [r.event for r in layout_history if r.type == "LayoutSolved"]
    return solved[-1].layout.model_dump(mode="json") if solved else None


def status_from_log(history: list[Recorded]) -> dict[str, Any] | None:
    job, layout, tasks = split_history(history)
    view = job_view(job)
    if view is None:
        return None
    return compose(view, task_records(tasks), layout_of(layout), "log")
