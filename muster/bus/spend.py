"""The planners' spend board (`services.planner.ports.SpendBoard`) on the KV bucket `spend`.

A key per tenant and shard (`<tenant>.<shard>`), the value that shard's spend as JSON
(`services/planner/domain/spend.py`). Every planner watches the whole bucket and reads it from
what the watch delivered; a key is written only by its shard's owner. One revision per key,
no TTL: a dead planner's entries stay true (they are the log's clusters) until the shard's next
owner writes them again.

A reservation (`put_if`) is written only if no key of the tenant changed since the revision its
judgement read: nats-server's `Nats-Expected-Last-Subject-Sequence` checked against the subject
wildcard `$KV.spend.<tenant>.*` (`Nats-Expected-Last-Subject-Sequence-Subject`, honoured with a
wildcard by nats-server 2.11 and later; checked on 2.15.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError

from .watched import WatchedBucket
from .wire import stop_watch

log = structlog.get_logger("muster.spend")

BUCKET = "spend"
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a publish whose expected last sequence is not the stream's."""


class NatsSpend(WatchedBucket):
    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        super().__init__(js, replicas)
        self._known: dict[str, dict[str, Any]] = {}
        self._revisions: dict[str, int] = {}
        self._changed = asyncio.Condition()

    async def start(self) -> None:
        """Declare the bucket, read it whole, then watch it (returns once the current values are in)."""
        await self._follow(BUCKET, "the tenants' spend by shard, for the policies' tenant totals: <tenant>.<shard> -> {clusters, nodes}",
                           self._watch)

    async def _watch(self, watcher: Any, ready: asyncio.Event) -> None:
        try:
            async for entry in watcher:
                if entry is None:  # the current values are all delivered
                    ready.set()
                    continue
                try:
                    value = json.loads(entry.value or b"{}")
                except ValueError:
                    value = None
                if not isinstance(value, dict):  # counted as nothing (`spend.total`), and said
                    log.warning("a spend entry that is not JSON object is read as nothing", key=entry.key)
                    value = {}
                self._known[entry.key] = value
                self._revisions[entry.key] = max(self._revisions.get(entry.key, 0), entry.revision or 0)
                async with self._changed:
                    self._changed.notify_all()
        finally:
            await stop_watch(watcher)

    async def seen(self, name: str, check: Callable[[Mapping[str, Any]], bool], timeout: float) -> None:
        """Wait, woken by the watch, until `name`'s value as delivered passes `check` (tests)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: check(self._known.get(name, {}))), timeout)

    def known(self) -> Mapping[str, Mapping[str, Any]]:
        return self._known

    async def put(self, name: str, spend: Mapping[str, Any]) -> None:
        assert self._kv is not None, "start() first"
        revision = await self._kv.put(name, json.dumps(spend, sort_keys=True).encode())
        self._seen(name, spend, revision)

    def _seen(self, name: str, spend: Mapping[str, Any], revision: int) -> None:
        self._known[name] = dict(spend)  # (the watch brings the same)
        self._revisions[name] = max(self._revisions.get(name, 0), revision)

    def revision(self, tenant: str) -> int:
        return max((r for k, r in self._revisions.items() if k.rpartition(".")[0] == tenant), default=0)

    async def put_if(self, name: str, spend: Mapping[str, Any], tenant: str, last: int) -> int | None:
        headers = {"Nats-Expected-Last-Subject-Sequence": str(last),
                   "Nats-Expected-Last-Subject-Sequence-Subject": f"$KV.{BUCKET}.{tenant}.*"}
        try:
            ack = await self.js.publish(f"$KV.{BUCKET}.{name}", json.dumps(spend, sort_keys=True).encode(), headers=headers)
        except BadRequestError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            # "wrong last sequence: <n>": where the tenant's keys are; the watch brings them
            found = (err.description or "").rpartition(":")[2].strip()
            return int(found) if found.isdigit() else last + 1
        self._seen(name, spend, ack.seq)
        return None

    async def caught_up(self, tenant: str, last: int, timeout: float) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.revision(tenant) >= last), timeout)
