"""The tracker's pool routes: `GET /v1/pools`, `/v1/pools/{pool}` and its SSE stream.

One ordered consumer folds every pool's events as they are recorded (the Pool aggregate is the
fold), so a read is an in-memory view and a stream is a fan-out of the same deliveries: nothing
polls, and nothing asks a pool service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from muster.bus.eventstore import EventStore
from muster.bus.repository import log_seq
from muster.readmodel.pools import change_for, pool_view
from services.pool.mirror import READY_TIMEOUT_S, PoolMirror


POOLS = web.AppKey("pools", PoolMirror)


def setup_pools(app: web.Application, store: EventStore) -> None:
    app[POOLS] = mirror = PoolMirror(store)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await mirror.start()
        yield
        await mirror.stop()

    app.cleanup_ctx.append(lifecycle)


async def list_pools(request: web.Request, tenant: str) -> web.Response:
    mirror = request.app[POOLS]
    await asyncio.wait_for(mirror.ready.wait(), READY_TIMEOUT_S)
    items = [pool_view(mirror.pools[n], tenant, hosts=False) for n in sorted(mirror.pools)]
    return web.json_response({"items": [{k: v for k, v in i.items() if k != "queue"} for i in items]})


async def get_pool(request: web.Request, tenant: str, name: str, not_found: Any, hosts: bool) -> web.Response:
    pool = await request.app[POOLS].pool(name)
    if pool is None:
        return not_found("pool", name, tenant)  # type: ignore[no-any-return]
    view = pool_view(pool, tenant, hosts=True)
    if not hosts:
        view["hosts_detail"] = []
    return web.json_response({**view, "seq": log_seq(pool)})


async def stream_pool(request: web.Request, tenant: str, name: str, not_found: Any, sse: Any,
                      keepalive_s: float) -> web.StreamResponse:
    mirror = request.app[POOLS]
    pool = await mirror.pool(name)
    if pool is None:
        return not_found("pool", name, tenant)  # type: ignore[no-any-return]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    with mirror.listening(name) as queue:
        # Registered before the first view is taken: nothing recorded in between is missed,
        # and a change is sent only if it is newer than what the view showed.
        await response.prepare(request)
        pool = mirror.pools[name]
        shown = log_seq(pool)
        await response.write(sse("pool", shown, {**pool_view(pool, tenant), "seq": shown}))
        try:
            while True:
                try:
                    r = await asyncio.wait_for(queue.get(), keepalive_s)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if r.seq > shown:
                    await response.write(sse("change", r.seq, change_for(mirror.pools[name], r, tenant)))
        except ConnectionError:
            pass  # the client went away
    return response
