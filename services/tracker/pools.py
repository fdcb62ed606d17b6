"""The tracker's pool routes: `GET /v1/pools`, `/v1/pools/{pool}` and its SSE stream.

One ordered consumer folds every pool's events as they are recorded (the Pool aggregate is the
fold), so a read is an in-memory view and a stream is a fan-out of the same deliveries: nothing
polls, and nothing asks a pool service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web
from nats.js import JetStreamContext

from contracts import subjects
from muster.bus.repository import log_seq
from services.pool.domain.views import change_for, pool_view, pools_there
from services.pool.mirror import PoolMirror

from . import auth as auth_
from . import planner_view
from .params import BadParameter, error, shown, tenant_of
from .sse import deliveries, sse, stream_response
from .still import end_if_lost

POOLS = web.AppKey("pools", PoolMirror)


def setup_pools(app: web.Application, js: JetStreamContext) -> None:
    app[POOLS] = mirror = PoolMirror(js)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await mirror.start()
        yield
        await mirror.stop()

    app.cleanup_ctx.append(lifecycle)


def pool_of(request: web.Request) -> str:
    name = request.match_info["pool"]
    if not subjects.TOKEN.fullmatch(name):
        raise BadParameter("pool", f"pool {shown(name)} is not a pool name: use 1-128 letters, digits, '-' or '_'")
    return name


def no_pool(request: web.Request, mirror: PoolMirror, name: str) -> web.Response:
    """A pool nobody made, with the pools there are (pools are every tenant's: "in tenant X" misled),
    or who makes one: a tenant's people were told an operator's command."""
    return error(404, f"no pool {name!r}: {pools_there(list(mirror.pools), planner_view.sees_deployment(request[auth_.PRINCIPAL]))}")


async def list_pools(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    mirror = request.app[POOLS]
    await mirror.wait_ready()
    items = [pool_view(mirror.pools[n], tenant, hosts=False) for n in sorted(mirror.pools)]
    return web.json_response({"items": [{k: v for k, v in i.items() if k != "queue"} for i in items]})


async def get_pool(request: web.Request) -> web.Response:
    tenant, name = tenant_of(request), pool_of(request)
    hosts = request.query.get("hosts", "true")
    if hosts not in ("true", "false"):
        raise BadParameter("hosts", f"hosts {shown(hosts)} is not true or false")
    pool = await request.app[POOLS].pool(name)
    if pool is None:
        return no_pool(request, request.app[POOLS], name)
    view = pool_view(pool, tenant, hosts=True)
    if hosts == "false":
        view["hosts_detail"] = []
    return web.json_response({**view, "seq": log_seq(pool)})


async def stream_pool(request: web.Request) -> web.StreamResponse:
    tenant, name = tenant_of(request), pool_of(request)
    mirror = request.app[POOLS]
    if await mirror.pool(name) is None:
        return no_pool(request, mirror, name)
    still = auth_.still_reading(request, None)  # a pool is read by any principal of the tenant: the token alone
    response = stream_response(request)
    with mirror.listening(name) as queue:
        # Registered before the first view is taken: nothing recorded in between is missed,
        # and a change is sent only if it is newer than what the view showed.
        await response.prepare(request)
        pool = mirror.pools[name]
        shown_seq = log_seq(pool)
        await response.write(sse("pool", shown_seq, {**pool_view(pool, tenant), "seq": shown_seq}))
        try:
            async for r in deliveries(queue, response):
                if await end_if_lost(response, still):
                    break
                if r.seq > shown_seq:
                    await response.write(sse("change", r.seq, change_for(mirror.pools[name], r, tenant)))
        except ConnectionError:
            pass  # the client went away
    return response
