"""The console's pages (server-rendered with aiohttp-jinja2; docs/ui.md).

Every handler gets the viewer first (its tenant scopes every read; with tokens, its grants decide
which clusters and jobs it sees: one it may not read is "not found", like an unknown id, so a page
never tells that it exists), and answers HTML whatever happens: an unknown or malformed id is a
404 page that says so, an unreachable NATS a 503 page, a bug a 500 page (logged) — never the
API's JSON.
"""

from __future__ import annotations

import re
from typing import Any

import structlog
from aiohttp import web

from contracts import subjects
from contracts.catalog import KINDS
from muster.bus.repository import log_seq
from services.pool.domain.views import pool_view, pools_there, terms_for

from .. import api
from ..cost import tenant_cost
from ..people import cluster_name
from ..planner_view import recorded_for
from ..pools import POOLS
from . import bigpage, reads
from .bigjob import BIG, JobFold, planned_tasks
from .bigpage import FOLDS
from .controls import CONTROLS, controls_for
from .forms import operations
from .graph import attempts, task_of
from .kit import (
    NotFound,
    console_path,
    is_uuid,
    page,
    priced_for,
    readable_cluster,
    redirect,
    render,
    said_of,
    seq_param,
    tracker_of,
    uuid_param,
)
from .session import NeedsSignIn, Viewer, auth_of, same_origin, viewer_of

log = structlog.get_logger("muster.tracker.ui")

GROUPS = ("node", "stage")
_TASK = re.compile(r"^[A-Za-z0-9_\-.~]{1,400}$")


# -- pages -------------------------------------------------------------------------------------------


async def root(request: web.Request) -> web.StreamResponse:
    """`/`: the console, for anyone (the API's routes are under /v1, listed by /v1/openapi.json)."""
    return redirect("/ui/")


