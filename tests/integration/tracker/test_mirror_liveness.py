"""The tracker's location mirror keeps up without waking every second: its consumer's idle
heartbeat was 1 s (an idle tracker woke 1.5 times a second for it), the only way a lost
consumer was noticed. It is 30 s now, and a lost consumer is re-created when it may be lost:
when the connection comes back (a restarted server lost it), and when a write of the tracker's
own is not delivered back. Each case here would wait two heartbeats (60 s) without that, well
past the deadline."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from muster.bus.connect import connect
from muster.bus.server import NatsServer
from services.tracker.adapters.kv import IDLE_HEARTBEAT_S, LocationIndex

from .test_index import _story

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]

DEADLINE_S = 20.0
"""Well within two idle heartbeats (60 s): the heartbeat alone would not make it."""
BUCKET = "locations-liveness"


async def _indexes(stack: AsyncExitStack, url: str) -> tuple[LocationIndex, LocationIndex]:
    """A tracker's index with its mirror, and another writer's (another tracker)."""
    out = []
    for name in ("tracker", "other"):
        nc = await connect(url, name=name)  # reconnects without end
        stack.push_async_callback(nc.close)
        out.append(await LocationIndex.open(nc.jetstream(), BUCKET))
    mirrored, other = out
    await mirrored.start()
    stack.push_async_callback(mirrored.stop)
    return mirrored, other


async def _written_and_mirrored(mirrored: LocationIndex, other: LocationIndex, updates: list[Any]) -> None:
    for u in updates:
        await other.apply(u)
    keys = {u.key for u in updates}
    await mirrored.mirror.wait_for(lambda: all(mirrored.mirror.revision(k) >= other.mirror.revision(k) for k in keys), DEADLINE_S)


async def test_the_mirror_asks_for_a_rare_heartbeat_and_follows_again_after_the_server_restarts(tmp_path: Path) -> None:
    updates = _story()
    async with AsyncExitStack() as stack:
        server = await NatsServer(tmp_path / "nats", name="mirror").start()
        stack.push_async_callback(lambda: server.stop())
        mirrored, other = await _indexes(stack, server.url)
        info = await mirrored._sub.consumer_info()
        assert info.config.idle_heartbeat == IDLE_HEARTBEAT_S >= 30  # not every second
        await _written_and_mirrored(mirrored, other, updates[:2])

        port = server.port
        await server.stop()  # the ordered consumer lives in the server's memory: lost
        server = await NatsServer(tmp_path / "nats", port=port, name="mirror").start()
        await _written_and_mirrored(mirrored, other, updates[2:])


async def test_a_consumer_lost_under_a_live_connection_is_noticed_by_a_write_not_delivered_back(nats_url: str) -> None:
    """As when the server that held it dies in a cluster while the tracker's own stays up: no
    reconnect tells; the tracker's next write, not delivered back, does."""
    updates = _story()
    async with AsyncExitStack() as stack:
        mirrored, other = await _indexes(stack, nats_url)
        stack.push_async_callback(other.js.delete_key_value, BUCKET)
        await _written_and_mirrored(mirrored, other, updates[:2])
        info = await mirrored._sub.consumer_info()
        await mirrored.js.delete_consumer(info.stream_name, info.name)
        await mirrored.apply(updates[2])  # its own write: in its mirror at once, never delivered back
        await _written_and_mirrored(mirrored, other, updates[3:])
