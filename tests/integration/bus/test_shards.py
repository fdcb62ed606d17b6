"""Shard leases on a real nats-server (muster/bus/shards.py): fair share, hand-over at once on
a graceful stop, takeover once a dead member's leases have expired, never two owners."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.errors import APIError

from muster.bus.connect import connect
from muster.bus.shards import SAFETY, ShardLeases, fair_share, shard_of
from tests.integration.lease_history import LAPSED, RELEASED, lease_history

pytestmark = [pytest.mark.nats, pytest.mark.timeout(60)]
SHARDS = 12
TTL = 3.0


class Ledger:
    """Who gained and lost what, when; wakes whoever waits for a condition."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str, frozenset[int]]] = []
        self.changed = asyncio.Condition()

    def callbacks(self, member: str) -> dict[str, Any]:
        async def gained(shards: set[int]) -> None:
            await self._note(member, "gained", shards)

        async def lost(shards: set[int]) -> None:
            await self._note(member, "lost", shards)

        return {"on_gained": gained, "on_lost": lost}

    async def _note(self, member: str, what: str, shards: set[int]) -> None:
        async with self.changed:
            self.events.append((time.monotonic(), member, what, frozenset(shards)))
            self.changed.notify_all()

    async def until(self, condition: Callable[[], bool], timeout: float) -> float:
        start = time.monotonic()
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(condition), timeout)
        return time.monotonic() - start


@pytest_asyncio.fixture
async def ncs(fresh_nats: str) -> AsyncIterator[list[Client]]:
    clients = [await connect(fresh_nats, name=f"m{i}") for i in range(3)]
    yield clients
    for c in clients:
        await c.close()


def _member(nc: Client, name: str, ledger: Ledger) -> ShardLeases:
    return ShardLeases(nc.jetstream(), name, shards=SHARDS, ttl_s=TTL, **ledger.callbacks(name))


async def _pair(ncs: list[Client]) -> tuple[Ledger, ShardLeases, ShardLeases]:
    """Two members that have shared the shards."""
    ledger = Ledger()
    a, b = _member(ncs[0], "a", ledger), _member(ncs[1], "b", ledger)
    await a.start()
    await b.start()
    await ledger.until(lambda: _counts([a, b]) == [6, 6], 10)
    return ledger, a, b


def _counts(members: list[ShardLeases]) -> list[int]:
    return [len(m.held) for m in members]


async def _until_owned(member: ShardLeases, shards: set[int], timeout: float) -> None:
    """Until the member counts every one of `shards` its own, woken by its changes (a lease
    taken, renewed or dropped: `on_change`)."""
    changed = asyncio.Event()
    member.on_change = changed.set

    async def owned() -> None:
        while not all(member.owns(s) for s in shards):
            changed.clear()
            await changed.wait()

    try:
        await asyncio.wait_for(owned(), timeout)
    finally:
        member.on_change = None


def _exclusive(members: list[ShardLeases]) -> bool:
    owned = [s for m in members for s in range(SHARDS) if m.owns(s)]
    return len(owned) == len(set(owned))


def test_clusters_map_to_shards_and_shares_are_fair() -> None:
    assert shard_of("a-cluster", 16) == shard_of("a-cluster", 16) and 0 <= shard_of("x", 7) < 7
    spread = [shard_of(f"cluster-{i}", 16) for i in range(1600)]
    assert min(spread.count(s) for s in range(16)) > 60  # roughly even
    shares = [fair_share(["a", "b", "c"], m, 16) for m in "abc"]
    assert shares == [6, 5, 5] and sum(shares) == 16


