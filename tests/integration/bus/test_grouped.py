"""Group commit of claims and outcomes (`EventStore.submit`, `muster.bus.appends`) against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts.events import TaskClaimed, TaskSucceeded
from muster.bus.eventstore import Append, EventStore
from muster.ports.eventlog import ConcurrencyError

pytestmark = pytest.mark.nats


def _claim(i: int) -> TaskClaimed:
    return TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}")


async def _grouped(nc: Client) -> EventStore:
    store = EventStore(nc)  # group commit is on by default
    await store.writer.publisher.start()
    return store


async def test_appends_made_while_one_is_on_its_way_go_together_each_stored_once(nc: Client, tenant: str) -> None:
    store = await _grouped(nc)
    subjects = [f"muster.evt.{tenant}.task.j.t{i}" for i in range(40)]
    first = store.submit(subjects[0], Append(_claim(0), msg_id=f"{tenant}.0"), now=True)  # idle: alone, at once
    rest = [store.submit(s, Append(_claim(i), msg_id=f"{tenant}.{i}")) for i, s in enumerate(subjects) if i]
    seqs = await asyncio.gather(first, *rest)
    assert len(set(seqs)) == 40 and seqs == sorted(seqs)  # each its own place, in the order asked
    assert store.writer.events == 40 and store.writer.sent == 2  # the first alone, the rest in one batch
    # Submitted in one turn of the loop with nothing on its way: all in one batch.
    more = [f"muster.evt.{tenant}.task.j.m{i}" for i in range(20)]
    await asyncio.gather(*(store.submit(s, Append(_claim(i), msg_id=f"{tenant}.m{i}")) for i, s in enumerate(more)))
    assert store.writer.events == 60 and store.writer.sent == 3
    for i, (s, seq) in enumerate(zip(subjects, seqs, strict=True)):
        [r] = await store.read(s)
        assert r.seq == seq and r.event == _claim(i)


async def test_a_group_with_an_append_stored_before_stores_the_rest_and_knows_the_repeat(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    first = f"muster.evt.{tenant}.task.j.t0"
    [before] = await store.append(first, [Append(_claim(0), msg_id=f"{tenant}.0")])
    entries = [(first, Append(_claim(0), msg_id=f"{tenant}.0"))]  # a retry: the worker died before its ack
    entries += [(f"muster.evt.{tenant}.task.j.t{i}", Append(_claim(i), msg_id=f"{tenant}.{i}")) for i in (1, 2)]
    seqs = await store.writer.across(entries)
    assert seqs[0] == before and len(set(seqs)) == 3
    assert [r.seq for r in await store.read(first)] == [before]  # stored once
    for s, _ in entries[1:]:
        assert len(await store.read(s)) == 1


async def test_every_writer_of_a_refused_group_hears_of_it(nc: Client, tenant: str) -> None:
    store = await _grouped(nc)
    results = await asyncio.gather(
        *(store.submit(f"nowhere.{tenant}.{i}", Append(_claim(i), msg_id=f"{tenant}.x{i}")) for i in range(12)),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results)


async def test_a_few_waiting_appends_go_alone_all_at_once_not_as_a_batch(nc: Client, tenant: str) -> None:
    store = await _grouped(nc)
    subjects = [f"muster.evt.{tenant}.task.j.s{i}" for i in range(4)]
    seqs = await asyncio.gather(*(store.submit(s, Append(_claim(i), msg_id=f"{tenant}.s{i}")) for i, s in enumerate(subjects)))
    assert len(set(seqs)) == 4
    assert store.writer.events == 4 and store.writer.sent == 4  # four singles at once: no batch of 4
    for i, (s, seq) in enumerate(zip(subjects, seqs, strict=True)):
        [r] = await store.read(s)
        assert r.seq == seq and r.event == _claim(i)


async def test_without_group_commit_every_submit_goes_alone_at_once(nc: Client, tenant: str) -> None:
    store = EventStore(nc, group_commit=False)
    await store.writer.publisher.start()
    subjects = [f"muster.evt.{tenant}.task.j.a{i}" for i in range(10)]
    seqs = await asyncio.gather(*(store.submit(s, Append(_claim(i), msg_id=f"{tenant}.a{i}")) for i, s in enumerate(subjects)))
    assert len(set(seqs)) == 10 and store.writer.sent == 10


async def test_a_claim_whose_fence_is_closed_is_refused_alone_and_its_group_lands(nc: Client, tenant: str) -> None:
    """docs/decisions/0046: a claim goes only while its job's cancel fence is empty, at once or
    in a group; the server refuses a closed one, and the rest of its group is stored all the same."""
    store = await _grouped(nc)

    async def unreadable(subject: str) -> None:  # a provisioner may not read the log (docs/security.md)
        raise AssertionError(f"asked for the last message of {subject}")

    store.writer.last = unreadable
    closed, still_open = f"muster.evt.{tenant}.job.j.claims.0", f"muster.evt.{tenant}.job.k.claims.0"
    await store.append(closed, [Append(_claim(99), msg_id=f"{tenant}.fence")])  # (any event closes it)
    alone = store.submit(f"muster.evt.{tenant}.task.j.a", Append(_claim(0), msg_id=f"{tenant}.a", only_if_empty=closed),
                         now=True)
    with pytest.raises(ConcurrencyError):
        await alone
    group = [store.submit(f"muster.evt.{tenant}.task.j.g{i}", Append(_claim(i), msg_id=f"{tenant}.g{i}",
                                                                     only_if_empty=closed if i == 3 else still_open))
             for i in range(12)]
    results = await asyncio.gather(*group, return_exceptions=True)
    assert isinstance(results[3], ConcurrencyError), results[3]
    assert all(isinstance(r, int) for i, r in enumerate(results) if i != 3)
    few = [store.submit(f"muster.evt.{tenant}.task.j.f{i}", Append(_claim(i), msg_id=f"{tenant}.f{i}", only_if_empty=closed))
           for i in range(2)]  # (fewer than a batch: each alone)
    assert [type(r) for r in await asyncio.gather(*few, return_exceptions=True)] == [ConcurrencyError] * 2
    assert await store.read(f"muster.evt.{tenant}.task.j.g3") == []
    assert len(await store.read(f"muster.evt.{tenant}.task.j.g4")) == 1


async def test_claims_on_one_fence_go_as_one_batch_however_few(nc: Client, tenant: str) -> None:
    """docs/decisions/0050: claims on one fence sent side by side refuse each other on a
    replicated stream (only one write expecting a subject may be in flight), so a writer sends
    those waiting on a fence as one atomic batch, the first one too, and the next batch only
    after it; claims on another fence go apart."""
    store = await _grouped(nc)
    fence, other = f"muster.evt.{tenant}.job.j.claims.0", f"muster.evt.{tenant}.job.k.claims.0"
    claims = [store.submit(f"muster.evt.{tenant}.task.j.c{i}", Append(_claim(i), msg_id=f"{tenant}.c{i}", only_if_empty=fence),
                           now=True) for i in range(4)]
    claims.append(store.submit(f"muster.evt.{tenant}.task.k.c9", Append(_claim(9), msg_id=f"{tenant}.c9", only_if_empty=other),
                               now=True))
    seqs = await asyncio.gather(*claims)
    assert len(set(seqs)) == 5 and seqs[:4] == list(range(seqs[0], seqs[0] + 4))  # one batch: consecutive
    assert store.writer.events == 5 and store.writer.sent == 2  # a batch for j's fence, a single for k's


async def test_a_segment_steps_outcome_refused_with_its_next_claim_by_a_closed_fence_is_stored_alone(
        nc: Client, tenant: str) -> None:
    """docs/decisions/0058: a segment step's outcome goes in its fence's lane beside the next
    step's claim, one batch; a cancel's fence refuses the batch whole, and the outcome, which
    expects nothing, is then stored alone (the planner must hear of a step that ran)."""
    store = await _grouped(nc)
    closed = f"muster.evt.{tenant}.job.j.claims.0"
    await store.append(closed, [Append(_claim(99), msg_id=f"{tenant}.fence")])
    done = TaskSucceeded(job_id="j", task_id="n1.create", attempt=1, provisioner="p", worker="p/w0")
    outcome = store.submit(f"muster.evt.{tenant}.task.j.n1~create.p", Append(done, msg_id=f"{tenant}.o", lane=closed))
    claim = store.submit(f"muster.evt.{tenant}.task.j.n1~confirm.p", Append(_claim(1), msg_id=f"{tenant}.c", only_if_empty=closed))
    stored, refused = await asyncio.gather(outcome, claim, return_exceptions=True)
    assert isinstance(refused, ConcurrencyError) and isinstance(stored, int)
    assert [r.type for r in await store.read(f"muster.evt.{tenant}.task.j.n1~create.p")] == ["TaskSucceeded"]
    assert await store.read(f"muster.evt.{tenant}.task.j.n1~confirm.p") == []
    assert store.writer.sent == 1  # (the two went as one batch, refused whole, before the outcome went alone)
