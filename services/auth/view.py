"""The identity events folded in memory and kept current: one ordered consumer on
`muster.evt._auth.>` that first catches up, then follows. The auth service and the tracker
each keep one; state changes only through it, in log order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.identity import IdentityEvent
from muster.bus.eventstore import recorded_from_msg
from muster.bus.wire import close_push, ordered_config

from .domain.state import IdentityState

log = structlog.get_logger("muster.auth.view")


class IdentityView:
    def __init__(self, nc: Client, on_event: Callable[[IdentityEvent], None] | None = None) -> None:
        self.nc = nc
        self.on_event = on_event
        self.state = IdentityState()
        self._changed = asyncio.Condition()
        self._sub: Any = None

    async def start(self, timeout: float = 30.0) -> IdentityView:
        caught_up = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            try:
                recorded = recorded_from_msg(msg)
            except Exception as err:  # noqa: BLE001 - one bad record must not stop identities
                log.error("undecodable identity event skipped", seq=msg.metadata.sequence.stream, error=str(err)[:300])
            else:
                if isinstance(recorded.event, IdentityEvent) and recorded.seq > self.state.last_seq:
                    self.state.apply(recorded.event, recorded.seq)
                    if self.on_event is not None and caught_up.done():
                        self.on_event(recorded.event)  # news, not history
            async with self._changed:
                self.state.last_seq = max(self.state.last_seq, msg.metadata.sequence.stream)
                self._changed.notify_all()
            if msg.metadata.num_pending == 0 and not caught_up.done():
                caught_up.set_result(None)

        js = self.nc.jetstream()
        self._sub = await js.subscribe(
            subjects.ALL_IDENTITY_EVENTS, ordered_consumer=True, config=ordered_config(), deliver_policy=DeliverPolicy.ALL, cb=on_msg,
            stream=subjects.EVENTS_STREAM, pending_msgs_limit=-1, pending_bytes_limit=-1,
        )
        try:
            info = await self._sub.consumer_info()
            if info.num_pending == 0 and info.delivered.consumer_seq == 0:
                return self  # no identity events yet
            await asyncio.wait_for(caught_up, timeout)
        except BaseException:
            await self.stop()  # (a start tried again must not leave this one folding beside it)
            raise
        return self

    async def wait_for(self, seq: int, timeout: float = 10.0) -> None:
        """Until the event at `seq` (just appended) has been folded in."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.state.last_seq >= seq), timeout)

    async def stop(self) -> None:
        if self._sub is not None:
            await close_push(self._sub)  # (the connection may be gone already)
            self._sub = None
