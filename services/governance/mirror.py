"""Every tenant's governance entities (or one kind of them), folded live from the log by one
ordered consumer (nothing polls): the scheduler's schedules, the notifier's subscriptions.

It replays the filter's events at start, then folds each new one as it is recorded; `watch`
registers a coroutine called with the tenant and the entry an event changed (or None when it
deleted one), in log order, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from muster.bus.eventstore import recorded_from_msg
from muster.bus.wire import close_push, ordered_config

from .domain.entities import Entry, apply

log = structlog.get_logger("muster.governance")
READY_TIMEOUT_S = 30.0

Watcher = Callable[[str, str, str, Entry | None], Awaitable[None]]
"""(tenant, kind, name, the entry now or None)"""


class GovernanceMirror:
    def __init__(self, js: Any, subject_filter: str = subjects.ALL_GOVERNANCE_EVENTS) -> None:
        self.js = js
        self.filter = subject_filter
        self.tenants: dict[str, dict[tuple[str, str], Entry]] = {}
        self.watchers: list[Watcher] = []
        self.ready = asyncio.Event()
        self.sub: Any = None

    def watch(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)

    def entries(self, tenant: str, kind: str) -> list[Entry]:
        return sorted((e for (k, _), e in self.tenants.get(tenant, {}).items() if k == kind), key=lambda e: e.name)

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            try:
                r = recorded_from_msg(msg)
                _, _, tenant, _, kind, name = r.subject.split(".")
                entry = apply(self.tenants.setdefault(tenant, {}), r)
            except Exception:  # one event that cannot be folded must not stop the others
                log.exception("cannot fold governance event", subject=msg.subject)
                return
            for watcher in self.watchers:
                try:
                    await watcher(tenant, kind, name, entry)
                except Exception:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise asyncio.CancelledError() from None
                    log.exception("governance watcher failed", tenant=tenant, kind=kind, name=name)
            if msg.metadata.num_pending == 0:
                self.ready.set()

        self.sub = await self.js.subscribe(self.filter, ordered_consumer=True, config=ordered_config(), cb=on_msg,
                                           deliver_policy=DeliverPolicy.ALL,
                                           stream=subjects.EVENTS_STREAM, pending_msgs_limit=-1, pending_bytes_limit=-1)
        info = await self.sub.consumer_info()
        if info.num_pending == 0 and info.delivered.consumer_seq == 0:
            self.ready.set()

    async def wait_ready(self) -> None:
        await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT_S)

    async def stop(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await close_push(self.sub)
