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
from dataclasses import replace
from typing import Any

import nats.errors
import structlog
from aiohttp import web
from prometheus_client.registry import Collector

from contracts import subjects
from contracts.governance import NAME_RULE
from contracts.identity import Scope
from muster import tracing
from muster.bus.consume import consume_routes
from muster.bus.eventstore import EventStore, StoreError
from muster.bus.snapshotstore import SnapshotStore

from . import api, contract, csrf, governance, log_stream, people, planner_view, pools, priced, sse, write_routes
from . import auth as auth_
from .adapters.kv import LocationIndex
from .app import Tracker
from .backlog import LogLag, PoolLines
from .metrics import CONTENT_TYPE, PlannerQueues, TrackerMetrics, WorkerScaling
from .params import (
    METRICS,
    TRACKER,
    UUID_RE,
    BadParameter,
    error,
    known_query,
    last_event_id,
    not_an_id,
    not_found,
    once_each,
    page_json,
    paging,
    shown,
    tenant_of,
    uuid_of,
)
from .routing import OLD_DURABLES, ROUTES, IndexFeeder
from .story import StoryWriter
from .write_api import IDEMPOTENCY_KEY

log = structlog.get_logger("muster.tracker")
tracer = tracing.Tracer("muster.tracker")

READ_HEADERS = (api.TENANT_HEADER, "Authorization", "Cookie", "If-Match", "Content-Type", IDEMPOTENCY_KEY,
                "Last-Event-ID", csrf.HEADER, tracing.HEADER)
"""The request headers muster reads, each taking one value (`params.once_each`)."""
QUERY: web.AppKey[dict[str, tuple[str, ...]]] = web.AppKey("query_parameters", dict)
"""Each route's query parameters, from the OpenAPI document (`contract.query_parameters`)."""

MAX_TARGET_BYTES = 8192
_EMPTY_GOVERNANCE_NAME = re.compile(r"/v1/governance/(rules|policies|subscriptions|schedules)/")
"""The longest request target (path and query string) and header the API takes: ids and a
few filters fit many times over. Longer ones are answered 414 / 431 in the JSON error shape."""


# -- handlers ------------------------------------------------------------------------------------


async def list_jobs(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    cluster = request.query.get("cluster")
    if cluster is not None and not UUID_RE.fullmatch(cluster):
        raise BadParameter("cluster", not_an_id("cluster", cluster, request))
    state = request.query.get("state")
    if state is not None and state not in api.JOB_STATES:
        raise BadParameter("state", f"state {shown(state)} is not one of {', '.join(api.JOB_STATES)}")
    after, limit = paging(request)
    auth_.may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster.lower() if cluster else "*"))
    page = request.app[TRACKER].list_jobs(tenant, cluster.lower() if cluster else None, state, after, limit)
    return page_json(page if _operator(request) else replace(page, items=[planner_view.status_for(j) for j in page.items]))


def _operator(request: web.Request) -> bool:
    """Sees the deployment's names (a planner's instance); a tenant's people see "a planner"."""
    return planner_view.sees_deployment(request[auth_.PRINCIPAL])


