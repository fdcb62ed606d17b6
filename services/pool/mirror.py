"""Every pool, folded live from the log by one ordered consumer (nothing polls).

Readers that need the pools as they are, not as a pool service last answered (the tracker's
routes and streams, the planner's admission and grants), keep one of these: it replays every
pool's events at start and then folds each new one as it is recorded. `watch` registers a
coroutine called with every event after it is folded (in log order, one at a time);
`listening` gives a queue of one pool's events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.records import Recorded
from muster.bus.eventstore import recorded_from_msg
from muster.bus.repository import fold
from muster.bus.wire import close_push, ordered_config

from .domain.pool import Pool

log = structlog.get_logger("muster.pool")
READY_TIMEOUT_S = 30.0

Watcher = Callable[[str, Pool, Recorded], Awaitable[None]]


class PoolMirror:
    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.pools: dict[str, Pool] = {}
        self.listeners: dict[str, set[asyncio.Queue[Recorded]]] = {}
        self.watchers: list[Watcher] = []
        self.ready = asyncio.Event()
        self.sub: Any = None

    def watch(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            try:
                r = recorded_from_msg(msg)
                name = r.subject.rsplit(".", 1)[1]
                self.pools[name] = pool = fold(Pool, self.pools.get(name), r)
            except Exception:  # a reader that cannot fold must not stop the others
                log.exception("cannot fold pool event", subject=msg.subject)
                return
            for queue in self.listeners.get(name, ()):
                queue.put_nowait(r)
            for watcher in self.watchers:
                try:
                    await watcher(name, pool, r)
                except Exception:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise asyncio.CancelledError() from None  # stopping (see muster.bus.consume)
                    log.exception("pool watcher failed", pool=name, type=r.type)
            if msg.metadata.num_pending == 0:
                self.ready.set()

        self.sub = await self.js.subscribe(subjects.ALL_POOL_EVENTS, ordered_consumer=True, config=ordered_config(), cb=on_msg,
                                                 deliver_policy=DeliverPolicy.ALL, stream=subjects.EVENTS_STREAM,
                                                 pending_msgs_limit=-1, pending_bytes_limit=-1)
        info = await self.sub.consumer_info()
        if info.num_pending == 0 and info.delivered.consumer_seq == 0:
            self.ready.set()  # no pool events at all

    async def stop(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await close_push(self.sub)

    async def wait_ready(self) -> None:
        """Until every event recorded before `start` is folded."""
        await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT_S)

    async def pool(self, name: str) -> Pool | None:
        await self.wait_ready()
        return self.pools.get(name)

    def position(self, pool: str, request_id: str) -> int | None:
        """A request's place in its pool's line (1 = next), as far as this fold has read."""
        found = self.pools.get(pool)
        return found.position(request_id) if found is not None else None

    @contextlib.contextmanager
    def listening(self, name: str) -> Iterator[asyncio.Queue[Recorded]]:
        queue: asyncio.Queue[Recorded] = asyncio.Queue()
        self.listeners.setdefault(name, set()).add(queue)
        try:
            yield queue
        finally:
            self.listeners[name].discard(queue)