async def test_members_take_a_fair_share_and_a_graceful_stop_hands_over_at_once(ncs: list[Client]) -> None:
    ledger = Ledger()
    a, b, c = (_member(nc, n, ledger) for nc, n in zip(ncs, "abc", strict=True))
    await a.start()
    assert len(a.held) == SHARDS and all(a.owns(s) for s in range(SHARDS))
    await b.start()
    await c.start()
    members = [a, b, c]
    await ledger.until(lambda: sorted(_counts(members)) == [4, 4, 4], 10)
    assert _exclusive(members) and set().union(*[set(m.held) for m in members]) == set(range(SHARDS))

    async with lease_history(ncs[1].jetstream()) as history:
        stopping = set(a.held)
        await asyncio.gather(a.stop(), ledger.until(lambda: sorted(_counts([b, c])) == [6, 6], 30))
        ended = {**await history.taken({s for s in stopping if b.owns(s)}, "b", 30),
                 **await history.taken({s for s in stopping if c.owns(s)}, "c", 30)}
    # Nobody waited for the leases to expire: each was deleted by a before it was taken (it
    # was timed: within half the TTL, which a loaded machine's scheduling could outlast).
    assert sorted(ended) == sorted(stopping) and set(ended.values()) == {RELEASED}, ended
    assert _exclusive([b, c]), ({s: [m.member for m in (b, c) if m.owns(s)] for s in range(SHARDS)}, ledger.events)
    # a held every shard first and never again after losing it: each shard b or c gained,
    # a had lost before (on joins and on the stop alike).
    a_lost = {shard: t for t, m, what, ss in ledger.events if m == "a" and what == "lost" for shard in ss}
    gains = [(t, shard) for t, m, what, ss in ledger.events if m in "bc" and what == "gained" for shard in ss]
    assert gains and all(a_lost[shard] <= t for t, shard in gains), [(round(t, 3), m, w, sorted(ss)) for t, m, w, ss in ledger.events]
    await b.stop()
    await c.stop()


async def test_a_dead_members_shards_are_taken_over_once_their_leases_expired_and_never_owned_twice(ncs: list[Client]) -> None:
    ledger, a, b = await _pair(ncs)
    dead = set(a.held)
    async with lease_history(ncs[1].jetstream()) as history:
        await a.abort()  # kill -9: no release, no renewal
        assert not any(b.owns(s) for s in dead)
        await ledger.until(lambda: len(b.held) == SHARDS, 30)
        ended = await history.taken(dead, "b", 30)
    # Each was taken once the server had expired it (its marker), not before; it was timed
    # (between half the TTL and the TTL + 3 s), which a loaded machine's scheduling could miss.
    assert set(ended.values()) == {LAPSED}, ended
    await b.stop()


async def test_a_member_cut_off_stops_acting_before_anyone_else_can_take_over(ncs: list[Client]) -> None:
    """The lease decides: a member that cannot renew assumes it lost the shard before the
    key expires; a renewal that comes too late is refused by the server (expected sequence)."""
    ledger, a, b = await _pair(ncs)
    mine = set(a.held)
    real_write = a._write

    async def cut_off(*args: Any, **kwargs: Any) -> int:
        raise TimeoutError("partitioned")

    a._write = cut_off  # type: ignore[method-assign]
    await ledger.until(lambda: len(b.held) == SHARDS, TTL + 5)
    lapsed = [t for t, m, what, s in ledger.events if m == "a" and what == "lost" and s <= mine]
    gained = [t for t, m, what, s in ledger.events if m == "b" and what == "gained" and s & mine]
    assert lapsed and gained and max(lapsed) < min(gained)  # a stopped before b started
    assert not any(a.owns(s) for s in mine)
    # a's connection comes back: a late renewal with its old revision is refused.
    a._write = real_write  # type: ignore[method-assign]
    shard = min(mine)
    with pytest.raises(Exception, match="wrong last sequence"):
        await a._write(f"shard.{shard}", {"owner": "a"}, 1)
    await a.abort()
    await b.stop()


async def test_a_member_too_busy_to_renew_in_time_keeps_what_nobody_took(ncs: list[Client]) -> None:
    """Planning 10,000 nodes holds a planner's loop for seconds: its fence then finds the key
    exactly as it left it (nobody could take it meanwhile) and keeps the shard."""
    ledger = Ledger()
    ttl = 10.0  # the late renewals (their answers slow) must land before the server expires the keys, a TTL after their send
    a = ShardLeases(ncs[0].jetstream(), "a", shards=SHARDS, ttl_s=ttl, **ledger.callbacks("a"))
    await a.start()
    assert len(a.held) == SHARDS
    before = {s: a.revision(s) for s in range(SHARDS)}
    real_write = a._write

    async def slow_answer(key: str, *args: Any, **kwargs: Any) -> int:
        revision = await real_write(key, *args, **kwargs)
        if key.startswith("shard."):
            await asyncio.sleep(0.3)  # a busy server's answer, after its watch has told of the write
        return revision

    a._write = slow_answer  # type: ignore[method-assign]
    # Blocked just past every lease's own lapse point, counted from its send (SAFETY x TTL before
    # the server's expiry): a fixed sleep from here ate into that margin by however long `start`
    # took to return on a loaded machine, and the keys expired before the renewals landed.
    time.sleep(max(lease.valid_until for lease in a.held.values()) - time.monotonic() + 0.05)
    for s in range(SHARDS):  # each lease is written again (late), seen on the watch
        assert await a.changed(s, before[s], ttl)
    # ... and held again once their answers came: the watch tells of a write before its answer
    # may (the leases were checked at once, and one whose answer had not come yet failed it).
    await _until_owned(a, set(range(SHARDS)), ttl)
    assert not [e for e in ledger.events if e[2] == "lost"]
    await a.stop()


