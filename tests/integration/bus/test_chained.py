"""Chained appends (`muster.bus.chained`) against a real nats-server: what lands, in what order,
when nothing else is written, when a fence refuses, and when another message comes between."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client

from contracts.events import TaskClaimed
from muster.bus import chained
from muster.bus.eventstore import Append, ConcurrencyError, EventStore
from muster.bus.immediate import frame

pytestmark = pytest.mark.nats


def _ev(i: int, tenant: str) -> Append:
    return Append(TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}"), msg_id=f"{tenant}.c{i}")


async def test_a_chain_lands_in_order_fenced_per_subject(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    a, b = f"muster.evt.{tenant}.cluster.a", f"muster.evt.{tenant}.job.b"
    [first] = await store.append(b, [_ev(0, tenant)])
    [sa, sb] = await store.append_chain([(a, [_ev(1, tenant)], 0), (b, [_ev(2, tenant), _ev(3, tenant)], first)])
    assert sb[0] == sa[0] + 1 and sb[1] == sb[0] + 1  # one after the other, nothing between
    assert [r.event.task_id for r in await store.read(b)] == ["t0", "t2", "t3"]
    assert [r.seq for r in await store.read(a)] == sa


async def test_a_stale_first_fence_stores_nothing(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    a = f"muster.evt.{tenant}.job.a"
    await store.append(a, [_ev(0, tenant)])
    with pytest.raises(ConcurrencyError):
        await store.append_chain([(a, [_ev(1, tenant), _ev(2, tenant)], 0)])  # it is not empty
    assert [r.event.task_id for r in await store.read(a)] == ["t0"]


async def test_a_refusal_in_the_middle_leaves_the_prefix_and_nothing_after(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    a, b, c = (f"muster.evt.{tenant}.job.{x}" for x in "abc")
    await store.append(b, [_ev(0, tenant)])
    with pytest.raises(ConcurrencyError):
        await store.append_chain([(a, [_ev(1, tenant)], 0), (b, [_ev(2, tenant)], 0), (c, [_ev(3, tenant)], None)])
    assert [r.event.task_id for r in await store.read(f"muster.evt.{tenant}.job.*")] == ["t0", "t1"]


async def test_a_message_between_two_links_sends_the_rest_one_by_one(nc: Client, tenant: str, monkeypatch: Any) -> None:
    """Another writer's message lands between two links (here sent on the same connection
    right after the first link, so the server surely takes it there): the second link is
    refused by its `Nats-Expected-Last-Msg-Id`, then appended alone on the first's sequence."""
    store = EventStore(nc)
    a, other = f"muster.evt.{tenant}.job.a", f"muster.evt.{tenant}.job.other"
    write_now = chained._write_now
    sent: list[int] = []

    def interleaved(conn: Client, commands: list[bytes]) -> bool:
        sent.append(len(commands))
        between = frame(other, "", {"Nats-Msg-Id": f"{tenant}.between"}, b"{}")
        return write_now(conn, [commands[0], between, *commands[1:]])  # right after the first link

    monkeypatch.setattr(chained, "_write_now", interleaved)
    [seqs] = await store.append_chain([(a, [_ev(1, tenant), _ev(2, tenant), _ev(3, tenant)], 0)])
    monkeypatch.undo()
    assert [r.event.task_id for r in await store.read(a)] == ["t1", "t2", "t3"]
    assert seqs[1] == seqs[0] + 2 and seqs[2] == seqs[1] + 1  # the other message took seqs[0] + 1
    assert sent == [3]  # the refused links went again one by one, not as a chain


async def test_a_repeated_chain_is_stored_once(nc: Client, tenant: str) -> None:
    """A chain sent again after a lost ack: stored once. A single event is known as the repeat
    it is; a longer chain is refused as stale, and its writer reloads as after any refusal."""
    store = EventStore(nc)
    a, b = f"muster.evt.{tenant}.job.a", f"muster.evt.{tenant}.job.b"
    [one] = await store.append_chain([(a, [_ev(1, tenant)], 0)])
    assert await store.append_chain([(a, [_ev(1, tenant)], 0)]) == [one]
    await store.append_chain([(b, [_ev(2, tenant), _ev(3, tenant)], 0)])
    with pytest.raises(ConcurrencyError):
        await store.append_chain([(b, [_ev(2, tenant), _ev(3, tenant)], 0)])
    assert len(await store.read(a)) == 1 and len(await store.read(b)) == 2


async def test_chains_sent_at_once_on_one_connection_each_get_their_own_answers(nc: Client, tenant: str) -> None:
    """Every chain of a connection shares one reply subscription: ten at once, from before it
    exists, each gets the sequences of its own events."""
    store = EventStore(nc)
    subjects = [f"muster.evt.{tenant}.job.s{i}" for i in range(10)]
    got = await asyncio.gather(*(store.append_chain([(s, [_ev(2 * i, tenant), _ev(2 * i + 1, tenant)], 0)])
                                 for i, s in enumerate(subjects)))
    for s, [seqs] in zip(subjects, got, strict=True):
        assert [r.seq for r in await store.read(s)] == seqs