async def get_job(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await auth_.may_read_job(request, tenant, job_id, request.app[TRACKER])
    body = await request.app[TRACKER].job_status_json(tenant, job_id)
    if body is None:
        return not_found("job", job_id, tenant)
    if not _operator(request) or b'"approval": {' in body:  # (the answer is kept as bytes: decoded only to change it)
        status = await priced.status_shown(request.app[TRACKER].plans, tenant, job_id, json.loads(body),
                                           priced.hidden_by(request[auth_.AUTHZ].may, tenant))
        body = json.dumps(status if _operator(request) else planner_view.status_for(status)).encode()
    return web.Response(body=body, content_type="application/json")


async def get_job_location(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await auth_.may_read_job(request, tenant, job_id, request.app[TRACKER])
    location = await request.app[TRACKER].job_location(tenant, job_id)
    if location is None:
        return not_found("job", job_id, tenant)
    return web.json_response(location if _operator(request) else planner_view.status_for(location))


async def get_job_events(request: web.Request) -> web.Response:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await auth_.may_read_job(request, tenant, job_id, request.app[TRACKER])
    after, limit = paging(request)
    page = await request.app[TRACKER].job_events(tenant, job_id, after, limit)
    if page is None:
        return not_found("job", job_id, tenant)
    page = replace(page, items=await priced.events_shown(request.app[TRACKER].plans, tenant, job_id, page.items,
                                                         priced.hidden_by(request[auth_.AUTHZ].may, tenant)))
    return page_json(page if _operator(request) else replace(page, items=[planner_view.event_for(e) for e in page.items]))


async def stream_job(request: web.Request) -> web.StreamResponse:
    tenant, job_id = tenant_of(request), uuid_of(request, "job_id", "job id")
    await auth_.may_read_job(request, tenant, job_id, request.app[TRACKER])
    last_id = last_event_id(request)
    still = auth_.still_reading(request, await auth_.job_scope(tenant, job_id, request.app[TRACKER]))
    return await sse.job_stream(request, tenant, job_id, last_id, operator=_operator(request), still=still)


async def list_clusters(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    auth_.may_read(request, Scope(tenant=tenant, kind="cluster", id="*"))
    after, limit = paging(request)
    return page_json(request.app[TRACKER].list_clusters(tenant, after, limit, name=request.query.get("name")))


async def get_cluster(request: web.Request) -> web.Response:
    tenant, cluster_id = tenant_of(request), uuid_of(request, "cluster_id", "cluster id")
    auth_.may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster_id))
    cluster = await request.app[TRACKER].cluster(tenant, cluster_id)
    if cluster is None:
        return not_found("cluster", cluster_id, tenant)
    return web.json_response(cluster, headers={"ETag": f'"{cluster["version"]}"'})  # If-Match of the writes


async def get_cluster_jobs(request: web.Request) -> web.Response:
    tenant, cluster_id = tenant_of(request), uuid_of(request, "cluster_id", "cluster id")
    auth_.may_read(request, Scope(tenant=tenant, kind="cluster", id=cluster_id))
    after, limit = paging(request)
    page = await request.app[TRACKER].cluster_jobs(tenant, cluster_id, after, limit)
    if page is None:
        return not_found("cluster", cluster_id, tenant)
    return page_json(page if _operator(request) else replace(page, items=[planner_view.status_for(j) for j in page.items]))


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
    "get_cluster_jobs": get_cluster_jobs, "healthz": healthz, "metrics": metrics, "whoami": auth_.whoami,
    "list_pools": pools.list_pools, "get_pool": pools.get_pool, "stream_pool": pools.stream_pool,
    "governance": governance.get_governance, "governance_entry": governance.get_governance_entry,
    "stream_events": log_stream.stream_events, **people.HANDLERS,
}


# -- the guard every request goes through --------------------------------------------------------


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    if not tracing.enabled() or request.method in ("GET", "HEAD", "OPTIONS"):
        return await _guarded(request, handler, route)
    # A write starts a trace, or continues the caller's (its `traceparent` header).
    with tracer.span(f"{request.method} {route}", request.headers.get(tracing.HEADER), kind="server",
                     **{"http.request.method": request.method, "http.route": route}) as span:
        response = await _guarded(request, handler, route)
        tracing.set_attributes(span, **{"http.response.status_code": response.status})
        if response.status >= 500:
            tracing.set_error(span, f"HTTP {response.status}")
        return response


async def _guarded(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                   route: str) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        response: web.StreamResponse | None = too_long(request)
        if response is None:
            once_each(request, READ_HEADERS)
            known = request.app.get(QUERY, {}).get(request.match_info.route.name or "")
            if known is not None:
                known_query(request, known)
            response = await handler(request)
    except BadParameter as err:
        response = error(400, str(err), err.parameter)
    except web.HTTPException as err:  # the router's 404 and 405
        reason, status, parameter = err.reason, err.status, None
        if err.status == 404 and route == "unmatched" and _EMPTY_GOVERNANCE_NAME.fullmatch(request.path):
            # (an empty name is a path that ends at its collection: it was "no route", naming no field)
            reason, status, parameter = f"name '' is not a name: use {NAME_RULE} (it is empty)", 400, "name"
        elif err.status == 404 and route == "unmatched":  # "Not Found" said nothing of what exists
            reason = f"no route {request.method} {request.path[:200]}: GET /v1/openapi.json lists the routes"
            if request.method == "POST" and request.path.endswith("/delete"):
                reason += " (a cluster is deleted with DELETE /v1/clusters/{id})"
        elif err.status == 405 and "Allow" in err.headers:
            reason = (f"{request.method} {request.path[:200]}: this route takes {err.headers['Allow'].replace(',', ', ')} "
                      "(GET /v1/openapi.json lists the routes and their methods)")
        response = error(status, reason, parameter)
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


