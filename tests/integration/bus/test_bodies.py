"""Large events and long appends against a real nats-server: every message stays small, every
reader gets the whole event back (docs/decisions/0003-large-bodies.md)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib

import pytest
from nats.aio.client import Client
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from contracts import subjects
from contracts.catalog import Action
from contracts.events import ClusterLayoutChanged, TaskQueued
from contracts.layout import NodeSpec
from muster.bus.bodies import BODIES_STREAM, CHUNK, H_BODY, INLINE_LIMIT, Bodies, BodyError, Offloaded
from muster.bus.bodymove import MOVED, old_bodies, referencing
from muster.bus.consume import consume_events
from muster.bus.eventstore import MAX_ATOMIC, Append, EventStore, Recorded, recorded_from_msg
from muster.bus.ordered import OrderedReader

pytestmark = pytest.mark.nats


def _layout(n: int) -> ClusterLayoutChanged:
    nodes = [NodeSpec(id=f"n{i}", hardwaretype="large", imagetype="ubuntu22", services=["base", "hdfs-datanode"],
                      hostname=f"big-{i}.local", nodenum=i, flavor="m5.large", image="ami-1", sshuser="ubuntu")
             for i in range(1000, 1000 + n)]
    return ClusterLayoutChanged(cluster_id="c1", job_id="j1", nodes=nodes)


async def test_a_10000_node_layout_is_one_small_message_and_reads_back_whole(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    subject = subjects.cluster_events(tenant, "c1")
    event = _layout(10_000)
    assert len(event.model_dump_json()) > 1_500_000  # more than the log should carry inline

    [seq] = await store.append(subject, [Append(event, msg_id=f"{tenant}:big")], expect_last_seq=0)

    raw = await nc.jetstream().get_msg(subjects.EVENTS_STREAM, seq)
    assert len(raw.data or b"") < 1024 and (raw.headers or {}).get(H_BODY, "").startswith("sha256:")
    # The body's chunks stay under 64 KB each.
    sizes = await _body_message_sizes(nc, tenant)
    assert len(sizes) > 1 and max(sizes) <= CHUNK < 64 * 1024
    [back] = await store.read(subject)
    assert back.event == event

    folded: list[Recorded] = []
    assert await store.replay(subject, folded.append) == 1
    assert folded[0].event == event


async def _body_message_sizes(nc: Client, tenant: str) -> list[int]:
    js, seq = nc.jetstream(), 1
    sizes: list[int] = []
    while True:
        try:
            msg = await js.get_msg(BODIES_STREAM, seq=seq, subject=f"muster.body.{tenant}.>", next=True)
        except NotFoundError:
            return sizes
        sizes.append(len(msg.data or b""))
        seq = (msg.seq or seq) + 1


async def test_consumers_and_live_readers_get_the_whole_event(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    subject = subjects.cluster_events(tenant, "c2")
    event = _layout(2_000)
    got: asyncio.Queue[Recorded] = asyncio.Queue()

    async def handler(r: Recorded) -> None:
        await got.put(r)

    sub = await consume_events(nc.jetstream(), subject, f"bodies-{tenant}", handler)
    raw: asyncio.Queue[object] = asyncio.Queue()
    live = await nc.jetstream().subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=raw.put)
    try:
        await store.append(subject, [Append(event, msg_id=f"{tenant}:c2")])
        consumed = await asyncio.wait_for(got.get(), 10)
        assert consumed.event == event
        stubbed = recorded_from_msg(await asyncio.wait_for(raw.get(), 10))  # type: ignore[arg-type]
        assert isinstance(stubbed.event, Offloaded) and stubbed.type == "ClusterLayoutChanged"
    finally:
        await sub.unsubscribe()
        await live.unsubscribe()


async def test_small_events_stay_inline(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    subject = subjects.cluster_events(tenant, "c3")
    event = _layout(3)
    assert len(event.model_dump_json()) < INLINE_LIMIT
    [seq] = await store.append(subject, [Append(event, msg_id=f"{tenant}:c3")])
    raw = await nc.jetstream().get_msg(subjects.EVENTS_STREAM, seq)
    assert H_BODY not in (raw.headers or {}) and ClusterLayoutChanged.model_validate_json(raw.data or b"") == event


async def test_a_body_is_stored_once_by_its_events_subject_and_checked_on_read(nc: Client, tenant: str) -> None:
    bodies = Bodies(nc.jetstream(), wait=0.3)
    subject = subjects.cluster_events(tenant, "c4")
    data = b"x" * (3 * CHUNK) + bytes(range(256)) * 2000  # compressible and not
    ref, parts = await bodies.put(subject, data)
    before = (await nc.jetstream().stream_info(BODIES_STREAM)).state.messages
    assert await Bodies(nc.jetstream()).put(subject, data) == (ref, parts)  # another process: found, not stored again
    assert (await nc.jetstream().stream_info(BODIES_STREAM)).state.messages == before
    # Each part on its own subject, under the event's (decision 0057): whoever may read the
    # event's subject may read its body, by the direct get naming the part's subject.
    digest = ref.split(":")[1]
    for i in range(parts):
        part = await nc.jetstream().get_last_msg(BODIES_STREAM, f"muster.body.{tenant}.cluster.c4.{digest}.{i}", direct=True)
        assert (part.headers or {})["Muster-Part"] == f"{i}/{parts}"
    assert await bodies.get(subject, Offloaded("ClusterLayoutChanged", ref, len(data), parts)) == data
    with pytest.raises(BodyError, match="missing"):
        await bodies.get(subject, Offloaded("ClusterLayoutChanged", "sha256:" + "0" * 64, 1, 1))
    with pytest.raises(BodyError, match="missing"):  # bodies are per event subject
        await bodies.get(subjects.cluster_events(tenant, "c5"), Offloaded("ClusterLayoutChanged", ref, len(data), parts))
    with pytest.raises(BodyError, match="missing"):
        await bodies.get(subjects.cluster_events("other-tenant", "c4"), Offloaded("ClusterLayoutChanged", ref, len(data), parts))


async def test_a_body_stored_in_the_layout_before_0057_is_read_as_it_was(nc: Client, tenant: str) -> None:
    """A stub with no `parts`: its body's parts are on `muster.body.<tenant>.<hex>`, in order."""
    data = bytes(range(256)) * 600
    digest = hashlib.sha256(data).hexdigest()
    packed = zlib.compress(data)
    chunks = [packed[i : i + CHUNK] for i in range(0, len(packed), CHUNK)]
    for i, chunk in enumerate(chunks):
        await nc.jetstream().publish(f"muster.body.{tenant}.{digest}", chunk, headers={"Muster-Part": f"{i}/{len(chunks)}"})
    old = Offloaded("ClusterLayoutChanged", f"sha256:{digest}", len(data))
    assert await Bodies(nc.jetstream()).get(subjects.cluster_events(tenant, "c6"), old) == data


