"""The tracker's pool routes: `GET /v1/pools`, `/v1/pools/{pool}` and its SSE stream.

One ordered consumer folds every pool's events as they are recorded (the Pool aggregate is the
fold), so a read is an in-memory view and a stream is a fan-out of the same deliveries: nothing
polls, and nothing asks a pool service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog
from aiohttp import web
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.envelope import Recorded
from muster.bus.eventstore import EventStore, recorded_from_msg
from muster.bus.repository import fold, log_seq
from muster.readmodel.pools import change_for, pool_view
from services.pool.domain.pool import Pool

log = structlog.get_logger("muster.tracker")
READY_TIMEOUT_S = 30.0


class PoolMirror:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.pools: dict[str, Pool] = {}
        self.listeners: dict[str, set[asyncio.Queue[Recorded]]] = {}
        self.ready = asyncio.Event()
        self.sub: Any = None

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            try:
                r = recorded_from_msg(msg)
                name = r.subject.rsplit(".", 1)[1]
                self.pools[name] = fold(Pool, self.pools.get(name), r)
            except Exception:  # a reader that cannot fold must not stop the others
                log.exception("cannot fold pool event", subject=msg.subject)
                return
            for queue in self.listeners.get(name, ()):
                queue.put_nowait(r)
            if msg.metadata.num_pending == 0:
                self.ready.set()

        self.sub = await self.store.js.subscribe(subjects.ALL_POOL_EVENTS, ordered_consumer=True, cb=on_msg,
                                                 deliver_policy=DeliverPolicy.ALL, stream=subjects.EVENTS_STREAM)
        info = await self.sub.consumer_info()
        if info.num_pending == 0 and info.delivered.consumer_seq == 0:
            self.ready.set()  # no pool events at all

    async def stop(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()

    async def pool(self, name: str) -> Pool | None:
        await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT_S)
        return self.pools.get(name)

    @contextlib.contextmanager
    def listening(self, name: str) -> Any:
        queue: asyncio.Queue[Recorded] = asyncio.Queue()
        self.listeners.setdefault(name, set()).add(queue)
        try:
            yield queue
        finally:
            self.listeners[name].discard(queue)


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
