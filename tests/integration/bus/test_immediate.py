"""Appends put on the wire from synchronous code (`muster.bus.immediate`), and the grouped
writer's `append_now`, against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts.events import TaskClaimed
from muster.bus.eventstore import Append, EventStore, StoreError
from muster.bus.grouped import GroupedAppends
from muster.bus.immediate import Acks, ImmediateAppends

pytestmark = pytest.mark.nats


def _claim(i: int) -> TaskClaimed:
    return TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}")


async def test_an_immediate_append_is_stored_once_and_its_future_has_the_sequence(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    now = ImmediateAppends(store)
    subject = f"muster.evt.{tenant}.task.j.t1"
    assert now.send(subject, Append(_claim(1), msg_id=f"{tenant}.1")) is None  # no inbox yet
    await now.start()
    try:
        sent = now.send(subject, Append(_claim(1), msg_id=f"{tenant}.1"))
        assert sent is not None
        seq = await asyncio.wait_for(sent, 5)
        [r] = await store.read(subject)
        assert r.seq == seq and r.event == _claim(1) and r.subject == subject
        again = now.send(subject, Append(_claim(1), msg_id=f"{tenant}.1"))  # a retry: known by its key
        assert again is not None and await asyncio.wait_for(again, 5) == seq
        assert len(await store.read(subject)) == 1
    finally:
        await now.stop()


async def test_what_nats_py_queued_before_goes_first(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    now = ImmediateAppends(store)
    await now.start()
    try:
        queued = Append(_claim(1), msg_id=f"{tenant}.q")
        data, headers = await store._encode(f"muster.evt.{tenant}.task.j.q", queued)
        await nc.publish(f"muster.evt.{tenant}.task.j.q", data, headers=headers)  # in nats-py's buffer, not sent yet
        sent = now.send(f"muster.evt.{tenant}.task.j.n", Append(_claim(2), msg_id=f"{tenant}.n"))
        assert sent is not None
        seq = await asyncio.wait_for(sent, 5)
        [first] = await store.read(f"muster.evt.{tenant}.task.j.q")
        assert first.seq < seq
    finally:
        await now.stop()


async def test_an_immediate_append_nobody_stores_fails(nc: Client, tenant: str) -> None:
    now = ImmediateAppends(EventStore(nc, timeout=2.0))
    await now.start()
    try:
        sent = now.send(f"nowhere.{tenant}.x", Append(_claim(1), msg_id=f"{tenant}.x"))
        assert sent is not None
        with pytest.raises(StoreError):
            await asyncio.wait_for(sent, 5)
    finally:
        await now.stop()


async def test_append_now_only_when_idle_and_the_appends_after_it_wait_their_turn(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    grouped = GroupedAppends(store, smallest_batch=2)
    await grouped.immediate.start()
    try:
        first = grouped.append_now(f"muster.evt.{tenant}.task.j.t0", Append(_claim(0), msg_id=f"{tenant}.0"))
        assert first is not None
        # On its way: another goes through `append`, after it, never an immediate one beside it.
        assert grouped.append_now(f"muster.evt.{tenant}.task.j.t9", Append(_claim(9), msg_id=f"{tenant}.9")) is None
        rest = [asyncio.ensure_future(grouped.append(f"muster.evt.{tenant}.task.j.t{i}", Append(_claim(i), msg_id=f"{tenant}.{i}")))
                for i in (1, 2, 3)]
        await asyncio.sleep(0)  # each has asked, while the first is on its way
        seqs = [await asyncio.wait_for(first, 5), *await asyncio.wait_for(asyncio.gather(*rest), 10)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 4
        assert grouped.events == 4 and grouped.sent == 2  # the immediate one, then the rest together
        # Idle again: immediate again.
        later = grouped.append_now(f"muster.evt.{tenant}.task.j.t4", Append(_claim(4), msg_id=f"{tenant}.4"))
        assert later is not None and await asyncio.wait_for(later, 5) > seqs[-1]
    finally:
        await grouped.immediate.stop()


async def test_acks_queued_together_are_all_taken_by_the_server(nc: Client, tenant: str) -> None:
    js = nc.jetstream()
    stream = f"ACKS{tenant.upper()}"
    await js.add_stream(name=stream, subjects=[f"acks.{tenant}.>"], retention="workqueue")
    await js.add_consumer(stream, durable_name="c", ack_policy="explicit", ack_wait=30)
    for i in range(10):
        await js.publish(f"acks.{tenant}.{i}", b"x")
    psub = await js.pull_subscribe_bind("c", stream=stream)
    msgs = await psub.fetch(10, timeout=5)
    acks = Acks(EventStore(nc))
    assert all(acks.ack(m.reply) for m in msgs[:9])
    await asyncio.sleep(0)  # one turn of the loop: written, with no publish after them to take them along
    assert nc._pending_data_size == 0
    # The server answers this one once it took it, and it takes a consumer's acks in order.
    await msgs[9].ack_sync(timeout=5)
    info = await js.consumer_info(stream, "c")
    assert info.num_ack_pending == 0 and info.num_redelivered == 0
    assert (await js.stream_info(stream)).state.messages == 0  # a work queue drops what was acked
    await js.delete_stream(stream)
