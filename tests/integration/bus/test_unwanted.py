"""A consumer told which event types it handles (`types`, as `consume_routes` passes a routing
table's) acknowledges the others by their type header, unread, against a real nats-server: a
big event it does not handle is never decoded nor its body fetched (its body is not stored
here, so a fetch would fail and the event would be delivered again until poison)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.events import ClusterLayoutChanged, ClusterStatusChanged
from contracts.layout import NodeSpec
from contracts.records import Recorded
from muster.bus.bodies import H_BODY, stub
from muster.bus.consume import consume_batches, consume_events
from muster.bus.eventstore import Append, EventStore

from .test_batches import _acks

pytestmark = pytest.mark.nats


def _big() -> ClusterLayoutChanged:
    nodes = [NodeSpec(id=f"n{i}", hardwaretype="large", imagetype="ubuntu22", services=["base"], hostname=f"h{i}.local",
                      nodenum=i, flavor="m5.large", image="ami-1", sshuser="ubuntu") for i in range(1000, 3000)]
    return ClusterLayoutChanged(cluster_id="c1", job_id="j1", nodes=nodes)


async def _write_without_body(nc: Client, tenant: str) -> str:
    """A status change, a big layout change whose body is not in BODIES (written by hand as
    the log's writer writes an offloaded event, naming a body never stored), a status change."""
    store = EventStore(nc)
    subject = subjects.cluster_events(tenant, "c1")
    await store.append(subject, [Append(ClusterStatusChanged(cluster_id="c1", status="pending", job_id="j1"), msg_id=f"{tenant}.1")])
    big = _big()
    headers = {**Append(big, msg_id=f"{tenant}.2").headers(), H_BODY: "sha256:" + "0" * 64}
    await nc.jetstream().publish(subject, stub(big.type, big.v, headers[H_BODY], len(big.model_dump_json()), 1), headers=headers)
    await store.append(subject, [Append(ClusterStatusChanged(cluster_id="c1", status="active", job_id="j1"), msg_id=f"{tenant}.3")])
    return subject


@pytest.mark.parametrize("batches", [False, True], ids=["one-at-a-time", "batches"])
async def test_a_consumer_acknowledges_the_types_it_does_not_handle_unread(nc: Client, tenant: str, batches: bool) -> None:
    subject = await _write_without_body(nc, tenant)
    got: list[Recorded] = []
    both = asyncio.Event()

    def take(rs: Sequence[Recorded]) -> None:
        got.extend(rs)
        if len(got) == 2:
            both.set()

    async def one(r: Recorded) -> None:
        take([r])

    async def many(rs: Sequence[Recorded]) -> None:
        take(rs)

    durable = f"unwanted-{tenant}"
    acks = await _acks(nc, durable, subject)
    sub = await (consume_batches(nc.jetstream(), subject, durable, many, types={"ClusterStatusChanged"}) if batches else
                 consume_events(nc.jetstream(), subject, durable, one, types={"ClusterStatusChanged"}))
    try:
        await asyncio.wait_for(both.wait(), 10)
        await acks.until(3)
        info = await sub.consumer_info()
    finally:
        await sub.unsubscribe()
    assert [r.event.status for r in got] == ["pending", "active"]
    # The layout change was acked at its first delivery: three acks, nothing delivered again.
    assert acks.count == 3 and info.num_ack_pending == 0 and info.num_redelivered == 0


async def test_without_types_the_missing_body_is_fetched_and_fails(nc: Client, tenant: str) -> None:
    """What the tests above would see if the layout change were read: its body is gone."""
    subject = await _write_without_body(nc, tenant)
    seen: list[str] = []
    poisoned: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

    async def handler(r: Recorded) -> None:
        seen.append(r.type)

    async def on_poison(r: Recorded, err: BaseException) -> None:
        poisoned.set_result((r.type, str(err)))

    sub = await consume_events(nc.jetstream(), subject, f"wanted-{tenant}", handler, max_failures=1, on_poison=on_poison)
    try:
        kind, error = await asyncio.wait_for(poisoned, 10)
    finally:
        await sub.unsubscribe()
    assert kind == "ClusterLayoutChanged" and "missing" in error
    assert "ClusterLayoutChanged" not in seen


@pytest.mark.parametrize("batches", [False, True], ids=["one-at-a-time", "batches"])
async def test_the_types_it_does_not_handle_never_reach_nats_py(nc: Client, tenant: str, batches: bool) -> None:
    """Acked from the read loop by their header (`wire.screen`): nats-py makes no `Msg` of them
    (its subscription counts only what it delivered), and the consumer still acks every event."""
    subject = subjects.cluster_events(tenant, "c1")
    got: list[Recorded] = []
    both = asyncio.Event()

    async def many(rs: Sequence[Recorded]) -> None:
        got.extend(rs)
        if len(got) == 2:
            both.set()

    async def one(r: Recorded) -> None:
        await many([r])

    durable = f"screened-{tenant}"
    acks = await _acks(nc, durable, subject)
    sub = await (consume_batches(nc.jetstream(), subject, durable, many, types={"ClusterStatusChanged"}) if batches else
                 consume_events(nc.jetstream(), subject, durable, one, types={"ClusterStatusChanged"}))
    try:
        await _write_without_body(nc, tenant)  # after the subscription: every delivery meets the screen
        await asyncio.wait_for(both.wait(), 10)
        await acks.until(3)
        info = await sub.consumer_info()
    finally:
        await sub.unsubscribe()
    assert [r.event.status for r in got] == ["pending", "active"]
    assert sub._sub.delivered == 2
    assert acks.count == 3 and info.num_ack_pending == 0 and info.num_redelivered == 0
