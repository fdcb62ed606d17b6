"""The pages of a large job (above `bigjob.BIG` tasks; docs/ui.md, "Large jobs").

Its summary, its graph as one group per stage with counts, one page of its tasks (filtered by
state and group, those that need attention first), a group's tasks on demand, and a task's
attempts read from that task's own subjects. All from the job's kept fold (folds.py), never from its whole
history again.
"""

from __future__ import annotations

from aiohttp import web

from contracts import subjects
from contracts.subjects import SubjectError
from muster import tracing

from ..people import cluster_name
from ..planner_view import status_for
from .bigjob import ATTENTION, GROUP_TASKS, PAGE_ROWS, JobFold, aggregate, group_title, lines_for, rows
from .controls import CONTROLS, controls_for
from .folds import JobFolds
from .graph import attempts
from .kit import NotFound, priced_for, render, tracker_of
from .session import Viewer

FOLDS = web.AppKey("console-folds", JobFolds)


def readable(fold: JobFold, viewer: Viewer, job_id: str) -> JobFold:
    if not fold.job.requested or not viewer.may_job("read", job_id, fold.job.cluster_id):
        raise NotFound(f"There is no job {job_id} in tenant {viewer.tenant}.")
    return fold


def _filters(request: web.Request, fold: JobFold) -> tuple[str | None, str | None, int]:
    q = request.query
    state = q.get("state") or None
    if state is not None and state not in ATTENTION:
        raise NotFound(f"{state[:40]!r} is not a task state; task states are {', '.join(ATTENTION)}.")
    part = q.get("part") or None
    if part is not None and part not in {k for k, _, _ in fold.plan()[0].values()}:
        raise NotFound(f"Job {fold.job.id} has no stage {part[:40]!r}; stages are named like forward:1, rollback:1 or cleanup.")
    raw = q.get("page", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
        raise NotFound(f"page {raw[:20]!r} is not a page number (1, 2, ...).")
    return state, part, int(raw)


async def job(request: web.Request, viewer: Viewer, job_id: str, fold: JobFold, said: str | None) -> web.StreamResponse:
    readable(fold, viewer, job_id)
    state, part, number = _filters(request, fold)
    status = await priced_for(request, viewer, job_id, await tracker_of(request).with_cost_now(
        viewer.tenant, job_id, await tracker_of(request).place_in_line(fold.now())))
    status = status if viewer.operator else status_for(status)  # (the fold is shared by every viewer)
    agg = aggregate(fold)
    shown, matching = rows(fold, state, part, (number - 1) * PAGE_ROWS)
    cluster = fold.job.cluster_id
    return render(request, "job.html", viewer, job_id=job_id, big=True, group="stage", open_task=None, said=said,
                  cluster_name=await cluster_name(tracker_of(request), viewer.tenant, cluster) if cluster else "",
                  can_control=viewer.may_job("execute", job_id, cluster), why_no_control=viewer.why_not_job("execute", job_id, cluster),
                  controls=CONTROLS,
                  allowed=controls_for(status["state"], bool(status["tasks_total"])),
                  can_approve=viewer.may_job("approve", job_id, cluster), why_no_approve=viewer.why_not_job("approve", job_id, cluster),
                  status=status, graph=agg, graph_json=agg,
                  unserved=await tracker_of(request).warnings(viewer.tenant, status),
                  rows=shown, matching=matching, filter_state=state, filter_part=part, page_no=number,
                  pages=max(1, -(-matching // PAGE_ROWS)), states=ATTENTION, title_of=group_title,
                  timeline=lines_for(fold.lines, viewer.operator), timeline_total=fold.lines_total, seq=fold.seq, trace_url=tracing.link(fold.trace))


def graph(request: web.Request, fold: JobFold) -> web.StreamResponse:
    """The aggregate, or with `?part=` one group's tasks (at most GROUP_TASKS, those that need
    attention first)."""
    part = request.query.get("part")
    if part is None:
        body = aggregate(fold)
    else:
        _filters(request, fold)
        tasks, total = rows(fold, None, part, 0, GROUP_TASKS)
        body = {"part": part, "title": group_title(part), "tasks": tasks, "total": total, "seq": fold.seq}
    return web.json_response(body, headers={"Cache-Control": "no-store"})


async def task(request: web.Request, viewer: Viewer, job_id: str, fold: JobFold, task_id: str) -> web.StreamResponse:
    """A task of a large job: its state from the fold, its attempts from its own subjects (claims,
    outcomes, output lines; when each was queued and taken is in `muster history`)."""
    found = fold.task(task_id)
    if found is None:
        raise NotFound(f"Job {job_id} has no task {task_id}.")
    _, phase, stage = fold.plan()[0].get(task_id, ("cleanup", "cleanup", None))
    try:
        pattern = subjects.task_history_filter(viewer.tenant, job_id, task_id)[:-1] + ">"
    except SubjectError:
        raise NotFound(f"{task_id[:80]!r} is not a task id.") from None
    history = await tracker_of(request).store.read(pattern)
    template = "_task.html" if request.query.get("fragment") else "task.html"
    owner = fold.job.cluster_id
    name = await cluster_name(tracker_of(request), viewer.tenant, owner) if owner and template == "task.html" else ""
    return render(request, template, viewer, job_id=job_id, status={"cluster_id": owner}, seq=fold.seq, cluster_name=name,
                  final=fold.job.is_final,
                  open_task={"task": {**found, "phase": phase, "stage": stage}, "attempts": attempts(history, task_id), "partial": True})
