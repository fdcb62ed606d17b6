"""The tracker's HTTP API (aiohttp). Routes and their documentation live in `api.py`.

Every /v1 route is scoped to the tenant named by the `X-Muster-Tenant` header (default
`default`): another tenant's job is a 404. Nothing a client sends can crash a handler: bad
parameters are a 400 naming the parameter, unknown ids a 404, an unreachable NATS a 503, and
anything unexpected a logged 500 — always as JSON.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import nats.errors
import structlog
from aiohttp import web
from prometheus_client.registry import Collector

from contracts import subjects
from contracts.identity import Scope
from muster.bus.connect import principal_of
from muster.bus.consume import consume_events
from contracts.envelope import Recorded
from muster.bus.eventstore import EventStore, StoreError
from muster.readmodel.locations import job_key
from muster.readmodel.progress import JobProgress
from services.auth.backends import identity_backends
from services.auth.view import IdentityView

from . import api
from . import auth as auth_
from .adapters.kv import LocationIndex
from .app import Page, Tracker
from .metrics import CONTENT_TYPE, PlannerQueues, TrackerMetrics, WorkerScaling

log = structlog.get_logger("muster.tracker")

TRACKER = web.AppKey("tracker", Tracker)
METRICS = web.AppKey("metrics", TrackerMetrics)
DURABLE = "tracker-locations"
KEEPALIVE_S = 15.0
_UUID = re.compile(api.UUID_PATTERN)


class BadParameter(Exception):
    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def error(status: int, message: str, parameter: str | None = None) -> web.Response:
    body = {"error": {"status": status, "message": message, "parameter": parameter}}
    return web.json_response(body, status=status)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "…")


# -- parameters --------------------------------------------------------------------------------


def tenant_of(request: web.Request) -> str:
    """The tenant of the request: the principal's own (auth on; services/tracker/auth.py), or
    the one `X-Muster-Tenant` names for a super admin, a service or an anonymous caller."""
    authz = request.get(auth_.AUTHZ)
    tenant = authz.tenant if authz is not None else request.headers.get(api.TENANT_HEADER, api.DEFAULT_TENANT)
    if not subjects.TOKEN.fullmatch(tenant):
        raise BadParameter(api.TENANT_HEADER, f"{api.TENANT_HEADER} {_shown(tenant)} is not a tenant name: use 1-128 letters, digits, '-' or '_'")
    return tenant


def uuid_of(request: web.Request, name: str, what: str) -> str:
    value = request.match_info[name]
    if not _UUID.fullmatch(value):
        raise BadParameter(name, f"{what} {_shown(value)} is not a {what} (a UUID)")
    return value.lower()


def int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(name, f"{name} {_shown(raw)} is not an integer") from None
    if not low <= value <= high:
        raise BadParameter(name, f"{name} must be between {low} and {high}, not {value}")
    return value


def paging(request: web.Request) -> tuple[int, int]:
    return (int_query(request, "after", 0, 0, api.MAX_SEQ), int_query(request, "limit", api.DEFAULT_LIMIT, 1, api.MAX_LIMIT))


def page_json(page: Page) -> web.Response:
    return web.json_response({"items": page.items, "next_after": page.next_after})


def not_found(what: str, ident: str, tenant: str) -> web.Response:
    return error(404, f"no {what} {ident} in tenant {tenant}")


# -- handlers ------------------------------------------------------------------------------------


def _may_read(request: web.Request, scope: Scope) -> None:
    request[auth_.AUTHZ].require("read", scope)


async def _read_job(request: web.Request, tenant: str, job_id: str) -> None:
    """A job is covered by grants on itself or on its cluster, found (only when it matters) in
    the index, else in the job's first event."""
    authz = request[auth_.AUTHZ]
    if authz.may("read", Scope(tenant=tenant, kind="job", id=job_id)):
        return
    tracker = request.app[TRACKER]
    record = tracker.index.mirror.get(job_key(tenant, job_id)) if tracker.index is not None else None
    cluster = record.get("cluster_id") if record else None
    if cluster is None:
        first = await tracker.store.read(subjects.job_events(tenant, job_id))
        cluster = getattr(first[0].event, "cluster_id", None) if first else None
    _may_read(request, Scope(tenant=tenant, kind="job", id=job_id, cluster=cluster))


async def list_jobs(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    cluster = request.query.get("cluster")
    if cluster is not None and not _UUID.fullmatch(cluster):
        raise BadParameter("cluster", f"cluster {_shown(cluster)} is not a cluster id (a UUID)")
    state = request.query.get("state")
    if state is not None and state not in api.JOB_STATES:
        raise BadParameter("state", f"state {_shown(state)} is not one of {', '.join(api.JOB_STATES)}")
    after, limit = paging(request)
    _may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster.lower() if cluster else "*"))
    return page_json(request.app[TRACKER].list_jobs(tenant, cluster.lower() if cluster else None, state, after, limit))


