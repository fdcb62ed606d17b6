"""When the claims of a provisioner's earlier processes have stopped (docs/decisions/0054): a
session replaced before the planner first saw the id is waited for from that first sight, for
the TTL its registration carries; an older registration without a TTL changes nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from contracts.tasks import ProvisionerInfo, ProvisionerPresence
from services.planner.adapters import ALL, NatsWorkers, Sessions
from services.planner.domain.sessions import Deregistered, Registered, Stopped, earlier_stopped

FIRST_SIGHT = 1000.0


def _record(session: str, ttl_s: float) -> ProvisionerPresence:
    info = ProvisionerInfo(id="p1", session=session, host="h", pid=1, capacity=1, provisioner_class="default",
                           tenants=["t1"], started_at=datetime.now(UTC))
    return ProvisionerPresence(info=info, ttl_s=ttl_s, refreshed_at=datetime.now(UTC))


def test_a_session_replaced_before_the_planner_looked_with_a_longer_ttl_is_waited_for() -> None:
    # s0 (a 100 s TTL) was replaced by s1 (15 s) before the planner started; s1 died and s2 took
    # the id: s0 may have run on until 100 s after the planner's first sight.
    history = [Registered(5, "s0", 100.0), Registered(9, "s1", 15.0), Registered(12, "s2", 15.0)]
    assert earlier_stopped(history, "s2", FIRST_SIGHT) == Stopped(12, FIRST_SIGHT + 100)


def test_a_process_started_again_with_the_same_ttl_waits_one_ttl() -> None:
    # The common case (`muster up` starts a killed provisioner again): older runs of the id
    # included, every session had the default TTL.
    history: list[Registered | Deregistered] = [Registered(2, "s0", 15.0), Deregistered("s0"), Registered(7, "s1", 15.0), Registered(12, "s2", 15.0)]
    assert earlier_stopped(history, "s2", FIRST_SIGHT) == Stopped(12, FIRST_SIGHT + 15)


def test_registrations_without_a_ttl_are_left_to_the_watch_as_before() -> None:
    # An older provisioner's registration (v1): its TTL is not known, and the planner judges as
    # it did before the TTL was registered (from the TTLs its watch saw: `Sessions`).
    history = [Registered(5, "s0", None), Registered(9, "s1", None), Registered(12, "s2", 15.0)]
    assert earlier_stopped(history, "s2", FIRST_SIGHT) == Stopped(12, FIRST_SIGHT)
    mixed = [Registered(5, "s0", None), Registered(9, "s1", 40.0), Registered(12, "s2", 15.0)]
    assert earlier_stopped(mixed, "s2", FIRST_SIGHT) == Stopped(12, FIRST_SIGHT + 40)


def test_only_the_sessions_before_the_current_one_that_did_not_leave_count() -> None:
    history: list[Registered | Deregistered] = [Registered(3, "s0", 300.0), Deregistered("s0"),  # drained and left: it runs nothing
               Registered(5, "s1", 20.0),
               Registered(9, "s2", 15.0), Registered(10, "s2", 15.0),  # (its own, on a grant, not counted)
               Registered(14, "s3", 200.0)]  # a later one: its claims are after s2's registration
    assert earlier_stopped(history, "s2", FIRST_SIGHT) == Stopped(9, FIRST_SIGHT + 20)


def test_a_session_that_did_not_register_on_this_log_ends_nothing_and_every_registered_one_counts() -> None:
    assert earlier_stopped([Registered(5, "s0", 15.0)], "s1", FIRST_SIGHT) == Stopped(0, FIRST_SIGHT + 15)
    assert earlier_stopped([Registered(5, "s0", 15.0)], None, FIRST_SIGHT) == Stopped(0, FIRST_SIGHT + 15)
    assert earlier_stopped([], "s1", FIRST_SIGHT) == Stopped(0, FIRST_SIGHT)


async def test_a_record_gone_ends_every_claim_once_the_sessions_it_replaced_must_have_stopped() -> None:
    # s0 (a 100 s TTL) was replaced by s1 (1 s), which died: s1's record expires after 1 s, but
    # s0, cut off, may run on until 100 s after s1 wrote, so at most after the watch saw s1.
    workers, loop = NatsWorkers(None, log_=None), asyncio.get_running_loop()  # type: ignore[arg-type]
    history: list[Registered | Deregistered] = [Registered(5, "s0", 100.0), Registered(9, "s1", 1.0)]
    watch = workers.sessions
    assert workers._all_stopped("t1", "p1", []) == 0  # never registered: not known
    # No watch (yet): from when the record was first found gone, the longest TTL registered here
    # (until session 27 the record alone: ALL at once, while s0 might run on).
    assert workers._all_stopped("t1", "p1", history) == 0
    found = watch.gone_found["p1"]
    assert watch._again[("p1", "t1")].when() >= found + 100
    assert workers._all_stopped("t1", "p1", history) == 0 and watch.gone_found["p1"] == found  # (the first finding stands)
    watch.gone_found["p1"] = found - 100  # (as if first found gone 100 s ago)
    assert workers._all_stopped("t1", "p1", history) == ALL
    watch._again.pop(("p1", "t1")).cancel()
    watch.watching_since = loop.time()
    assert workers._all_stopped("t1", "p1", history) == 0  # the watch never saw it: from when it started
    assert watch._again[("p1", "t1")].when() >= watch.watching_since + 100
    watch.seen("p1", _record("s1", 1))
    assert workers._all_stopped("t1", "p1", history) == 0  # the watch has not seen it go: asked when it does
    watch.seen("p1", None)
    sight = watch.last["p1"][1]
    assert workers._all_stopped("t1", "p1", history) == 0
    assert watch._again[("p1", "t1")].when() >= sight + 100
    watch.last["p1"] = ("s1", sight - 100)  # (as if seen 100 s ago)
    assert workers._all_stopped("t1", "p1", history) == ALL
    one_ttl: list[Registered | Deregistered] = [Registered(5, "s0", 1.0), Registered(9, "s1", 1.0)]
    watch.last["p1"] = ("s1", loop.time() - 1)  # the common case: one TTL throughout, s1 there for longer
    assert workers._all_stopped("t1", "p1", one_ttl) == ALL
    watch.close()


async def test_sessions_note_the_first_sight_and_ask_again_when_told() -> None:
    sessions, asked = Sessions(), asyncio.Event()
    sessions.on_settled = lambda pid: asked.set()
    loop = asyncio.get_running_loop()
    before = loop.time()
    sessions.seen("p1", _record("s1", 15))
    first = sessions.first_seen["p1"]
    assert before <= first <= loop.time()
    sessions.seen("p1", _record("s2", 15))
    sessions.seen("p1", None)
    sessions.seen("p1", _record("s3", 15))
    assert sessions.first_seen["p1"] == first  # the id's first sight stays
    sessions.ask_again("p1", "t1", loop.time() + 600)
    sessions.ask_again("p1", "t1", loop.time() + 0.01)  # (the last asked for a tenant stands)
    await asyncio.wait_for(asked.wait(), 5)
    assert not sessions._again
    sessions.ask_again("p1", "t1", loop.time() + 600)
    sessions.close()
    assert not sessions._again and not sessions._timers
