"""The connection's one publisher (`muster.bus.wire.Publisher`) against a real nats-server:
answers to their own publishes, order kept behind nats-py's own commands, refusals and silences
told, and deliveries settled."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout

from contracts.events import TaskClaimed
from muster.bus.eventstore import Append, EventStore
from muster.bus.protocol import frame
from muster.bus.wire import Publisher, Refused
from muster.ports.delivery import ACK

pytestmark = pytest.mark.nats


def _claim(i: int, tenant: str) -> Append:
    return Append(TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}"), msg_id=f"{tenant}.c{i}")


async def test_one_publisher_per_connection_and_each_publish_gets_its_own_answer(nc: Client, tenant: str) -> None:
    publisher = Publisher.of(nc)
    assert Publisher.of(nc) is publisher
    await publisher.start()
    subjects = [f"muster.evt.{tenant}.task.j.t{i}" for i in range(20)]
    answers = [publisher.future(s, b"{}", {"Nats-Msg-Id": f"{tenant}.{i}"}, 5.0) for i, s in enumerate(subjects)]
    got = await asyncio.wait_for(asyncio.gather(*answers), 10)
    store = EventStore(nc)
    for s, answer in zip(subjects, got, strict=True):
        assert f'"seq":{await store.last_seq(s)}'.encode() in answer
    assert publisher.waiting == 0


async def test_what_nats_py_queued_before_goes_first(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    publisher = Publisher.of(nc)
    await publisher.start()
    await nc.publish(f"muster.evt.{tenant}.task.j.q", b"{}", headers={"Nats-Msg-Id": f"{tenant}.q"})  # queued, not sent yet
    answer = await asyncio.wait_for(publisher.future(f"muster.evt.{tenant}.task.j.n", b"{}", {"Nats-Msg-Id": f"{tenant}.n"},
                                                     5.0, now=True), 5)
    assert await store.last_seq(f"muster.evt.{tenant}.task.j.q") < json.loads(answer)["seq"]


async def test_a_publish_no_stream_takes_is_refused_and_one_nobody_answers_times_out(nc: Client, tenant: str) -> None:
    publisher = Publisher.of(nc)
    await publisher.start()
    with pytest.raises(Refused, match="503"):
        await asyncio.wait_for(publisher.future(f"nowhere.{tenant}.x", b"{}", None, 5.0, now=True), 5)
    silent = await nc.subscribe(f"silent.{tenant}")  # a responder that never answers
    try:
        slow = publisher.future(f"silent.{tenant}", b"{}", None, 2.0, now=True)
        quick = publisher.future(f"silent.{tenant}", b"{}", None, 0.2, now=True)  # a shorter timeout, asked later
        with pytest.raises(NatsTimeout):
            await asyncio.wait_for(quick, 1.5)  # not only when the first one's time is up
        assert not slow.done()
        with pytest.raises(NatsTimeout):
            await asyncio.wait_for(slow, 10)
        assert publisher.waiting == 0
    finally:
        await silent.unsubscribe()


async def test_a_submit_is_stored_once_and_its_future_has_the_sequence(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    await store.writer.publisher.start()
    subject = f"muster.evt.{tenant}.task.j.t1"
    seq = await asyncio.wait_for(store.submit(subject, _claim(1, tenant)), 5)
    [r] = await store.read(subject)
    assert r.seq == seq and r.event == _claim(1, tenant).event
    assert await asyncio.wait_for(store.submit(subject, _claim(1, tenant)), 5) == seq  # a retry: known by its key
    assert len(await store.read(subject)) == 1


async def test_settled_deliveries_are_all_taken_by_the_server(nc: Client, tenant: str) -> None:
    js = nc.jetstream()
    stream = f"ACKS{tenant.upper()}"
    await js.add_stream(name=stream, subjects=[f"acks.{tenant}.>"], retention="workqueue")
    await js.add_consumer(stream, durable_name="c", ack_policy="explicit", ack_wait=30)
    for i in range(10):
        await js.publish(f"acks.{tenant}.{i}", b"x")
    psub = await js.pull_subscribe_bind("c", stream=stream)
    msgs = await psub.fetch(10, timeout=5)
    publisher = Publisher.of(nc)
    assert all(publisher.settle(m.reply, ACK) for m in msgs[:9])
    await asyncio.sleep(0)  # one turn of the loop: written, with no publish after them to take them along
    assert nc._pending_data_size == 0
    # The server answers this one once it took it, and it takes a consumer's acks in order.
    await msgs[9].ack_sync(timeout=5)
    info = await js.consumer_info(stream, "c")
    assert info.num_ack_pending == 0 and info.num_redelivered == 0
    assert (await js.stream_info(stream)).state.messages == 0  # a work queue drops what was acked
    await js.delete_stream(stream)


async def test_a_message_between_two_links_sends_the_rest_one_by_one(nc: Client, tenant: str, monkeypatch: Any) -> None:
    """Another writer's message lands between two links (here written on the same connection
    right after the first link, so the server surely takes it there): the second link is
    refused by its `Nats-Expected-Last-Msg-Id`, then appended alone on the first's sequence."""
    store = EventStore(nc)
    a, other = f"muster.evt.{tenant}.job.a", f"muster.evt.{tenant}.job.other"
    publisher = Publisher.of(nc)
    await publisher.start()
    enqueue = publisher._enqueue
    sent: list[bytes] = []

    def interleaved(command: bytes) -> None:
        enqueue(command)
        sent.append(command)
        if len(sent) == 1:  # right after the first link
            enqueue(frame(other, "", {"Nats-Msg-Id": f"{tenant}.between"}, b"{}"))

    monkeypatch.setattr(publisher, "_enqueue", interleaved)
    [seqs] = await store.append_chain([(a, [_claim(1, tenant), _claim(2, tenant), _claim(3, tenant)], 0)])
    monkeypatch.undo()
    assert [r.event.task_id for r in await store.read(a)] == ["t1", "t2", "t3"]
    assert seqs[1] == seqs[0] + 2 and seqs[2] == seqs[1] + 1  # the other message took seqs[0] + 1
    assert len(sent) == 5  # the chain's three links, then the two refused ones again, one by one
