"""The tracker (the service facing the network) and the solver may create only the streams and
buckets their start declares, and update none (docs/security.md). With every service's right to
create any stream and update any stream's config, a compromised tracker could drop the log with
a lower limit, or capture `muster.ops.>` in a stream of its own, so that JetStream answered every
tenant's requests with its acknowledgements; as was closed for provisioners
(test_provisioner_streams.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import DiscardPolicy, StreamConfig
from nats.js.errors import APIError, NotFoundError

from contracts import subjects
from muster.bus.snapshotstore import SnapshotStore
from muster.bus.streams import ensure_streams, events_config
from services.tracker.adapters.kv import LocationIndex

from .conftest import Authed

SERVICES = ("tracker", "solver")


@dataclass
class World:
    system: Client
    services: dict[str, Client]
    violations: list[str]


@pytest_asyncio.fixture
async def world(authed: Authed) -> AsyncIterator[World]:
    tokens = await authed.people({f"{kind}-1": {"role": "service", "service": kind} for kind in SERVICES})
    system = await authed.raw(authed.system_token, "sys")
    await ensure_streams(system.jetstream())
    violations: list[str] = []

    async def on_error(err: Exception) -> None:
        violations.append(str(err).lower())

    services = {kind: await authed.raw(tokens[f"{kind}-1"], f"{kind}-1", error_cb=on_error) for kind in SERVICES}
    yield World(system, services, violations)
    for nc in services.values():
        await nc.close()
    await system.close()


async def _refused(call: object) -> bool:
    """The server refused the JetStream API request (a permission violation drops it: it times out)."""
    try:
        await call  # type: ignore[misc]
    except (NatsTimeout, APIError):
        return True
    return False


@pytest.mark.parametrize("kind", SERVICES)
async def test_a_service_cannot_drop_the_log_nor_capture_the_tenants_requests(world: World, kind: str) -> None:
    js = world.services[kind].jetstream(timeout=2)
    limited = events_config()
    limited.max_msgs, limited.discard = 1, DiscardPolicy.OLD
    assert await _refused(js.update_stream(limited))
    assert (await world.system.jetstream().stream_info(subjects.EVENTS_STREAM)).config.max_msgs == -1
    capture = StreamConfig(name="CAPTURE", subjects=[f"{subjects.OPS}.>"])
    assert await _refused(js.add_stream(capture))
    with pytest.raises(NotFoundError):
        await world.system.jetstream().stream_info("CAPTURE")


async def test_the_tracker_and_the_solver_still_declare_what_they_use(world: World) -> None:
    """What their starts do: the log's streams (already there: nothing changes); the tracker's
    locations bucket (made here: it is missing) and replay's snapshots bucket."""
    for nc in world.services.values():
        await ensure_streams(nc.jetstream(timeout=5))
    tracker = world.services["tracker"].jetstream(timeout=5)
    index = await LocationIndex.open(tracker)
    await index.start()
    await SnapshotStore(world.services["tracker"]).bucket()
    await index.stop()
    assert not any("permissions violation" in v for v in world.violations), world.violations