async def test_leases_on_their_own_thread_outlive_a_loop_busy_for_longer_than_the_ttl(fresh_nats: str) -> None:
    """The planner's way (`ThreadedLeases`): renewals and fences do not wait for the service's
    loop, which may be busy for seconds planning a big cluster."""
    from muster.bus.leasethread import ThreadedLeases

    ledger, closed = Ledger(), asyncio.Event()
    leases = ThreadedLeases(fresh_nats, "busy", shards=SHARDS, ttl_s=TTL, **ledger.callbacks("busy"), on_closed=_setter(closed))
    await leases.start()
    try:
        assert len(leases.held) == SHARDS
        time.sleep(TTL * 1.5)
        assert all(leases.owns(s) for s in range(SHARDS))
        assert [e[2] for e in ledger.events] == ["gained"]
    finally:
        await leases.stop()
    assert [e[2] for e in ledger.events] == ["gained", "lost"]  # handed over on the service's loop
    assert not closed.is_set()  # its own close at a stop is not news


async def test_the_owner_is_told_when_the_leases_connection_is_given_up(fresh_nats: str) -> None:
    """nats-py gives a connection up for good on some errors of the server (an auth check during
    a config reload: docs/security.md, "TLS"); the leases could then never be renewed or taken by
    another member while this one lives, so its owner is told (a planner exits, to be restarted)."""
    from muster.bus.leasethread import ThreadedLeases

    closed = asyncio.Event()
    leases = ThreadedLeases(fresh_nats, "given-up", shards=SHARDS, ttl_s=TTL, on_closed=_setter(closed))
    await leases.start()
    try:
        # Closed on the keeper's loop, not by the keeper: as nats-py closes it.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(leases._nc.close(), leases._loop))
        await asyncio.wait_for(closed.wait(), 10)
    finally:
        await leases.stop()


def _setter(event: asyncio.Event) -> Callable[[], Any]:
    async def set_it() -> None:
        event.set()

    return set_it


async def test_shards_a_member_could_not_take_up_are_handed_back_and_taken_again(ncs: list[Client]) -> None:
    """A member gains a dead member's shards while the log is unreachable for a moment (a
    leader election right after a partition heals, found by the partition nemesis): its owner
    cannot rebuild their clusters. Held anyway, they would be renewed for ever with nothing
    acting for them (their jobs never resumed); they are handed back and taken again."""
    ledger, a, b = await _pair(ncs)
    failing = [True]
    note_gained = b.on_gained

    async def gained(shards: set[int]) -> None:
        if failing[0]:
            failing[0] = False
            raise TimeoutError("the log is electing a leader")
        await note_gained(shards)

    b.on_gained = gained

    def taken_up() -> set[int]:
        up: set[int] = set()
        for _, member, what, shards in ledger.events:
            if member == "b":
                up = up | shards if what == "gained" else up - shards
        return up

    await a.abort()  # its shards expire; b gains them, fails to take them up once
    await ledger.until(lambda: len(b.held) == SHARDS and taken_up() == set(range(SHARDS)), TTL + 10)
    assert not failing[0]
    await b.stop()


async def test_a_lease_is_counted_from_when_its_write_was_sent_not_from_a_late_answer(ncs: list[Client]) -> None:
    """The server's TTL runs from when it stored a lease write; an answer may come seconds late
    (a slow or partitioned link). Counted from the answer, an owner would act on a shard whose
    key had expired and that another member had taken (seen in the partition soak: a planner
    gained a shard 3 s before its old owner stopped acting for it)."""
    ledger = Ledger()
    a = _member(ncs[0], "a", ledger)
    await a.start()
    real_write, sent_at = a._write, []

    async def answered_late(*args: Any, **kwargs: Any) -> int:
        sent_at.append(time.monotonic())
        revision = await real_write(*args, **kwargs)
        await asyncio.sleep(TTL / 2)  # the answer comes late; the key's TTL already runs
        return revision

    a._write = answered_late  # type: ignore[method-assign]
    await a._renew()  # what its timer does every ttl/3
    assert len(a.held) == SHARDS and sent_at
    for s, lease in a.held.items():
        assert lease.valid_until <= max(t for t in sent_at if t < lease.valid_until) + TTL * (1 - SAFETY) + 0.01, s
    await a.abort()


