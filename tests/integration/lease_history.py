"""How each shard's lease changed hands, as a watch of the `leases` bucket saw it
(muster/bus/shards.py): released by its owner (a delete), or lapsed (the server's marker once
its TTL ran out), and who wrote it next.

A hand-over that did not wait for the TTL and a takeover that did differ by what the bucket
holds, whatever the machine's load; the tests read that instead of timing them (a graceful
stop's hand-over had to finish within 1 s of a 2 s TTL, a dead member's takeover within 2 TTLs:
a loaded machine's scheduling, not the leases, decided those)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from nats.js import JetStreamContext

from muster.bus.shards import leases_bucket
from muster.bus.wire import stop_watch

RELEASED, LAPSED = "DEL", "PURGE"
"""nats-py's operation of a delete, and of the server's marker of an expired key (its
`Nats-Marker-Reason: MaxAge`, read as a purge)."""


@dataclass
class LeaseHistory:
    entries: list[tuple[int, str, str]] = field(default_factory=list)
    """(shard, operation or "PUT", owner written), in the bucket's order."""
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def _follow(self, watcher: Any, ready: asyncio.Event) -> None:
        async for entry in watcher:
            if entry is None:  # the bucket's current state delivered: what follows is new
                ready.set()
                continue
            if not ready.is_set():
                continue
            shard = int(entry.key.removeprefix("shard."))
            owner = json.loads(entry.value).get("owner", "?") if entry.operation is None and entry.value else ""
            async with self.changed:
                self.entries.append((shard, entry.operation or "PUT", owner))
                self.changed.notify_all()

    def _before_take(self, shard: int, by: str) -> str | None:
        """What ended the shard's previous lease before `by` first wrote it (None: not yet)."""
        before = None
        for s, op, owner in self.entries:
            if s != shard:
                continue
            if op == "PUT" and owner == by:
                return before
            before = op
        return None

    async def taken(self, shards: set[int], by: str, timeout: float) -> dict[int, str | None]:
        """Once `by` has written each of `shards`: what ended each one's lease before."""
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(
                lambda: all(any(s == shard and op == "PUT" and o == by for s, op, o in self.entries) for shard in shards)), timeout)
        return {shard: self._before_take(shard, by) for shard in sorted(shards)}


@asynccontextmanager
async def lease_history(js: JetStreamContext) -> AsyncIterator[LeaseHistory]:
    """The shard keys' changes from now on, until the block ends."""
    kv = await leases_bucket(js)
    watcher = await kv.watch("shard.*")
    history, ready = LeaseHistory(), asyncio.Event()
    follow = asyncio.ensure_future(history._follow(watcher, ready))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield history
    finally:
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await stop_watch(watcher)
