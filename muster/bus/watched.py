"""A KV bucket a process declares, reads whole, then follows with a watch of its own.

The planners' shared boards (`budgets.NatsBudgets`, `spend.NatsSpend`) keep what the watch
delivered in memory and read it without a round trip; each says what an entry means in its
`_watch`, which sets `ready` once the bucket's current values are in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from . import streams


class WatchedBucket:
    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        self.js, self.replicas = js, replicas
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None

    async def _follow(self, bucket: str, description: str,
                      watch: Callable[[Any, asyncio.Event], Coroutine[Any, Any, None]]) -> None:
        """Declare the bucket (one revision per key, no TTL), then watch it; returns once the
        current values are in."""
        self._kv = await streams.ensure_bucket(self.js, KeyValueConfig(
            bucket=bucket, history=1, storage=StorageType.FILE, replicas=self.replicas, description=description))
        watcher = await self._kv.watchall()
        ready = asyncio.Event()
        self._task = asyncio.create_task(watch(watcher, ready))
        await ready.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