def too_long(request: web.Request) -> web.Response | None:
    target = len(request.raw_path.encode())
    if target > MAX_TARGET_BYTES:
        what = "query string" if "?" in request.raw_path else "path"
        return error(414, f"the request target is {target} bytes long; the limit is {MAX_TARGET_BYTES} bytes", what)
    for name, value in request.headers.items():
        if len(name) + len(value) > MAX_TARGET_BYTES:
            return error(431, f"header {name[:80]} is {len(value)} bytes long; the limit is {MAX_TARGET_BYTES} bytes", name[:80])
    return None


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
    console: bool = True,
    auth: auth_.HttpAuth | bool = True,
) -> web.Application:
    """The tracker app. With `index=True` it opens the shared KV index at startup (and with
    `consume=True` feeds it from the log through the shared durable consumer); pass a
    LocationIndex to share one, or False for a tracker that answers from the owner and the
    log alone. With `console=True` it also serves the web console under /ui/ (docs/ui.md).
    `auth=True` checks tokens when the server authorizes connections (auth on;
    services/tracker/auth.py), False never."""
    holder: list[auth_.HttpAuth | None] = [auth if isinstance(auth, auth_.HttpAuth) else None]
    # A message on a log subject that is not a valid event is shown as skipped (named by its
    # seq and subject), not a failed read: it is there for good, and a 503 would say "try later".
    store.lenient = True
    app = web.Application(middlewares=[guard, auth_.middleware(lambda: holder[0])])
    tracker = Tracker(store, index if isinstance(index, LocationIndex) else None, owner_timeout=owner_timeout, max_age=max_age,
                      stories=SnapshotStore(store.nc, replicas), nc=store.nc)
    app[TRACKER] = tracker
    app[log_stream.JETSTREAM_LOG] = store
    app[sse.LIVE] = set()
    app.on_shutdown.append(sse.end_streams)
    pools.setup_pools(app, store.js)
    tracker.position_of = app[pools.POOLS].position
    planners = PlannerQueues(store.nc)
    sources: list[Any] = [planners, WorkerScaling(store.nc, planners), LogLag(store.js)] if planner_metrics else []
    lines = PoolLines(lambda: app[pools.POOLS].pools)
    app[METRICS] = metrics_ = TrackerMetrics([*collectors, lines], sources=sources)
    tracker.on_answer = lambda source: metrics_.status_source.labels(source).inc()
    write_routes.setup_writes(app, store.nc)
    whole = contract.document()
    app[QUERY] = {name: known for name, known in contract.query_parameters(whole).items()
                  if name not in ("healthz", "metrics", "openapi")}  # (probes and scrapers may add their own)
    document = json.dumps(whole).encode()
    for r in api.ROUTES:
        handler = _openapi_handler(document) if r.name == "openapi" else HANDLERS[r.name]
        app.router.add_get(r.path, handler, name=r.name)
    if console:
        from .ui import setup_ui

        setup_ui(app, TRACKER, auth=auth_.ConsoleTokens(lambda: holder[0]))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        view = await auth_.start_checking(store.nc, holder) if auth is True else None
        owned = index is True
        if owned:
            tracker.index = await LocationIndex.open(store.js, replicas=replicas)
            await tracker.index.start()
        if tracker.index is not None:
            app[METRICS].watch_index(lambda: len(tracker.index.mirror.records) if tracker.index else 0)
        subs = []
        writer = None
        if consume and tracker.index is not None:
            writer = StoryWriter(store, tracker.stories) if tracker.stories is not None else None
            await _drop_old_durables(store.js)
            subs = await consume_routes(store.js, IndexFeeder(tracker, app[METRICS], writer, store.bodies), ROUTES)
        yield
        if writer is not None:
            writer.close()
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if owned and tracker.index is not None:
            with contextlib.suppress(Exception):
                await tracker.index.stop()
        if view is not None:
            await view.stop()

    app.cleanup_ctx.append(lifecycle)
    return app


async def _drop_old_durables(js: Any) -> None:
    """The index's consumer of an earlier version took every event: it would hold them forever."""
    for durable in OLD_DURABLES:
        with contextlib.suppress(Exception):  # gone already, or another tracker deleted it first
            await js.delete_consumer(subjects.EVENTS_STREAM, durable)