async def test_a_lease_lost_to_another_member_is_dropped_only_once_its_owner_knows(ncs: list[Client]) -> None:
    """A renewal finds the shard taken (it expired under a slow link). The member stops owning it
    at once, but keeps it in hand until its owner has been told (`on_lost`): dropped before, a
    rebalance waiting for the lock could take the shard again and tell the owner it gained it,
    and only then would the stale loss arrive, leaving the shard held with nothing acting for
    it (seen in the partition soak: "shard gained while still subscribed", then a request for
    that shard got "no planner holds it" on every try)."""
    ledger = Ledger()
    a = _member(ncs[0], "a", ledger)
    await a.start()
    found_taken = _taken_from(a, 0)
    async with a._lock:  # a rebalance (or any decision) is under way
        renewing = asyncio.create_task(a._renew())
        await asyncio.wait_for(found_taken.wait(), TTL)
        assert not a.owns(0) and 0 in a.held  # not acting for it, and not free to be taken again yet
    await renewing
    assert 0 not in a.held and [e[3] for e in ledger.events if e[2] == "lost"] == [frozenset({0})]
    await a.abort()


async def test_a_renewal_answered_after_the_shard_was_taken_anew_changes_nothing(ncs: list[Client]) -> None:
    """A renewal on its way across a partition comes back refused (its revision is old) after
    the member took the shard anew on the heal (a rebalance does not wait for renewals): the
    answer is about the old lease and must not drop the new one (found by scenario 9: the
    planner forgot two clusters right after gaining them, and nobody answered for their jobs)."""
    ledger = Ledger()
    a = _member(ncs[0], "a", ledger)
    await a.start()
    real_write = a._write
    entered, answer = asyncio.Event(), asyncio.Event()
    old = a.held[0].revision

    async def slow_then_refused(key: str, value: dict[str, Any], expect: int | None) -> int:
        if key == "shard.0" and expect == old:
            entered.set()
            await answer.wait()
            raise APIError(code=400, err_code=10071, description="wrong last sequence")
        return await real_write(key, value, expect)

    a._write = slow_then_refused  # type: ignore[method-assign]
    renewing = asyncio.create_task(a._renew())
    await asyncio.wait_for(entered.wait(), TTL)
    a._hold(0, old + 1, time.monotonic())  # taken anew meanwhile
    answer.set()
    await renewing
    assert a.owns(0) and a.held[0].revision == old + 1
    assert not [e for e in ledger.events if e[2] == "lost"]
    await a.abort()


async def test_a_loss_found_by_a_renewal_spares_the_lease_taken_anew_while_it_waited(ncs: list[Client]) -> None:
    """A renewal finds the shard taken and waits for the lock to tell the owner; meanwhile the
    lease's lapse drops it (telling the owner) and a rebalance takes it anew (the owner rebuilds
    its clusters). The renewal's loss is about the old lease: it must neither tell the owner
    again nor drop the new one (found by scenario 9 after the heal: the cut-off planner forgot
    the clusters it had just rebuilt, and for a TTL nobody answered for their jobs)."""
    ledger = Ledger()
    a = _member(ncs[0], "a", ledger)
    await a.start()
    old = a.held[0].revision
    found_taken = _taken_from(a, 0, old)
    async with a._lock:  # the lapse, then a rebalance, hold the lock
        renewing = asyncio.create_task(a._renew())
        await asyncio.wait_for(found_taken.wait(), TTL)
        a._drop(0)
        await a.on_lost({0})
        a._hold(0, old + 100, time.monotonic())
        await a.on_gained({0})
    await renewing
    assert a.owns(0) and a.held[0].revision == old + 100
    assert [e[2] for e in ledger.events if 0 in e[3]][-2:] == ["lost", "gained"]
    await a.abort()


def _taken_from(a: ShardLeases, victim: int, revision: int | None = None) -> asyncio.Event:
    """From now on the server refuses `a`'s writes of the victim shard's key (of that revision,
    if given) as another member's; the event is set when `a` finds it taken (and stops its fence)."""
    real_write, real_unfence = a._write, a._unfence
    found = asyncio.Event()

    async def taken(key: str, value: dict[str, Any], expect: int | None) -> int:
        if key == f"shard.{victim}" and revision in (None, expect):
            raise APIError(code=400, err_code=10071, description="wrong last sequence")
        return await real_write(key, value, expect)

    def unfence(shard: int) -> None:
        real_unfence(shard)
        if shard == victim:
            found.set()

    a._write, a._unfence = taken, unfence  # type: ignore[method-assign]
    return found
