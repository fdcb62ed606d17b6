"""Group commit of claims and outcomes (`muster.bus.grouped`) against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts.events import TaskClaimed
from muster.bus.eventstore import Append, EventStore
from muster.bus.grouped import GroupedAppends

pytestmark = pytest.mark.nats


def _claim(i: int) -> TaskClaimed:
    return TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}")


async def test_appends_made_while_one_is_on_its_way_go_together_each_stored_once(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    grouped = GroupedAppends(store)
    subjects = [f"muster.evt.{tenant}.task.j.t{i}" for i in range(40)]
    seqs = await asyncio.gather(*(grouped.append(s, Append(_claim(i), msg_id=f"{tenant}.{i}")) for i, s in enumerate(subjects)))
    assert len(set(seqs)) == 40 and seqs == sorted(seqs)  # each its own place, in the order asked
    assert grouped.events == 40 and grouped.sent < 40  # the first alone, the rest grouped
    for i, (s, seq) in enumerate(zip(subjects, seqs, strict=True)):
        [r] = await store.read(s)
        assert r.seq == seq and r.event == _claim(i)


async def test_a_group_with_an_append_stored_before_stores_the_rest_and_knows_the_repeat(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    first = f"muster.evt.{tenant}.task.j.t0"
    [before] = await store.append(first, [Append(_claim(0), msg_id=f"{tenant}.0")])
    entries = [(first, Append(_claim(0), msg_id=f"{tenant}.0"))]  # a retry: the worker died before its ack
    entries += [(f"muster.evt.{tenant}.task.j.t{i}", Append(_claim(i), msg_id=f"{tenant}.{i}")) for i in (1, 2)]
    seqs = await store.append_across(entries)
    assert seqs[0] == before and len(set(seqs)) == 3
    assert [r.seq for r in await store.read(first)] == [before]  # stored once
    for s, _ in entries[1:]:
        assert len(await store.read(s)) == 1


async def test_every_writer_of_a_refused_group_hears_of_it(nc: Client, tenant: str) -> None:
    store = EventStore(nc, stream="NOSUCHSTREAM", timeout=1.0)  # publishes to subjects no stream takes
    grouped = GroupedAppends(store)
    results = await asyncio.gather(
        *(grouped.append(f"nowhere.{tenant}.{i}", Append(_claim(i), msg_id=f"{tenant}.x{i}")) for i in range(5)),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results)


async def test_a_few_waiting_appends_go_alone_all_at_once_not_as_a_batch(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    grouped = GroupedAppends(store, smallest_batch=8)
    subjects = [f"muster.evt.{tenant}.task.j.s{i}" for i in range(4)]
    seqs = await asyncio.gather(*(grouped.append(s, Append(_claim(i), msg_id=f"{tenant}.s{i}")) for i, s in enumerate(subjects)))
    assert len(set(seqs)) == 4
    assert grouped.events == 4 and grouped.sent == 4  # the first alone, then three singles at once: no batch of 3
    for i, (s, seq) in enumerate(zip(subjects, seqs, strict=True)):
        [r] = await store.read(s)
        assert r.seq == seq and r.event == _claim(i)


async def test_submitted_appends_join_the_waiting_group_and_their_futures_get_the_sequences(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    grouped = GroupedAppends(store)
    subjects = [f"muster.evt.{tenant}.task.j.u{i}" for i in range(20)]
    first = asyncio.ensure_future(grouped.append(subjects[0], Append(_claim(0), msg_id=f"{tenant}.u0")))
    await asyncio.sleep(0)  # the first is on its way: what is submitted now waits for it
    futures = [grouped.submit(s, Append(_claim(i), msg_id=f"{tenant}.u{i}")) for i, s in enumerate(subjects[1:], start=1)]
    seqs = [await first, *await asyncio.gather(*futures)]
    assert len(set(seqs)) == 20 and seqs == sorted(seqs)
    assert grouped.events == 20 and grouped.sent == 2  # the first alone, the 19 submitted in one batch
    for i, (s, seq) in enumerate(zip(subjects, seqs, strict=True)):
        [r] = await store.read(s)
        assert r.seq == seq and r.event == _claim(i)