@page
async def home(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return redirect("/ui/clusters")


@page
async def clusters(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    readable = [c for c in reads.clusters(tracker_of(request), viewer.tenant) if viewer.may_cluster("read", c["id"])]
    # Deleted clusters only with `?all=1`, as `muster cluster list` shows them only with `--all`.
    show_all = request.query.get("all") in ("1", "true", "yes")
    shown = readable if show_all else [c for c in readable if c.get("status") != "deleted"]
    # What they cost now: `GET /v1/cost`'s figures, of the clusters this viewer may read.
    spend = await tenant_cost(tracker_of(request).store, viewer.tenant, lambda cid: viewer.may_cluster("read", cid),
                              lambda kind, name: viewer.may_catalog("read", kind, name), viewer.name)
    # A viewer who may read only some clusters (or none) was told "No clusters in tenant acme yet.
    # Create one with ...", of a tenant with clusters, by a page that offers no New cluster.
    return render(request, "clusters.html", viewer, clusters=shown, may_create=viewer.may_cluster("write", "*"),
                  why_not_all=viewer.why_not_cluster("read", "*"),
                  show_all=show_all, deleted=sum(c.get("status") == "deleted" for c in readable),
                  spend=spend, costs={c["id"]: c for c in spend["clusters"]})


@page
async def jobs(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    state = request.query.get("state") or None
    if state is not None and state not in api.JOB_STATES:
        raise NotFound(f"{state[:40]!r} is not a job state; states are {', '.join(api.JOB_STATES)}.")
    shown = [j for j in reads.jobs(tracker_of(request), viewer.tenant, state) if viewer.may_job("read", j["id"], j["cluster_id"])]
    names = {c["id"]: c["name"] for c in reads.clusters(tracker_of(request), viewer.tenant)}  # as `muster job list` names them
    return render(request, "jobs.html", viewer, jobs=list(reversed(shown)), names=names, why_not_all=viewer.why_not_cluster("read", "*"),
                  state=state, states=api.JOB_STATES)


@page
async def cluster(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    named = _named_cluster(request, viewer)
    if named is not None:  # a name, as every command takes it: its page (it was "not a cluster id")
        return redirect(f"/ui/clusters/{named}" + (f"?{request.query_string}" if request.query_string else ""))
    cluster_id = readable_cluster(request, viewer)
    seq = await _point(request)
    data = await reads.cluster_page(tracker_of(request), viewer.tenant, cluster_id, seq, viewer.operator)
    if data is None and seq is not None and await reads.cluster_page(tracker_of(request), viewer.tenant, cluster_id, None, viewer.operator):
        raise NotFound(f"Cluster {cluster_id} did not exist yet at log sequence {seq}.")  # a link to a point before it
    if data is None:
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    ops = await operations(request, viewer, cluster_id) if seq is None else None
    return render(request, "cluster.html", viewer, cluster_id=cluster_id, operations=ops, **data)


def _named_cluster(request: web.Request, viewer: Viewer) -> str | None:
    """The id of the tenant's cluster that the page's parameter names, if it is a name rather
    than an id: as every command and the API resolve it (people.resolve_cluster), the live one
    of that name, else the last deleted one, among those the viewer may read; None: an id. A
    name of no cluster the viewer may read is "no cluster named" (it said "not a cluster id", as
    if names were not taken). Until session 36 a deleted cluster's name was "no cluster named"
    here while `muster cluster show web` and `/v1/replay?cluster=web` showed it, and two live
    clusters of one name were too, without their ids."""
    value = request.match_info["cluster_id"]
    tracker = tracker_of(request)
    if is_uuid(value) or tracker.index is None:
        return None
    # Only those it may read: the redirect's `Location` is the cluster's id (as the API names an id).
    named = [c for c in tracker.list_clusters(viewer.tenant, 0, MAX_NAMED, name=value).items if viewer.may_cluster("read", c["id"])]
    live = [c["id"] for c in named if c.get("status") != "deleted"]
    if len(live) > 1:
        raise NotFound(f"{len(live)} live clusters are named {value[:80]!r} in tenant {viewer.tenant} ({', '.join(live)}): "
                       "open one by its id.")
    chosen = live or [c["id"] for c in named][-1:]  # (oldest first: the last is the latest deleted)
    if not chosen:
        raise NotFound(f"There is no cluster named {value[:80]!r} in tenant {viewer.tenant}.")
    return chosen[0]


MAX_NAMED = 1 << 30
"""Every cluster of the name (the index is in memory; a page of them would miss the latest)."""


@page
async def cluster_at(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The replayed cluster alone (the slider fetches it)."""
    cluster_id = readable_cluster(request, viewer)
    seq = await _point(request)
    if seq is None:
        raise NotFound("Name the point of the cluster's history to show: ?seq=N, a log sequence.")
    replay = await reads.replay_at(tracker_of(request), viewer.tenant, cluster_id, seq)
    if replay is None and await reads.cluster_page(tracker_of(request), viewer.tenant, cluster_id, None, viewer.operator):
        raise NotFound(f"Cluster {cluster_id} did not exist yet at that point.")
    if replay is None:
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    return render(request, "_replay.html", viewer, replay=replay, cluster_id=cluster_id)


async def _point(request: web.Request) -> int | None:
    """`?seq=N`, a point of the log that has happened (a link to one past its end would show a
    state that changes as the log grows)."""
    seq = seq_param(request)
    later = await tracker_of(request).not_yet(seq, None)
    if later is not None:
        raise NotFound(later[:1].upper() + later[1:] + ".")
    return seq


async def _job_history(request: web.Request, viewer: Viewer, as_read: bool = True) -> tuple[str, list[Any]]:
    """The job's history: `as_read` as the viewer may read it (planner_view.py), else as logged."""
    job_id = uuid_param(request, "job_id", "job")
    history = await reads.job_history(tracker_of(request), viewer.tenant, job_id)
    if not any(r.type == "JobRequested" for r in history[:1]) or not viewer.may_job("read", job_id, cluster_of(history)):
        raise NotFound(f"There is no job {job_id} in tenant {viewer.tenant}.")
    return job_id, history if viewer.operator or not as_read else [recorded_for(r) for r in history]


def cluster_of(history: list[Any]) -> str | None:
    return getattr(history[0].event, "cluster_id", None) if history else None


async def _kept(request: web.Request, viewer: Viewer) -> tuple[str, JobFold | None]:
    """A large job's kept fold, brought up to date (None: not kept, or not large)."""
    job_id = uuid_param(request, "job_id", "job")
    folds = request.app[FOLDS]
    kept = folds.peek(viewer.tenant, job_id)
    if kept is None or kept.size <= BIG:
        return job_id, None
    return job_id, bigpage.readable(await folds.get(tracker_of(request), viewer.tenant, job_id), viewer, job_id)


async def _job(request: web.Request, viewer: Viewer) -> tuple[str, JobFold | None, list[Any]]:
    """A large job's fold (kept for the next request), or a small job's whole history."""
    job_id, fold = await _kept(request, viewer)
    if fold is not None:
        return job_id, fold, []
    job_id, history = await _job_history(request, viewer, as_read=False)
    shown = history if viewer.operator else [recorded_for(r) for r in history]
    if planned_tasks(history) > BIG:  # kept as logged, for every viewer: each reads it as it may (bigjob.lines_for)
        return job_id, request.app[FOLDS].keep(viewer.tenant, job_id, history), shown
    return job_id, None, shown


@page
async def job(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    job_id, fold, history = await _job(request, viewer)
    said = said_of(request, viewer, job_id)
    if fold is not None:
        return await bigpage.job(request, viewer, job_id, fold, said)
    data = reads.job_page(history)
    if data is None:
        raise NotFound(f"There is no job {job_id} in tenant {viewer.tenant}.")
    data["status"] = await priced_for(request, viewer, job_id, await tracker_of(request).with_cost_now(
        viewer.tenant, job_id, await tracker_of(request).place_in_line(data["status"])))
    group = request.query.get("group", "node")
    if group not in GROUPS:
        group = "node"
    task_id = request.query.get("task")
    task = None
    if task_id:
        found = task_of(data["graph"], task_id)
        task = {"task": found, "attempts": attempts(history, task_id)} if found else None
    owner = cluster_of(history)
    name = await cluster_name(tracker_of(request), viewer.tenant, owner) if owner else ""  # what people called it
    return render(request, "job.html", viewer, job_id=job_id, big=False, group=group, open_task=task, said=said, cluster_name=name,
                  can_control=viewer.may_job("execute", job_id, owner), why_no_control=viewer.why_not_job("execute", job_id, owner),
                  controls=CONTROLS, allowed=controls_for(data["status"]["state"], bool(data["status"]["tasks_total"])),
                  can_approve=viewer.may_job("approve", job_id, owner), why_no_approve=viewer.why_not_job("approve", job_id, owner),
                  unserved=await tracker_of(request).warnings(viewer.tenant, data["status"]),
                  graph_json=data["graph"].to_json(), **data)


@page
async def job_graph(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    _, fold, history = await _job(request, viewer)
    if fold is not None:
        return bigpage.graph(request, fold)
    return web.json_response(reads.graph_json(history), headers={"Cache-Control": "no-store"})


@page
async def task(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    job_id, fold, history = await _job(request, viewer)
    task_id = request.match_info["task_id"]
    if not _TASK.fullmatch(task_id):
        raise NotFound(f"{task_id[:80]!r} is not a task id.")
    if fold is not None:
        return await bigpage.task(request, viewer, job_id, fold, task_id)
    data = reads.job_page(history)
    found = task_of(data["graph"], task_id) if data else None
    if data is None or found is None:
        raise NotFound(f"Job {job_id} has no task {task_id}.")
    template = "_task.html" if request.query.get("fragment") else "task.html"
    owner = data["status"]["cluster_id"]  # its crumbs name the cluster as the job page's do (they said "Cluster")
    name = await cluster_name(tracker_of(request), viewer.tenant, owner) if owner and template == "task.html" else ""
    return render(request, template, viewer, job_id=job_id, status=data["status"], seq=data["seq"], cluster_name=name,
                  final=data["status"]["finished_at"] is not None, open_task={"task": found, "attempts": attempts(history, task_id)})


@page
async def catalog(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    data = await reads.catalog(tracker_of(request), viewer.tenant)
    shown = data["catalog"].model_copy(deep=True)
    hidden = 0
    for kind in KINDS:  # the entities the viewer may read (docs/security.md), as the bus would answer
        entities = shown.entities(kind)
        for name in [n for n in entities if not viewer.may_catalog("read", kind, n)]:
            del entities[name]
            hidden += 1
    # A catalog whose entities the viewer may not read is not "no catalog yet": it says so.
    return render(request, "catalog.html", viewer, **{**data, "catalog": shown, "hidden": hidden})


@page
async def provisioners(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return render(request, "provisioners.html", viewer, **await reads.provisioners(tracker_of(request), viewer.tenant, viewer.operator))


async def every_pool(request: web.Request, viewer: Viewer) -> list[dict[str, Any]]:
    """Every pool's summary as the viewer's tenant sees it, by name."""
    mirror = request.app.get(POOLS)
    if mirror is None:
        return []
    await mirror.wait_ready()
    return [pool_view(mirror.pools[n], viewer.tenant, hosts=False) for n in sorted(mirror.pools)]


@page
async def pools(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return render(request, "pools.html", viewer, pools=await every_pool(request, viewer))


@page
async def pool(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """One pool as the viewer's tenant may see it: every host (state, holder) and the line."""
    name = request.match_info["pool"]
    mirror = request.app.get(POOLS)
    if not subjects.TOKEN.fullmatch(name):
        raise NotFound(f"{name[:80]!r} is not a pool name.")
    found = await mirror.pool(name) if mirror is not None else None
    if found is None:  # with the pools there are, as `muster pool show` names them (a walk of session 27)
        listed = await every_pool(request, viewer)
        return render(request, "pool_missing.html", viewer, 404, name=name, there=pools_there([p["pool"] for p in listed], viewer.operator),
                      pools=listed)
    view = pool_view(found, viewer.tenant)
    return render(request, "pool.html", viewer, pool=view, terms=terms_for(found, viewer.tenant), seq=log_seq(found),
                  is_uuid=is_uuid)


@page
async def unknown(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    raise NotFound(f"The console has no page {request.path[:120]}.")


# -- signing in --------------------------------------------------------------------------------------


_next = console_path


async def sign_in_form(request: web.Request) -> web.StreamResponse:
    viewer = None
    try:
        viewer = await viewer_of(request)
    except NeedsSignIn:
        pass
    return render(request, "signin.html", viewer, next=_next(request.query.get("next")), why=request.query.get("why"))


async def sign_in(request: web.Request) -> web.StreamResponse:
    if not same_origin(request):
        return web.Response(status=403, text="sign-in must come from the console's own page")
    form = await request.post()
    target = _next(str(form.get("next") or ""))
    response = redirect(target)
    try:
        await auth_of(request).sign_in(request, str(form.get("secret") or ""), response)
    except NeedsSignIn as refused:
        return render(request, "signin.html", None, 401, next=target, why=refused.reason)
    return response


async def sign_out(request: web.Request) -> web.StreamResponse:
    if not same_origin(request):
        return web.Response(status=403, text="sign-out must come from the console's own page")
    response = redirect("/ui/sign-in")
    auth_of(request).sign_out(response)
    return response