async def get_job(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await _read_job(request, tenant, job_id)
    body = await request.app[TRACKER].job_status_json(tenant, job_id)
    if body is None:
        return not_found("job", job_id, tenant)
    return web.Response(body=body, content_type="application/json")


async def get_job_location(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await _read_job(request, tenant, job_id)
    location = await request.app[TRACKER].job_location(tenant, job_id)
    return not_found("job", job_id, tenant) if location is None else web.json_response(location)


async def get_job_events(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await _read_job(request, tenant, job_id)
    after, limit = paging(request)
    page = await request.app[TRACKER].job_events(tenant, job_id, after, limit)
    return not_found("job", job_id, tenant) if page is None else page_json(page)


def sse(event: str, ident: int | None, data: Any) -> bytes:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def stream_job(request: web.Request) -> web.StreamResponse:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await _read_job(request, tenant, job_id)
    last_id = 0
    raw_last = request.headers.get("Last-Event-ID")
    if raw_last:
        if not re.fullmatch(r"[0-9]{1,18}", raw_last):
            raise BadParameter("Last-Event-ID", f"Last-Event-ID {_shown(raw_last)} is not a log sequence")
        last_id = int(raw_last)
    return await job_stream(request, tenant, job_id, last_id)


async def job_stream(request: web.Request, tenant: str, job_id: str, last_id: int) -> web.StreamResponse:
    """The progress stream of one job of `tenant`, after log sequence `last_id` (also served to
    the console, which names the tenant from its session)."""
    tracker, metrics = request.app[TRACKER], request.app[METRICS]
    if not await tracker.job_exists(tenant, job_id):
        return not_found("job", job_id, tenant)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    metrics.streams.inc()
    try:
        await _stream(response, tracker.follow(tenant, job_id, idle=KEEPALIVE_S), last_id)
    except ConnectionError:
        pass  # the client went away
    except Exception:  # the response has started: all that is left is to end it
        log.exception("progress stream failed", job=job_id)
    finally:
        metrics.streams.dec()
    return response


async def _stream(response: web.StreamResponse, events: AsyncIterator[Recorded | None], last_id: int) -> None:
    progress = JobProgress()
    async with contextlib.aclosing(events):
        async for recorded in events:
            if recorded is None:
                await response.write(b": keep-alive\n\n")
                continue
            try:
                progress.fold(recorded)
                data = progress.summary(recorded) if recorded.seq > last_id else None  # the client has the others
            except Exception as err:  # a log this reader cannot fold: say so, and stop
                log.exception("cannot fold job event", seq=recorded.seq)
                await response.write(sse("error", recorded.seq, {"message": f"cannot follow the job past seq {recorded.seq}: {err}"}))
                return
            if data is not None:
                await response.write(sse("progress", recorded.seq, data))
    status = progress.status() or {}
    final = progress.final
    await response.write(sse("end", final.seq if final else None, {
        "state": status.get("state"), "error": status.get("error"), "type": final.type if final else None,
        "counts": status.get("counts", {}),
    }))


async def list_clusters(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    _may_read(request, Scope(tenant=tenant, kind="cluster", id="*"))
    after, limit = paging(request)
    return page_json(request.app[TRACKER].list_clusters(tenant, after, limit))


async def get_cluster(request: web.Request) -> web.Response:
    tenant, cluster_id = tenant_of(request), uuid_of(request, "cluster_id", "cluster id")
    _may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster_id))
    cluster = await request.app[TRACKER].cluster(tenant, cluster_id)
    return not_found("cluster", cluster_id, tenant) if cluster is None else web.json_response(cluster)


async def get_cluster_jobs(request: web.Request) -> web.Response:
    tenant, cluster_id = tenant_of(request), uuid_of(request, "cluster_id", "cluster id")
    _may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster_id))
    after, limit = paging(request)
    page = await request.app[TRACKER].cluster_jobs(tenant, cluster_id, after, limit)
    return not_found("cluster", cluster_id, tenant) if page is None else page_json(page)


async def whoami(request: web.Request) -> web.Response:
    authz = request[auth_.AUTHZ]
    p = authz.principal
    grants = sorted(authz.state.grants_of(p.id), key=lambda g: (str(g.scope), g.permission)) if authz.state else []
    return web.json_response({"principal": p.id, "role": p.role, "tenant": p.tenant, "service": p.service,
                              "grants": [{"permission": g.permission, "scope": str(g.scope)} for g in grants]})


