"""The tracker's HTTP API (aiohttp). Every route is scoped to the tenant named by the
`X-Muster-Tenant` header (default `default`): another tenant's job is a 404."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from aiohttp import web

from contracts import subjects
from muster.bus.eventstore import EventStore

from .domain.status import job_status

STORE = web.AppKey("store", EventStore)
TENANT_HEADER = "X-Muster-Tenant"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"status": status, "message": message}}, status=status)


def _tenant(request: web.Request) -> str:
    tenant = request.headers.get(TENANT_HEADER, "default")
    try:
        return subjects.token(tenant, "tenant")
    except subjects.SubjectError as err:
        raise web.HTTPBadRequest(text=str(err)) from None


async def get_job(request: web.Request) -> web.Response:
    tenant = _tenant(request)
    job_id = request.match_info["job_id"]
    try:
        UUID(job_id)
    except ValueError:
        return _error(400, f"job id {job_id!r} is not a job id (a UUID)")
    store = request.app[STORE]
    history = await store.read_many(subjects.job_history_filters(tenant, job_id))
    status = job_status(history)
    if status is None:
        return _error(404, f"no job {job_id} in tenant {tenant}")
    body: dict[str, Any] = {**status, "source": "log"}
    return web.json_response(body)


async def healthz(request: web.Request) -> web.Response:
    nc = request.app[STORE].nc
    ok = nc.is_connected
    return web.json_response({"ok": ok, "nats": "connected" if ok else "disconnected"}, status=200 if ok else 503)


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except web.HTTPException as err:
        if err.content_type == "application/json":
            raise
        return _error(err.status, err.text or err.reason)


def make_app(store: EventStore) -> web.Application:
    app = web.Application(middlewares=[errors_as_json])
    app[STORE] = store
    app.router.add_get("/v1/jobs/{job_id}", get_job)
    app.router.add_get("/healthz", healthz)
    return app
