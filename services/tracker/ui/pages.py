"""The console's pages (server-rendered with aiohttp-jinja2; docs/ui.md).

Every handler gets the viewer first (its tenant scopes every read; with tokens, its grants decide
which clusters and jobs it sees: one it may not read is "not found", like an unknown id, so a page
never tells that it exists), and answers HTML whatever happens: an unknown or malformed id is a
404 page that says so, an unreachable NATS a 503 page, a bug a 500 page (logged) — never the
API's JSON.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
import nats.errors
import structlog
from aiohttp import web

from contracts import subjects
from contracts.catalog import KINDS
from contracts.identity import Permission
from muster.bus.eventstore import StoreError
from muster.bus.repository import log_seq
from muster.readmodel.pools import pool_view

from .. import api, csrf
from ..app import Tracker
from ..auth import job_cluster
from ..pools import POOLS
from . import reads
from .controls import CONTROLS, controls_for
from .graph import attempts, task_of
from .session import NeedsSignIn, Viewer, auth_of, same_origin, session_token, viewer_of

log = structlog.get_logger("muster.tracker.ui")

TRACKER_KEY: web.AppKey[Tracker] | None = None  # set by setup_ui (the tracker app's key)
_UUID = re.compile(api.UUID_PATTERN)
_TASK = re.compile(r"^[A-Za-z0-9_\-.~]{1,400}$")
GROUPS = ("node", "stage")
Handler = Callable[[web.Request, Viewer], Awaitable[web.StreamResponse]]


def redirect(location: str) -> web.Response:
    """A 303 as a plain response (the tracker's guard turns raised HTTP exceptions into JSON)."""
    return web.Response(status=303, headers={"Location": location})


class NotFound(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def tracker_of(request: web.Request) -> Tracker:
    assert TRACKER_KEY is not None
    return request.app[TRACKER_KEY]


def render(request: web.Request, template: str, viewer: Viewer | None, code: int = 200, **context: Any) -> web.Response:
    auth = auth_of(request)
    context.update(viewer=viewer, asks_for=auth.asks_for, path=request.path_qs,
                   csrf=csrf.token_for(session_token(request), viewer.tenant) if viewer is not None else "")
    response = aiohttp_jinja2.render_template(template, request, context, status=code)
    response.headers["Cache-Control"] = "no-store"
    return response


def page(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        viewer: Viewer | None = None
        try:
            viewer = await viewer_of(request)
            return await handler(request, viewer)
        except NeedsSignIn as need:
            if request.method == "GET" and "text/html" in request.headers.get("Accept", "text/html"):
                return redirect(f"/ui/sign-in?next={quote(request.path_qs)}&why={quote(need.reason)}")
            return web.json_response({"error": {"status": 401, "message": need.reason, "parameter": None}}, status=401)
        except NotFound as missing:
            return render(request, "error.html", viewer, 404, title="Not found", message=missing.message)
        except (nats.errors.Error, StoreError, TimeoutError) as err:
            log.warning("console: nats unavailable", path=request.path, error=str(err) or type(err).__name__)
            return render(request, "error.html", viewer, 503, title="NATS is unavailable",
                          message=f"The tracker cannot reach NATS right now ({type(err).__name__}). Try again in a moment.")
        except Exception:
            log.exception("console page failed", path=request.path)
            return render(request, "error.html", viewer, 500, title="Something went wrong",
                          message="The console hit a bug; the tracker's log has the details.")

    return wrapped


def _is_uuid(value: str) -> bool:
    return bool(_UUID.fullmatch(value))


def uuid_param(request: web.Request, name: str, what: str) -> str:
    value = request.match_info[name]
    if not _UUID.fullmatch(value):
        raise NotFound(f"{value[:80]!r} is not a {what} id (a UUID).")
    return value.lower()


def seq_param(request: web.Request) -> int | None:
    raw = request.query.get("seq")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise NotFound(f"seq {raw[:40]!r} is not a log sequence.")
    return int(raw)


# -- pages -------------------------------------------------------------------------------------------


@page
async def home(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return redirect("/ui/clusters")


@page
async def clusters(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    shown = [c for c in reads.clusters(tracker_of(request), viewer.tenant) if viewer.may_cluster("read", c["id"])]
    return render(request, "clusters.html", viewer, clusters=shown, may_create=viewer.may_cluster("write", "*"))


@page
async def jobs(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    state = request.query.get("state") or None
    if state is not None and state not in api.JOB_STATES:
        raise NotFound(f"{state[:40]!r} is not a job state; states are {', '.join(api.JOB_STATES)}.")
    shown = [j for j in reads.jobs(tracker_of(request), viewer.tenant, state) if viewer.may_job("read", j["id"], j["cluster_id"])]
    return render(request, "jobs.html", viewer, jobs=list(reversed(shown)),
                  state=state, states=api.JOB_STATES)


def readable_cluster(request: web.Request, viewer: Viewer) -> str:
    """The page's cluster id, if the viewer may read it; else "no such cluster"."""
    cluster_id = uuid_param(request, "cluster_id", "cluster")
    if not viewer.may_cluster("read", cluster_id):
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    return cluster_id


async def may_job(request: web.Request, viewer: Viewer, permission: Permission, job_id: str) -> bool:
    """For the stream and job control, which have no history at hand: the job's cluster looked
    up (the index, else its first event) only when grants decide."""
    if viewer.may is None:
        return True
    return viewer.may_job(permission, job_id, await job_cluster(tracker_of(request), viewer.tenant, job_id))


@page
async def cluster(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    cluster_id = readable_cluster(request, viewer)
    seq = seq_param(request)
    data = await reads.cluster_page(tracker_of(request), viewer.tenant, cluster_id, seq)
    if data is None:
        raise NotFound(f"There is no cluster {cluster_id} in tenant {viewer.tenant}.")
    from .forms import operations  # forms imports this module

    ops = await operations(request, viewer, cluster_id) if seq is None else None
    return render(request, "cluster.html", viewer, cluster_id=cluster_id, operations=ops, **data)


@page
async def cluster_at(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The replayed cluster alone (the slider fetches it)."""
    cluster_id = readable_cluster(request, viewer)
    seq = seq_param(request)
    replay = await reads.replay_at(tracker_of(request), viewer.tenant, cluster_id, seq) if seq is not None else None
    if replay is None:
        raise NotFound(f"Cluster {cluster_id} had no events in tenant {viewer.tenant} at that point.")
    return render(request, "_replay.html", viewer, replay=replay, cluster_id=cluster_id)


async def _job_history(request: web.Request, viewer: Viewer) -> tuple[str, list[Any]]:
    job_id = uuid_param(request, "job_id", "job")
    history = await reads.job_history(tracker_of(request), viewer.tenant, job_id)
    if not any(r.type == "JobRequested" for r in history[:1]) or not viewer.may_job("read", job_id, cluster_of(history)):
        raise NotFound(f"There is no job {job_id} in tenant {viewer.tenant}.")
    return job_id, history


def cluster_of(history: list[Any]) -> str | None:
    return getattr(history[0].event, "cluster_id", None) if history else None


@page
async def job(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    job_id, history = await _job_history(request, viewer)
    data = reads.job_page(history)
    if data is None:
        raise NotFound(f"There is no job {job_id} in tenant {viewer.tenant}.")
    group = request.query.get("group", "node")
    if group not in GROUPS:
        group = "node"
    task_id = request.query.get("task")
    task = None
    if task_id:
        found = task_of(data["graph"], task_id)
        task = {"task": found, "attempts": attempts(history, task_id)} if found else None
    return render(request, "job.html", viewer, job_id=job_id, group=group, open_task=task, said=request.query.get("said"),
                  can_control=viewer.may_job("execute", job_id, cluster_of(history)), controls=CONTROLS,
                  allowed=controls_for(data["status"]["state"], bool(data["status"]["tasks_total"])),
                  can_approve=viewer.may_job("approve", job_id, cluster_of(history)),
                  graph_json=data["graph"].to_json(), **data)


@page
async def job_graph(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    _, history = await _job_history(request, viewer)
    return web.json_response(reads.graph_json(history), headers={"Cache-Control": "no-store"})


@page
async def task(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    job_id, history = await _job_history(request, viewer)
    task_id = request.match_info["task_id"]
    if not _TASK.fullmatch(task_id):
        raise NotFound(f"{task_id[:80]!r} is not a task id.")
    data = reads.job_page(history)
    found = task_of(data["graph"], task_id) if data else None
    if data is None or found is None:
        raise NotFound(f"Job {job_id} has no task {task_id}.")
    template = "_task.html" if request.query.get("fragment") else "task.html"
    return render(request, template, viewer, job_id=job_id, status=data["status"],
                  open_task={"task": found, "attempts": attempts(history, task_id)})


@page
async def catalog(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    data = await reads.catalog(tracker_of(request), viewer.tenant)
    shown = data["catalog"].model_copy(deep=True)
    for kind in KINDS:  # the entities the viewer may read (docs/security.md), as the bus would answer
        entities = shown.entities(kind)
        for name in [n for n in entities if not viewer.may_catalog("read", kind, n)]:
            del entities[name]
    return render(request, "catalog.html", viewer, **{**data, "catalog": shown})


@page
async def provisioners(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    return render(request, "provisioners.html", viewer, **await reads.provisioners(tracker_of(request), viewer.tenant))


@page
async def pools(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    mirror = request.app.get(POOLS)
    if mirror is None:
        return render(request, "pools.html", viewer, pools=[])
    await mirror.wait_ready()
    return render(request, "pools.html", viewer,
                  pools=[pool_view(mirror.pools[n], viewer.tenant, hosts=False) for n in sorted(mirror.pools)])


@page
async def pool(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """One pool as the viewer's tenant may see it: every host (state, holder) and the line."""
    name = request.match_info["pool"]
    mirror = request.app.get(POOLS)
    if not subjects.TOKEN.fullmatch(name):
        raise NotFound(f"{name[:80]!r} is not a pool name.")
    found = await mirror.pool(name) if mirror is not None else None
    if found is None:
        raise NotFound(f"There is no pool {name}.")
    view = pool_view(found, viewer.tenant)
    return render(request, "pool.html", viewer, pool=view, seq=log_seq(found), is_uuid=_is_uuid)


@page
async def unknown(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    raise NotFound(f"The console has no page {request.path[:120]}.")


# -- signing in --------------------------------------------------------------------------------------


def _next(raw: str | None) -> str:
    """Only a path of the console: never an open redirect."""
    return raw if raw and raw.startswith("/ui/") and not raw.startswith("//") else "/ui/clusters"


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
