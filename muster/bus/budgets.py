"""The budgets port (`muster.ports.budgets`) on a KV bucket: `budgets`, one key per budget
(`tenant.<t>`, `provider.<t>.<p>`), the value `{"<shard>": slots}` as JSON.

A write is the bucket's compare-and-set (`update` with the revision it read; 0 for a budget
never written); a refusal is `BudgetConflict`. Every planner watches the whole bucket:
what it delivers is `known()` (read without a round trip), and each change is handed to
`on_change` (an input of the planner: `routing.BUDGETS`), one after the other. The bucket keeps one
revision per key and no TTL: a budget's entries are its shards' owners' to change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from muster.ports.budgets import BudgetConflict, Stored

from .watched import WatchedBucket
from .wire import stop_watch

log = structlog.get_logger("muster.budgets")

BUCKET = "budgets"


def _shares(value: bytes | None) -> dict[int, int]:
    try:
        data = json.loads(value or b"{}")
        return {int(s): int(n) for s, n in data.items()}
    except (ValueError, AttributeError, TypeError):
        log.warning("a budget that is not {shard: slots} is read as empty", value=(value or b"")[:100])
        return {}


class NatsBudgets(WatchedBucket):
    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        super().__init__(js, replicas)
        self._known: dict[str, Stored] = {}

    async def start(self, on_change: Callable[[str], Awaitable[None]]) -> None:
        """Declare the bucket, read it whole, then watch it (returns once the current values are in)."""
        await self._follow(BUCKET, "concurrency limits' budgets: tenant.<t> / provider.<t>.<p> -> {shard: slots}",
                           lambda watcher, ready: self._watch(watcher, ready, on_change))

    async def _watch(self, watcher: Any, ready: asyncio.Event, on_change: Callable[[str], Awaitable[None]]) -> None:
        try:
            async for entry in watcher:
                if entry is None:  # the current values are all delivered
                    ready.set()
                    continue
                stored = Stored(_shares(entry.value), entry.revision)
                if stored.revision >= self._known.get(entry.key, Stored()).revision:
                    self._known[entry.key] = stored
                if not ready.is_set():
                    continue
                try:
                    await on_change(entry.key)  # (this process's own writes too: a planner finds them no news)
                except Exception:  # one change badly taken must not end the watch
                    log.exception("budget change not taken", budget=entry.key)
        finally:  # its consumer and nats-py's tasks for it end with the watch, not with the connection
            await stop_watch(watcher)

    def known(self) -> Mapping[str, Stored]:
        return self._known

    async def read(self, name: str) -> Stored:
        assert self._kv is not None, "start() first"
        try:
            entry = await self._kv.get(name)
        except KeyNotFoundError:
            return Stored()
        stored = Stored(_shares(entry.value), entry.revision or 0)
        self._known[name] = stored
        return stored

    async def write(self, name: str, shares: Mapping[int, int], revision: int) -> int:
        assert self._kv is not None, "start() first"
        value = json.dumps({str(s): n for s, n in sorted(shares.items())}).encode()
        try:
            new = await self._kv.update(name, value, last=revision)  # revision 0: only if never written
        except KeyWrongLastSequenceError as err:
            raise BudgetConflict(f"budget {name} changed since revision {revision}") from err
        if new > self._known.get(name, Stored()).revision:
            self._known[name] = Stored(dict(shares), new)
        return new