async def test_the_move_of_old_bodies_reads_only_what_can_hold_one(nc: Client, tenant: str) -> None:
    """`bodymove`: the old bodies are listed by tenant (not this version's parts, nor the mark),
    and only their tenants' events are read, headers only, an event kept when it names one."""
    data = bytes(range(256)) * 600
    digest = hashlib.sha256(data).hexdigest()
    js = nc.jetstream()
    await js.publish(f"muster.body.{tenant}.{digest}", zlib.compress(data), headers={"Muster-Part": "0/1"})
    await js.publish(MOVED, b"0")
    old_event = subjects.cluster_events(tenant, "c-old")
    stub = {"type": "ClusterLayoutChanged", "v": 1, "body": {"ref": f"sha256:{digest}", "size": len(data),
                                                              "encoding": "zlib", "stream": BODIES_STREAM}}
    await EventStore(nc).append(subjects.cluster_events(tenant, "c-new"), [Append(_layout(300), msg_id=f"{tenant}:n")])
    seq = (await js.publish(old_event, json.dumps(stub).encode(), headers={H_BODY: f"sha256:{digest}"})).seq
    old = await old_bodies(nc)
    assert old[tenant] == {digest} and "_moved" not in old
    assert await referencing(nc, {tenant: {digest}}, since=0) == [(old_event, f"sha256:{digest}")]
    assert await referencing(nc, {tenant: {digest}}, since=seq) == []  # (from the mark on)
    assert await referencing(nc, {"other-tenant": {digest}}, since=0) == []

    seen: list[tuple[bytes, bytes]] = []
    await OrderedReader(nc, subjects.EVENTS_STREAM, [old_event], lambda s, q, d, h: seen.append((d, h)), headers_only=True).run()
    [(payload, headers)] = seen
    assert payload == b"" and b"Nats-Msg-Size" in headers and H_BODY.encode() in headers


async def test_an_append_longer_than_one_atomic_batch_lands_whole_and_fenced(nc: Client, tenant: str) -> None:
    """The server takes 1000 messages per atomic batch: the first wave of a 2,500-node create
    is longer than that."""
    store = EventStore(nc)
    subject = subjects.job_events(tenant, "j-long")
    n = MAX_ATOMIC * 2 + 500
    items = [Append(TaskQueued(job_id="j", task_id=f"n{i}.create", attempt=1, node=f"n{i}", action=Action.CREATE),
                    msg_id=f"{tenant}:long:{i}") for i in range(n)]
    seqs = await store.append(subject, items, expect_last_seq=0)
    assert len(seqs) == n and seqs == list(range(seqs[0], seqs[0] + n))
    assert [r.event.task_id for r in await store.read(subject)] == [f"n{i}.create" for i in range(n)]