async def healthz(request: web.Request) -> web.Response:
    tracker = request.app[TRACKER]
    connected = bool(tracker.nc.is_connected)
    index = "off" if tracker.index is None else "ready" if tracker.index.ready.is_set() else "loading"
    ok = connected and index != "loading"
    body = {"ok": ok, "nats": "connected" if connected else "disconnected", "index": index}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=await request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def _openapi_handler(document: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    return openapi


HANDLERS: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "list_jobs": list_jobs, "get_job": get_job, "get_job_location": get_job_location, "get_job_events": get_job_events,
    "stream_job": stream_job, "list_clusters": list_clusters, "get_cluster": get_cluster,
    "get_cluster_jobs": get_cluster_jobs, "healthz": healthz, "metrics": metrics, "whoami": whoami,
}


# -- the guard every request goes through --------------------------------------------------------


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    started = time.perf_counter()
    try:
        response = await handler(request)
    except BadParameter as err:
        response = error(400, str(err), err.parameter)
    except web.HTTPException as err:  # the router's 404 and 405
        response = error(err.status, err.reason)
        if "Allow" in err.headers:
            response.headers["Allow"] = err.headers["Allow"]
    except (nats.errors.Error, StoreError, TimeoutError) as err:
        log.warning("nats unavailable", route=route, error=str(err) or type(err).__name__)
        response = error(503, f"NATS is unavailable: {type(err).__name__}")
    except Exception:
        log.exception("request failed", route=route, path=request.path)
        response = error(500, "internal error; see the tracker's log")
    m = request.app[METRICS]
    m.requests.labels(request.method, route, str(response.status)).inc()
    m.latency.labels(route).observe(time.perf_counter() - started)
    return response


# -- the app -------------------------------------------------------------------------------------


def make_app(
    store: EventStore,
    *,
    index: LocationIndex | bool = True,
    consume: bool = True,
    owner_timeout: float = 0.25,
    max_age: float = 0.05,
    collectors: Iterable[Collector] = (),
    planner_metrics: bool = True,
    replicas: int = 1,
    auth: auth_.HttpAuth | bool = True,
    console: bool = True,
) -> web.Application:
    """The tracker app. With `index=True` it opens the shared KV index at startup (and with
    `consume=True` feeds it from the log through the shared durable consumer); pass a
    LocationIndex to share one, or False for a tracker that answers from the owner and the
    log alone. With `console=True` it also serves the web console under /ui/ (docs/ui.md)."""
    holder: list[auth_.HttpAuth | None] = [auth if isinstance(auth, auth_.HttpAuth) else None]
    app = web.Application(middlewares=[guard, auth_.middleware(lambda: holder[0])])
    tracker = Tracker(store, index if isinstance(index, LocationIndex) else None, owner_timeout=owner_timeout, max_age=max_age)
    app[TRACKER] = tracker
    planners = PlannerQueues(store.nc)
    sources: list[Any] = [planners, WorkerScaling(store.nc, planners)] if planner_metrics else []
    app[METRICS] = metrics_ = TrackerMetrics(collectors, sources=sources)
    tracker.on_answer = lambda source: metrics_.status_source.labels(source).inc()
    document = json.dumps(api.openapi()).encode()
    for r in api.ROUTES:
        handler = _openapi_handler(document) if r.name == "openapi" else HANDLERS[r.name]
        app.router.add_get(r.path, handler, name=r.name)
    if console:
        from .ui import setup_ui  # noqa: PLC0415 (the console's modules import this one)

        setup_ui(app, TRACKER, auth=auth_.ConsoleTokens(lambda: holder[0]))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        view = None
        if auth is True and principal_of(store.nc) != subjects.ANONYMOUS:
            view = await IdentityView(store.nc).start()
            holder[0] = auth_.HttpAuth(view.state, identity_backends(view.state))
        owned = index is True
        if owned:
            tracker.index = await LocationIndex.open(store.js, replicas=replicas)
            await tracker.index.start()
        if tracker.index is not None:
            app[METRICS].watch_index(lambda: len(tracker.index.mirror.records) if tracker.index else 0)
        sub = None
        if consume and tracker.index is not None:
            sub = await consume_events(store.js, subjects.ALL_EVENTS, DURABLE, _feeder(tracker, app[METRICS]), queue=DURABLE)
        yield
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if owned and tracker.index is not None:
            with contextlib.suppress(Exception):
                await tracker.index.stop()
        if view is not None:
            await view.stop()

    app.cleanup_ctx.append(lifecycle)
    return app


def _feeder(tracker: Tracker, m: TrackerMetrics) -> Callable[[Recorded], Awaitable[None]]:
    async def on_event(recorded: Recorded) -> None:
        total, changed = await tracker.on_event(recorded)
        m.location_events.inc()
        if total:
            m.location_updates.labels("applied").inc(changed)
            m.location_updates.labels("superseded").inc(total - changed)

    return on_event
