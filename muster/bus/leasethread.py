"""Shard leases kept on a thread of their own (`ShardLeases` in its own event loop, on its own
NATS connection), for a service whose loop may be busy for seconds.

Measured: while a planner plans and dispatches a 10,000-node create its loop falls behind by up
to 4 s at a time on this machine (more under load), and leases renewed on that loop lapsed; a
write from another thread's connection took under 0.3 s throughout. So the leases live here:
renewals, the watch and the fences never wait for the service's loop. What the owner must do
when it gains or loses shards (`on_gained`, `on_lost`) still runs on the service's loop, and the
keeper waits for it (the hand-over order holds: the owner stops acting before a key is deleted).
The reads (`owns`, `held`...) look at dictionaries the keeper replaces whole on each change.

The keeper's connection reconnects without end, but nats-py gives a connection up for good on
some errors from the server (an `Authorization Violation` that a config reload's auth check sends
to a connection already back: docs/security.md, "TLS"). Its leases then lapse and can never be
taken again, so the owner is told (`on_closed`, on its loop): a planner exits then and its
supervisor starts it again, as it does when its own connection is given up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from .connect import connect
from .shards import DEFAULT_SHARDS, DEFAULT_TTL_S, Callback, Lease, ShardLeases, Shards, _nothing, shard_of, until


class ThreadedLeases:
    def __init__(self, servers: str, member: str, *, shards: int = DEFAULT_SHARDS, ttl_s: float = DEFAULT_TTL_S,
                 on_gained: Callback = _nothing, on_lost: Callback = _nothing, replicas: int = 1,
                 on_closed: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        self.servers, self.member, self.shards, self.ttl_s, self.replicas = servers, member, shards, ttl_s, replicas
        self.on_gained, self.on_lost, self.on_closed = on_gained, on_lost, on_closed
        self._keeper: ShardLeases | None = None
        self._changed = asyncio.Condition()
        """Notified (on the service's loop) whenever the keeper's watch saw a change."""
        self._wakes: set[asyncio.Task[None]] = set()

    # -- reading (any thread) ---------------------------------------------------------------------

    @property
    def held(self) -> dict[int, Lease]:
        return self._keeper.held if self._keeper is not None else {}

    @property
    def owners(self) -> dict[int, str]:
        return self._keeper.owners if self._keeper is not None else {}

    def owns(self, shard: int) -> bool:
        return self._keeper is not None and self._keeper.owns(shard)

    def owns_cluster(self, cluster_id: str) -> bool:
        return self.owns(shard_of(cluster_id, self.shards))

    def revision(self, shard: int) -> int:
        return self._keeper.revision(shard) if self._keeper is not None else 0

    async def changed(self, shard: int, since: int, timeout: float) -> bool:
        """As `ShardLeases.changed`, waited for on the service's loop."""
        return await until(self._changed, lambda: self.revision(shard) > since, timeout)

    async def settled(self, shard: int) -> None:
        """A held lease past its validity is being renewed late (or is about to be dropped): wait
        (at most a TTL) until it is valid again or gone. What the owner decides for the shard
        meanwhile would be wrong either way: skipping an event it still owns loses it, since no
        rebuild follows a late renewal."""
        if not self.owns(shard) and shard in self.held:
            await until(self._changed, lambda: self.owns(shard) or shard not in self.held, self.ttl_s)

    # -- life ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._main = asyncio.get_running_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._keep(started)), name=f"leases-{self.member}", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)

    async def stop(self) -> None:
        await self._in_keeper("stop")

    async def abort(self) -> None:
        """Die without a word (tests play a kill -9): the leases expire."""
        await self._in_keeper("abort")

    async def _in_keeper(self, what: str) -> None:
        keeper = self._keeper
        if keeper is None or self._loop.is_closed() or not self._thread.is_alive():
            return  # stopped or aborted already
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(getattr(keeper, what)(), self._loop))
        self._loop.call_soon_threadsafe(self._done.set)
        await asyncio.to_thread(self._thread.join, 10)

    # -- the keeper's thread ----------------------------------------------------------------------

    async def _keep(self, started: concurrent.futures.Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        closing = False

        async def closed() -> None:
            if not closing and self.on_closed is not None:  # given up by nats-py, not closed by us
                await self._call_main(self.on_closed())

        try:
            self._nc = nc = await connect(self.servers, name=f"{self.member}-leases", closed_cb=closed)
        except BaseException as err:  # noqa: BLE001 - whatever it is, the starting thread raises it
            started.set_exception(err)
            return
        try:
            self._keeper = ShardLeases(nc.jetstream(), self.member, shards=self.shards, ttl_s=self.ttl_s, replicas=self.replicas,
                                       on_gained=self._on_main("on_gained"), on_lost=self._on_main("on_lost"),
                                       on_change=self._wake_soon)
            await self._keeper.start()
        except BaseException as err:  # noqa: BLE001 - whatever it is, the starting thread raises it
            started.set_exception(err)
            closing = True
            await nc.close()
            return
        started.set_result(None)
        await self._done.wait()
        closing = True
        await nc.close()

    async def _call_main(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` on the service's loop and wait for it (nothing when that loop is gone)."""
        try:
            future = asyncio.run_coroutine_threadsafe(work, self._main)
        except RuntimeError:  # the service's loop is closed: the process is on its way out
            work.close()
            return
        await asyncio.wrap_future(future)

    def _on_main(self, name: str) -> Callback:
        """The owner's callback (looked up when called), run on the service's loop; the keeper
        waits for it."""

        async def call(shards: Shards) -> None:
            callback: Any = getattr(self, name)
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(callback(shards), self._main))

        return call

    def _wake_soon(self) -> None:
        """From the keeper's thread: wake the waiters of `changed` on the service's loop."""
        self._main.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = self._main.create_task(notify())
        self._wakes.add(task)  # a reference until it ran
        task.add_done_callback(self._wakes.discard)
