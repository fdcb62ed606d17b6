"""Raw reads from the wire (`muster.bus.wire`) against a real nats-server: every message once,
in stream order, through a lost consumer too; the connection's other subscriptions untouched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from contracts.events import JobPaused, JobRequested
from muster.bus import ordered, wire
from muster.bus.bodies import INLINE_LIMIT, Offloaded
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore, Recorded, StoreError
from muster.bus.ordered import OrderedReader
from muster.bus.protocol import ack_sequences
from muster.bus.wire import raw_subscribe, raw_unsubscribe

pytestmark = pytest.mark.nats


@pytest_asyncio.fixture
async def stream(nc: Client) -> AsyncIterator[str]:
    name = f"WIRE{uuid.uuid4().hex[:8].upper()}"
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    try:
        yield name
    finally:
        await js.delete_stream(name)


async def _fill(nc: Client, stream: str, n: int, size: int = 100) -> None:
    js = nc.jetstream()
    for i in range(n):
        await js.publish_async(f"{stream.lower()}.{'a' if i % 3 else 'b'}", b"x" * size, headers={"N": str(i)})
    await js.publish_async_completed()


async def test_a_read_delivers_every_matching_message_once_in_order_from_a_start(nc: Client, stream: str) -> None:
    await _fill(nc, stream, 300)
    got: list[tuple[bytes, int, bytes]] = []
    reader = OrderedReader(nc, stream, [f"{stream.lower()}.b"], lambda s, q, d, h: got.append((s, q, h)), start_seq=50)
    assert await reader.run(10) == len(got)
    assert [q for _, q, _ in got] == [q for q in range(50, 301) if (q - 1) % 3 == 0]
    assert all(s == f"{stream.lower()}.b".encode() and f"N: {q - 1}\r\n".encode() in h for s, q, h in got)
    assert await OrderedReader(nc, stream, [f"{stream.lower()}.none"], lambda *a: None).run(5) == 0


async def test_a_consumer_lost_mid_read_is_recreated_from_the_next_message(nc: Client, stream: str) -> None:
    await _fill(nc, stream, 5000, size=1000)
    other = await connect(nc.connected_url.geturl() if nc.connected_url else None, name="killer")
    seqs: list[int] = []
    killing: list[asyncio.Task[None]] = []

    async def kill() -> None:  # what a restarted server or an expired consumer looks like
        js = other.jetstream()
        for info in await js.consumers_info(stream):
            await js.delete_consumer(stream, info.name)

    def on_message(subject: bytes, seq: int, data: bytes, headers: bytes) -> None:
        seqs.append(seq)
        if len(seqs) == 1:
            killing.append(asyncio.get_running_loop().create_task(kill()))

    reader = OrderedReader(nc, stream, [f"{stream.lower()}.>"], on_message, heartbeat_s=0.1)
    try:
        assert await reader.run(30) == 5000
    finally:
        await asyncio.gather(*killing)
        await other.close()
    assert reader.resets >= 1
    assert seqs == list(range(1, 5001))


async def test_a_message_that_needs_more_pauses_the_read_until_it_is_handled(nc: Client, stream: str) -> None:
    await _fill(nc, stream, 3000, size=1000)
    seqs: list[int] = []
    taken_while_paused: list[int] = []

    async def fetch_more(seq: int) -> None:  # what fetching an offloaded body looks like
        before = len(seqs)
        await asyncio.sleep(0.3)  # the server would have pushed thousands meanwhile
        taken_while_paused.append(len(seqs) - before)

    def on_message(subject: bytes, seq: int, data: bytes, headers: bytes) -> Awaitable[None] | None:
        seqs.append(seq)
        return fetch_more(seq) if seq in (10, 2999, 3000) else None

    reader = OrderedReader(nc, stream, [f"{stream.lower()}.>"], on_message)
    assert await reader.run(30) == 3000
    assert seqs == list(range(1, 3001))
    assert taken_while_paused == [0, 0, 0] and reader.pauses == 3


async def test_a_failing_callback_stops_the_read_and_its_error_is_raised(nc: Client, stream: str) -> None:
    await _fill(nc, stream, 50)
    seen: list[int] = []

    def on_message(subject: bytes, seq: int, data: bytes, headers: bytes) -> None:
        if seq == 10:
            raise ValueError("cannot fold this one")
        seen.append(seq)

    with pytest.raises(ValueError, match="cannot fold"):
        await OrderedReader(nc, stream, [f"{stream.lower()}.>"], on_message).run(10)
    assert seen == list(range(1, 10))


async def test_the_connections_other_subscriptions_are_untouched(nc: Client) -> None:
    raw_inbox, plain_inbox = nc.new_inbox(), nc.new_inbox()
    raw: list[tuple[bytes, bytes, bytes, bytes]] = []
    plain: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def on_plain(msg: Msg) -> None:
        plain.set_result(msg)

    sub = await raw_subscribe(nc, raw_inbox, lambda *frame: raw.append(frame))
    other = await nc.subscribe(plain_inbox, cb=on_plain)
    await nc.publish(raw_inbox, b"one", headers={"A": "1"})
    await nc.publish(plain_inbox, b"two", headers={"B": "2"})
    msg = await asyncio.wait_for(plain, 5)
    assert msg.data == b"two" and msg.headers == {"B": "2"}
    await wire.flush(nc)
    assert raw == [(raw_inbox.encode(), b"", b"one", b"NATS/1.0\r\nA: 1\r\n\r\n")]
    await raw_unsubscribe(nc, sub)
    await other.unsubscribe()


async def test_a_replay_whose_callback_fails_stops_with_the_reason(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    await store.append(f"muster.evt.{tenant}.job.x", [Append(JobPaused(job_id="j", by="me"), msg_id=f"{tenant}-x")])

    def refuse(r: object) -> None:
        raise RuntimeError("no")

    with pytest.raises(StoreError, match="stopped: no"):
        await store.replay(f"muster.evt.{tenant}.job.*", refuse)


async def test_replay_hands_over_an_offloaded_body_whole_and_everything_in_order(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    big = JobRequested(tenant=tenant, job_id="j", cluster_id="c", operation="create", request={"blob": "x" * (INLINE_LIMIT + 10)})
    subject = f"muster.evt.{tenant}.job.j"
    items = [Append(JobPaused(job_id="j", by="a"), msg_id=f"{tenant}-0"), Append(big, msg_id=f"{tenant}-1")]
    items += [Append(JobPaused(job_id="j", by=f"after{i}"), msg_id=f"{tenant}-{i + 2}") for i in range(20)]
    seqs = [s for item in items for s in await store.append(subject, [item])]
    got: list[Recorded] = []
    assert await store.replay(subject, got.append) == len(items)
    assert [r.seq for r in got] == seqs
    assert got[1].event == big and [r.event.by for r in got[2:]] == [f"after{i}" for i in range(20)]
    stubs: list[Recorded] = []
    assert await store.replay(subject, stubs.append, bodies=False) == len(items)  # where and when only: no body fetched
    assert [r.seq for r in stubs] == seqs and isinstance(stubs[1].event, Offloaded) and stubs[1].type == "JobRequested"


async def _fill_many_subjects(nc: Client, stream: str, n: int) -> None:
    js = nc.jetstream()
    for i in range(n):  # a job's story: its own subject, and a subject of each task under a wildcard
        subject = f"{stream.lower()}.job" if i % 4 == 0 else f"{stream.lower()}.task.t{i}"
        await js.publish_async(subject, b"x", headers={"N": str(i)})
    await js.publish_async_completed()


async def test_a_read_of_a_literal_and_wildcard_filters_merges_their_consumers_in_stream_order(
        nc: Client, stream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ordered, "LANE_HELD", 16)  # lanes ahead of the merge wait for it, many times
    await _fill_many_subjects(nc, stream, 600)
    base = stream.lower()
    filters = [f"{base}.job", f"{base}.task.>", f"{base}.task.t1"]  # the last is also on the wildcard's lane
    assert ordered.lanes_of(filters) == [[f"{base}.job", f"{base}.task.t1"], [f"{base}.task.>"]]
    got: list[int] = []
    assert await ordered.read_in_order(nc, stream, filters, lambda s, q, d, h: got.append(q), start_seq=7) == len(got)
    assert got == list(range(7, 601))  # once each, in order: t1 (seq 2) is before the start


async def test_a_merged_read_awaits_what_its_callback_returns_and_stops_on_its_error(nc: Client, stream: str) -> None:
    await _fill_many_subjects(nc, stream, 80)
    base = stream.lower()
    got: list[int] = []

    def slow(s: bytes, q: int, d: bytes, h: bytes) -> Awaitable[None] | None:
        got.append(q)
        return asyncio.sleep(0) if q % 10 == 0 else None

    assert await ordered.read_in_order(nc, stream, [f"{base}.job", f"{base}.task.*"], slow) == 80 and got == list(range(1, 81))

    def refuse(s: bytes, q: int, d: bytes, h: bytes) -> None:
        if q == 30:
            raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        await ordered.read_in_order(nc, stream, [f"{base}.job", f"{base}.task.*"], refuse)
    assert await ordered.read_in_order(nc, stream, [f"{base}.none", f"{base}.nothing.>"], refuse) == 0


def _replica_holding(monkeypatch: pytest.MonkeyPatch, last: int) -> None:
    """Every ordered consumer behaves as one on a follower that has applied the stream up to
    `last`: it says nothing more is pending once it has sent that far (the next delivery ends
    it, as a delivery with pending 0 would)."""
    original = OrderedReader._handler

    def handler(self: OrderedReader, wake: asyncio.Future[str]) -> Any:
        inner = original(self, wake)

        def on_raw(subject: bytes, reply: bytes, data: bytes, headers: bytes) -> str | None:
            if reply.startswith(b"$JS.ACK.") and not wake.done() and ack_sequences(reply)[0] > last:
                wake.set_result("done")
                return None
            return inner(subject, reply, data, headers)

        return on_raw

    monkeypatch.setattr(OrderedReader, "_handler", handler)


async def test_a_read_whose_replica_lags_is_finished_from_the_leader(nc: Client, stream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await _fill(nc, stream, 300)
    _replica_holding(monkeypatch, 200)
    wanted = [q for q in range(50, 301) if (q - 1) % 3 == 0]
    got: list[tuple[int, bytes]] = []
    reader = OrderedReader(nc, stream, [f"{stream.lower()}.b"], lambda s, q, d, h: got.append((q, h)), start_seq=50)
    assert await reader.run(10) == len(got) and got[-1][0] <= 200  # what such a consumer alone gives: a prefix
    got.clear()
    reader = OrderedReader(nc, stream, [f"{stream.lower()}.b"], lambda s, q, d, h: got.append((q, h)), start_seq=50,
                           leader_check=True)
    assert await reader.run(10) == len(wanted)
    assert [q for q, _ in got] == wanted and reader.from_leader == len([q for q in wanted if q > 200])
    assert all(f"N: {q - 1}\r\n".encode() in h for q, h in got)  # the leader's frames carry their headers as stored


async def test_a_merged_read_whose_replicas_lag_stays_in_order_and_whole(
        nc: Client, stream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await _fill_many_subjects(nc, stream, 600)
    _replica_holding(monkeypatch, 400)
    base = stream.lower()
    filters = [f"{base}.job", f"{base}.task.>", f"{base}.task.t1", f"{base}.task.t599"]  # a lane of three literals
    got: list[int] = []
    assert await ordered.read_in_order(nc, stream, filters, lambda s, q, d, h: got.append(q), start_seq=7,
                                       leader_check=True) == len(got)
    assert got == list(range(7, 601))


async def test_a_subscription_made_again_and_flushed_gets_the_next_publish_of_another_connection(nc: Client, nats_url: str) -> None:
    """`wire.flush` after a subscribe: the server has the subscription before the other
    connection publishes (nats-py's own flush did not promise it: a publish reached the
    subscription unsubscribed just before, in a few dozen rounds at load; tests/unit/bus/test_wire_flush.py)."""
    other = await connect(nats_url, name="test-other")
    subject = f"wire.{uuid.uuid4().hex[:8]}"
    try:
        for i in range(100):
            sub = await nc.subscribe(f"{subject}.>")
            await wire.flush(nc)
            await other.publish(f"{subject}.x", str(i).encode())
            assert (await sub.next_msg(timeout=10)).data == str(i).encode()
            await sub.unsubscribe()
    finally:
        await other.close()
