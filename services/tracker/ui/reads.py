"""What each console page reads, always within one tenant: the tracker's own use cases (index,
log, status fold, cluster replay), the catalog store, provisioner presence and the planners'
queue metrics.

No page folds the log a second way: job states come from `status_from_log`, a cluster at a point of
the log from `replay_cluster` (the code behind `muster replay`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts import subjects
from muster import tracing
from muster.catalog.sensitive import redact
from muster.catalog.store import read_state
from muster.readmodel.jobs import JobView
from muster.readmodel.status import compose, layout_of, split_history, task_records
from muster.readmodel.timeline import timeline
from services.provisioner.plugins.specs import catalog_plugins
from services.provisioner.presence import live_provisioners

from .. import planner_view
from ..app import Tracker
from ..metrics import PlannerQueues
from ..planner_view import recorded_for, status_for
from ..story import cluster_history, replay_cluster
from .graph import plan_graph

TIMELINE_TAIL = 200
"""Lines of a job's timeline on its page (the whole history is one link away)."""


def lines_json(history: list[Any]) -> list[dict[str, Any]]:
    return [line.to_json() for line in timeline(history)]


# -- jobs ------------------------------------------------------------------------------------------


async def job_history(tracker: Tracker, tenant: str, job_id: str) -> list[Any]:
    # Pinned at the log's end first: the filters are read one after another, so without a pin an
    # event on a filter read early could be missing while a later one on another is in, and the
    # page, taking the history as complete up to its last event, would drop that live update.
    end = (await tracker.nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    return await tracker.store.read_many(subjects.job_history_filters(tenant, job_id), up_to_seq=end)


def fold(history: list[Any]) -> tuple[JobView, dict[str, Any]] | None:
    """The job's view (read model) and its status as the API's log fold gives it."""
    job_events, layout, tasks = split_history(history)
    view = JobView()
    for r in job_events:
        view.apply(r)
    if not view.requested:
        return None
    return view, compose(view.view(), task_records(tasks), layout_of(layout), "log")


def job_page(history: list[Any]) -> dict[str, Any] | None:
    """Status, graph and recent timeline of a job, all as of the last event read (`seq`); the
    page's live stream continues from there."""
    folded = fold(history)
    if folded is None:
        return None
    view, status = folded
    lines = lines_json([r for r in history if r.type != "TaskProgressed"])  # shown under their task instead
    requested = next((r.event for r in history if r.type == "JobRequested"), None)
    return {"status": status, "graph": plan_graph(view.graph(), status), "timeline": lines[-TIMELINE_TAIL:],
            "timeline_total": len(lines), "seq": history[-1].seq if history else 0,
            "trace_url": tracing.link(getattr(requested, "trace", None))}


def graph_json(history: list[Any]) -> dict[str, Any]:
    folded = fold(history)
    graph = plan_graph(folded[0].graph(), folded[1]) if folded else plan_graph({}, None)
    return {**graph.to_json(), "seq": history[-1].seq if history else 0}


# -- clusters --------------------------------------------------------------------------------------


async def cluster_page(tracker: Tracker, tenant: str, cluster_id: str, seq: int | None,
                       operator: bool) -> dict[str, Any] | None:
    """The cluster now (or as `muster replay --seq` shows it after log sequence `seq`), its
    jobs and its timeline (its own events and its jobs'); not for an `operator`, with "a
    planner" for a planner's name (planner_view.py)."""
    history = await cluster_history(tracker.store, tenant, cluster_id)
    replay = await replay_cluster(tracker.store, tenant, cluster_id, seq, None, tracker.stories) if history else None
    if replay is None:
        return None
    jobs_ = tracker.list_jobs(tenant, cluster_id, None, 0, 500).items if tracker.index is not None else []
    if not operator:
        history, jobs_ = [recorded_for(r) for r in history], [status_for(j) for j in jobs_]
    return {"timeline": lines_json(history), "replay": replay, "seq": seq, "last_seq": history[-1].seq, "jobs": jobs_}


async def replay_at(tracker: Tracker, tenant: str, cluster_id: str, seq: int) -> dict[str, Any] | None:
    return await replay_cluster(tracker.store, tenant, cluster_id, seq, None, tracker.stories)


def clusters(tracker: Tracker, tenant: str) -> list[dict[str, Any]]:
    if tracker.index is None:
        return []
    out, after = [], 0
    while True:
        page = tracker.list_clusters(tenant, after, 500)
        out += page.items
        if page.next_after is None:
            return out
        after = page.next_after


def jobs(tracker: Tracker, tenant: str, state: str | None) -> list[dict[str, Any]]:
    if tracker.index is None:
        return []
    out, after = [], 0
    while True:
        page = tracker.list_jobs(tenant, None, state, after, 500)
        out += page.items
        if page.next_after is None:
            return out
        after = page.next_after


# -- catalog and provisioners ------------------------------------------------------------------------


async def catalog(tracker: Tracker, tenant: str) -> dict[str, Any]:
    """The tenant's catalog from the log, sensitive provider fields masked (as `muster catalog
    get` shows it)."""
    state = await read_state(tracker.store, tenant)
    shown = redact(state.catalog, catalog_plugins())
    return {"catalog": shown, "last_seq": state.last_seq, "versions": state.versions}


async def provisioners(tracker: Tracker, tenant: str, operator: bool) -> dict[str, Any]:
    """Live provisioners serving the tenant (other tenants they serve are counted, not named),
    and the planners' queues of the tenant with their worker recommendation; each queue's
    planner by its instance name to operators, "a planner" to the tenant's people (planner_view)."""
    live = await live_provisioners(tracker.nc, tenant=tenant)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for p in live:
        rows.append({
            "id": p.info.id, "class": p.info.provisioner_class, "capacity": p.info.capacity, "in_flight": p.in_flight,
            "draining": p.draining, "seen_s": max(0.0, (now - p.refreshed_at).total_seconds()),
            "refreshed_at": p.refreshed_at.isoformat(), "other_tenants": len([t for t in p.info.tenants if t != tenant]),
            "plugins": [{"name": x.get("name"), "type": x.get("type"), "version": x.get("version")} for x in p.info.plugins],
        })
    planners = PlannerQueues(tracker.nc)
    await planners.refresh()
    queues = []
    for answer in planners.answers:
        for q in answer.get("queues") or ():
            if isinstance(q, dict) and q.get("tenant") == tenant:
                workers = sum(r["capacity"] for r in rows if r["class"] == q.get("class") and not r["draining"])
                planner = answer.get("planner") if operator else planner_view.PLANNER
                queues.append({**q, "planner": planner, "workers": workers,
                               "change": int(q.get("recommended_workers", 0)) - workers})
    return {"provisioners": rows, "queues": queues, "planners": len(planners.answers), "as_of": now.isoformat()}
