"""The write routes over HTTP (aiohttp): parameters and headers checked (a bad one is a 400
naming it), the body read as JSON, then `writes.submit` as the token's principal."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from nats.aio.client import Client

from contracts.catalog import KINDS
from contracts.commands import ID
from contracts.errors import name_fault
from contracts.governance import NAME as GOVERNANCE_NAME
from contracts.governance import NAME_RULE
from contracts.identity import Scope
from contracts.limits import MAX_REQUEST_BYTES, NotJson, strict_json

from . import csrf, write_api
from .acting import ActingBus
from .auth import AUTHZ, PRINCIPAL, _token_of
from .params import TRACKER, BadParameter, error, shown, tenant_of, uuid_of
from .write_api import IDEMPOTENCY_KEY, MAX_KEY_LENGTH, WriteRoute
from .writes import Actor, Written, refused, saved_plan, submit

ACTING = web.AppKey("acting", ActingBus)
_ID = re.compile(ID)
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_KEY = re.compile(rf"^[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}$")
_IF_MATCH = re.compile(r'^\s*(?:"(\d{1,12})"|(\d{1,12})|(\*))\s*$')
CATALOG_BYTES = 1 << 20
"""A catalog apply may carry a whole catalog (the bus's payload limit, 1 MiB by default)."""


def _ids(request: web.Request, route: WriteRoute) -> dict[str, str]:
    ids: dict[str, str] = {}
    for name in route.ids:
        value = request.match_info[name]
        if name in ("cluster_id", "job_id"):
            ids[name] = uuid_of(request, name, name.replace("_", " "))
        elif name == "kind":
            if value not in KINDS:
                raise BadParameter(name, f"kind {shown(value)} is not one of {', '.join(KINDS)}")
            ids[name] = value
        elif route.path.startswith("/v1/governance/") and not re.fullmatch(GOVERNANCE_NAME, value):
            # as `muster policy apply` and the governance service refuse it ("is not a name" said nothing of what is)
            fault = name_fault(value, GOVERNANCE_NAME)
            raise BadParameter(name, f"{name} {shown(value)} is not a name: use {NAME_RULE}" + (f" ({fault})" if fault else ""))
        elif not (_ID if name == "plan_id" else _NAME).fullmatch(value):
            raise BadParameter(name, f"{name} {shown(value)} is not a {name.replace('_', ' ')}")
        else:
            ids[name] = value
    return ids


def _dry_run(request: web.Request, route: WriteRoute) -> bool:
    raw = request.query.get("dry_run")
    if raw is None:
        return False
    if not route.dry_run:
        raise BadParameter("dry_run", f"{route.method.upper()} {route.path} has no dry run")
    if raw.lower() not in ("true", "false", "1", "0"):
        raise BadParameter("dry_run", f"dry_run {shown(raw)} is not true or false")
    return raw.lower() in ("true", "1")


def _key(request: web.Request) -> str | None:
    raw = request.headers.get(IDEMPOTENCY_KEY)
    if raw is None:
        return None
    if not _KEY.fullmatch(raw):
        raise BadParameter(IDEMPOTENCY_KEY, f"{IDEMPOTENCY_KEY} must be 1-{MAX_KEY_LENGTH} visible ASCII characters")
    return raw


def _if_version(request: web.Request, route: WriteRoute) -> int | None:
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    if not route.if_match:
        raise BadParameter("If-Match", f"If-Match goes with operations on an existing cluster, not {route.method.upper()} {route.path}")
    match = _IF_MATCH.fullmatch(raw)
    if match is None:
        raise BadParameter("If-Match", f"If-Match {shown(raw)} is not a cluster version (its ETag, e.g. \"7\")")
    version = match.group(1) or match.group(2)
    if version is not None and int(version) < 1:
        raise BadParameter("If-Match", "If-Match: cluster versions start at 1")
    return int(version) if version is not None else None


async def _body(request: web.Request, route: WriteRoute) -> dict[str, Any] | None:
    if not request.can_read_body:
        return None
    limit = CATALOG_BYTES if route.verb == "catalog-apply" else MAX_REQUEST_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise _Refusal(refused(413, f"the body is {request.content_length:,} bytes; the limit is {limit:,}", "body"))
    raw = await request.content.read(limit + 1)
    if len(raw) > limit:
        raise _Refusal(refused(413, f"the body is over {limit:,} bytes", "body"))
    if not raw.strip():
        return None
    if request.content_type != "application/json":
        raise _Refusal(refused(415, f"the body must be application/json, not {shown(request.content_type)}", "Content-Type"))
    try:
        body = strict_json(raw.decode("utf-8"))
    except NotJson as err:
        raise _Refusal(refused(400, f"the body {err.said()}", "body")) from None
    except UnicodeDecodeError as err:  # ("'utf-8' codec can't decode byte 0xff in position 0": Python's words)
        raise _Refusal(refused(400, f"the body is not UTF-8 JSON: byte {err.start} ({raw[err.start:err.start + 1]!r}) is not UTF-8",
                               "body")) from None
    except ValueError as err:
        raise _Refusal(refused(400, f"the body is not UTF-8 JSON: {str(err)[:200]}", "body")) from None
    if not isinstance(body, dict):
        raise _Refusal(refused(422, "the body must be a JSON object", "body"))
    return body


class _Refusal(Exception):
    def __init__(self, written: Written) -> None:
        super().__init__(written.message)
        self.written = written


def actor_of(request: web.Request, tenant: str) -> Actor:
    authz = request[AUTHZ]
    token = _token_of(request) if authz.state is not None else None
    return Actor(tenant, request[PRINCIPAL].id, token, authz.may if authz.state is not None else None)


def _response(written: Written) -> web.Response:
    return web.json_response(written.body, status=written.status, headers=written.headers)


def handler(route: WriteRoute) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        tenant = tenant_of(request)
        ids, dry_run, key, if_version = _ids(request, route), _dry_run(request, route), _key(request), _if_version(request, route)
        actor = actor_of(request, tenant)
        if actor.token is not None and "Authorization" not in request.headers \
                and not csrf.valid(actor.token, tenant, request.headers.get(csrf.HEADER)):
            return error(403, f"a write authenticated by the console's cookie needs its page's {csrf.HEADER} header", csrf.HEADER)
        try:
            body = await _body(request, route)
        except _Refusal as refusal:
            return _response(refusal.written)
        if body is None and route.method == "put":
            # The body is the entity: `curl -X PUT .../rules/r1` with none wrote a rule of every
            # default (one that holds every request for approval); `{}` still says so on purpose.
            return error(422, f"PUT {route.path} needs a body: the entity to write, as JSON (`{{}}` for every default)", "body")
        written = await submit(request.app[TRACKER], request.app[ACTING], actor, route, ids, body, dry_run=dry_run, key=key,
                               if_version=if_version)
        return _response(written)

    return handle


async def get_plan(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    plan_id = request.match_info["plan_id"]
    if not _ID.fullmatch(plan_id):
        raise BadParameter("plan_id", f"plan_id {shown(plan_id)} is not a plan id")
    tracker = request.app[TRACKER]
    found = await saved_plan(tracker, tenant, plan_id)
    if found is None:
        return error(404, f"no plan {plan_id} in tenant {tenant}")
    saved, seq = found
    if not request[AUTHZ].may("read", Scope(tenant=tenant, kind="cluster", id=saved.cluster_id)):
        # The plan names the cluster, not the reader: its id is not said to one who may not read
        # it (the refusal named it, and a grant on it; docs/security.md, "What a refusal names").
        return error(403, f"{request[PRINCIPAL].id} may not read this plan: it has no read permission on the plan's "
                          f"cluster in tenant {tenant} (a tenant admin can give it)")
    return web.json_response({
        "plan_id": saved.plan_id, "operation": saved.operation, "cluster_id": saved.cluster_id, "job_id": saved.job_id,
        "applied": await tracker.job_exists(tenant, saved.job_id), "request": saved.command,
        "layout": saved.layout.model_dump(mode="json") if saved.layout is not None else None,
        "cluster_version": saved.cluster_version, "catalog_version": saved.catalog_version, "tasks": saved.tasks,
        "by": saved.by, "seq": seq})


def setup_writes(app: web.Application, nc: Client) -> None:
    """Register the write routes (and `GET /v1/plans/{plan_id}`) and the requesters' connections."""
    app[ACTING] = bus = ActingBus(nc)
    for route in (*write_api.ROUTES, write_api.CATALOG_DELETE, *write_api.GOVERNANCE_WRITES):
        app.router.add_route(route.method.upper(), route.path, handler(route), name=route.name)
    app.router.add_get(write_api.GET_PLAN.path, get_plan, name=write_api.GET_PLAN.name)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        yield
        await bus.close()

    app.cleanup_ctx.append(lifecycle)
