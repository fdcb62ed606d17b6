"""nats-py's flow-control answers, as `muster.bus.wire` runs them (`_answer_flow_control`): an
idle push subscription's task does not look for a pending request 4 times a second (what idle
services spent their CPU on, docs/benchmarks.md "Idle"), and a request is still answered, so a
consumer faster than its callback still gets every message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js.api import DeliverPolicy

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.streams import ensure_streams
from muster.bus.wire import close_push

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]


class Looks:
    """A connection that counts how often its `is_closed` is read: once per turn of the
    flow-control loop (and of nats-py's heartbeat check, every 2 x idle heartbeat)."""

    def __init__(self, nc: Any) -> None:
        self.nc, self.count = nc, 0

    @property
    def is_closed(self) -> bool:
        self.count += 1
        return bool(self.nc.is_closed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.nc, name)


async def test_an_idle_subscription_does_not_look_for_flow_control_requests(fresh_nats: str) -> None:
    nc = await connect(fresh_nats, name="fc-idle")
    try:
        await ensure_streams(nc.jetstream())
        sub = await nc.jetstream().subscribe(f"{subjects.EVT}.fc-idle.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
                                             stream=subjects.EVENTS_STREAM, idle_heartbeat=5.0, cb=_ignore)
        jsi: Any = sub._sub._jsi
        await asyncio.sleep(0.1)  # both checks in their first wait
        looks = jsi._conn = Looks(nc)
        await asyncio.sleep(1.5)  # an absence is observed over a window: nats-py looked 6 times in it
        assert looks.count == 0
        await close_push(sub)
    finally:
        await nc.close()


async def _ignore(msg: object) -> None:
    return None


async def test_flow_control_requests_are_still_answered(fresh_nats: str) -> None:
    nc = await connect(fresh_nats, name="fc-busy")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        total, body = 3000, b"x" * 8192  # 24 MB: more than a push consumer sends unanswered
        for start in range(0, total, 500):
            # 500 acks of 4 MB stored at once: more than the default 5 s each at load 15
            # (`nats: timeout`, 1 run in 2); an ack that comes costs nothing more.
            await asyncio.gather(*(js.publish(f"{subjects.EVT}.fc.busy.{i}", body, stream=subjects.EVENTS_STREAM, timeout=30)
                                   for i in range(start, min(start + 500, total))))
        got: list[int] = []
        done = asyncio.get_running_loop().create_future()

        async def take(msg: Any) -> None:
            got.append(1)
            await asyncio.sleep(0)  # a callback slower than the read loop: requests wait for it
            if len(got) == total and not done.done():
                done.set_result(None)

        sub = await js.subscribe(f"{subjects.EVT}.fc.busy.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
                                 stream=subjects.EVENTS_STREAM, idle_heartbeat=30.0, cb=take,
                                 pending_msgs_limit=-1, pending_bytes_limit=-1)
        await asyncio.wait_for(done, 40)  # a heartbeat's stall notice (30 s) would come too late
        assert len(got) == total
        await close_push(sub)
    finally:
        await nc.close()
