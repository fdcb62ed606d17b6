"""Batched consumption of the log (`muster.bus.consume.consume_batches`) against a real nats-server:
the events waiting when the handler is free go to it together, each acked once, and a failing
event is found, delivered again and taken, the others of its batch acked."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.events import TaskClaimed
from contracts.records import Recorded
from muster.bus.consume import _config, consume_batches
from muster.bus.eventstore import Append, EventStore
from muster.bus.wire import flush

pytestmark = pytest.mark.nats


def _claim(i: int) -> TaskClaimed:
    return TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}")


async def _write(nc: Client, tenant: str, n: int, start: int = 0) -> None:
    store = EventStore(nc)
    await store.writer.across([(f"muster.evt.{tenant}.task.j.t{i}.p", Append(_claim(i), msg_id=f"{tenant}.{i}"))
                               for i in range(start, start + n)])


class Acks:
    """The consumer's acks as they pass (a core subscription on its ack subjects) and as
    nats-server takes them (its sampled-ack advisories, every ack sampled): an ack is taken
    in the consumer's own loop, so a consumer info asked right after the ack passed may not
    count it yet (a CI run saw two of three acks pending)."""

    def __init__(self) -> None:
        self.count = 0
        self.taken = 0
        self.changed = asyncio.Event()

    async def on_ack(self, msg: Msg) -> None:
        if not msg.data:  # an ack (a nak says -NAK)
            self.count += 1
            self.changed.set()

    async def on_taken(self, msg: Msg) -> None:
        self.taken += 1
        self.changed.set()

    async def until(self, n: int) -> None:
        """Until `n` acks were sent and taken by the server."""
        while self.count < n or self.taken < n:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)


async def _acks(nc: Client, durable: str, filter_subject: str) -> Acks:
    """Watches the acks of `durable`, made here as `consume_events` makes it (nats-py's
    subscribe takes a durable that exists as it is), with every ack sampled."""
    acks = Acks()
    await nc.subscribe(f"$JS.ACK.{subjects.EVENTS_STREAM}.{durable}.>", cb=acks.on_ack)
    await nc.subscribe(f"$JS.EVENT.METRIC.CONSUMER.ACK.{subjects.EVENTS_STREAM}.{durable}", cb=acks.on_taken)
    await flush(nc)
    config = _config(durable, [filter_subject], 30.0, DeliverPolicy.ALL, None)
    await nc.jetstream().add_consumer(subjects.EVENTS_STREAM, dataclasses.replace(
        config, sample_freq="100%", deliver_subject=nc.new_inbox()))
    return acks


async def test_events_waiting_together_are_taken_together_and_settled_by_one_ack(nc: Client, tenant: str) -> None:
    durable = f"batch-{tenant}"
    calls: list[list[int]] = []
    all_taken = asyncio.Event()

    async def handler(batch: Sequence[Recorded]) -> None:
        calls.append([int(r.event.task_id[1:]) for r in batch])
        await asyncio.sleep(0.2)  # a slow save: what arrives meanwhile waits for the next call
        if sum(map(len, calls)) == 50:
            all_taken.set()

    await _write(nc, tenant, 50)
    acks = await _acks(nc, durable, f"muster.evt.{tenant}.task.>")
    sub = await consume_batches(nc.jetstream(), f"muster.evt.{tenant}.task.>", durable, handler)
    await asyncio.wait_for(all_taken.wait(), 10)
    await acks.until(50)
    info = await sub.consumer_info()
    await sub.unsubscribe()
    assert [n for call in calls for n in call] == list(range(50))  # each once, in order
    assert len(calls) < 50 and acks.count == 50  # fewer calls than events; every event acked once
    assert info.ack_floor is not None and info.delivered is not None
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == info.delivered.stream_seq


async def test_a_failing_event_is_found_and_delivered_again_the_others_acked(nc: Client, tenant: str) -> None:
    durable = f"batch-{tenant}"
    taken: list[int] = []
    failures = {3: 2}  # event 3 fails twice, then succeeds
    done = asyncio.Event()

    async def handler(batch: Sequence[Recorded]) -> None:
        numbers = [int(r.event.task_id[1:]) for r in batch]
        for n in numbers:
            if failures.get(n):
                failures[n] -= 1
                raise RuntimeError(f"event {n} failed")
        taken.extend(numbers)
        if 3 in taken:
            done.set()

    await _write(nc, tenant, 8)
    acks = await _acks(nc, durable, f"muster.evt.{tenant}.task.>")
    sub = await consume_batches(nc.jetstream(), f"muster.evt.{tenant}.task.>", durable, handler)
    await asyncio.wait_for(done.wait(), 20)
    await acks.until(8)
    info = await sub.consumer_info()
    await sub.unsubscribe()
    assert sorted(taken) == list(range(8))  # each taken once: the others of its batch were acked
    assert info.num_ack_pending == 0 and failures == {3: 0}  # delivered again until it was taken
