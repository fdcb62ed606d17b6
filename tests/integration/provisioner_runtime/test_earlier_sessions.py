"""The planner's view of a provisioner id started again (docs/decisions/0054), on a real server:
a process replaced before the planner first looked, with a longer presence TTL than the one
that replaced it, may run on (cut off) until that first sight plus its TTL, which its
registration carries; the claims before the current process's registration end no sooner, and
the planner asks again then. With one TTL throughout, they end one TTL after the new process
wrote its record, as before. The same when the id's record expires: the last writer's TTL
ended, not necessarily those it replaced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import pytest

from contracts import subjects
from muster.bus.eventstore import EventStore
from services.planner.adapters import ALL, NatsWorkers
from services.planner.presencewatch import watch_presence
from services.provisioner.app import Provisioner

from .conftest import DEADLINE_S, Bench, HeldExecutor

pytestmark = pytest.mark.nats

SHORT_S, LONG_S = 1, 8


class Planner:
    """The planner's side: `NatsWorkers` and its watch of the bucket; `gone` stands for
    `Planner.provisioner_gone` (its cancelled jobs closed again), noting when it was called."""

    def __init__(self, bench: Bench) -> None:
        self.workers, self.loop = NatsWorkers(bench.nc, log_=EventStore(bench.nc)), asyncio.get_running_loop()
        self.asked, self.calls = asyncio.Condition(), list[float]()

    async def gone(self, _: str) -> None:
        async with self.asked:
            self.calls.append(self.loop.time())
            self.asked.notify_all()

    async def when(self, predicate: Callable[[], bool]) -> None:
        async with self.asked:
            await asyncio.wait_for(self.asked.wait_for(predicate), DEADLINE_S)


@asynccontextmanager
async def _replaced_before_the_start(bench: Bench, pid: str, replaced_ttl_s: int) -> AsyncIterator[tuple[Provisioner, Planner]]:
    """s0 registers, s1 takes the id over (s0 renews no more), then a planner starts watching:
    s1 and the planner. (s0 is stopped, so that it does not take the id back once s1's record
    expires, as a live one would; the planner cannot tell it from one cut off.)"""
    s0 = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=replaced_ttl_s)
    s1 = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=SHORT_S)
    await s0.abort()
    planner = Planner(bench)
    async with AsyncExitStack() as stack:
        await watch_presence(bench.nc, stack, planner.workers.sessions, planner.gone)
        yield s1, planner


@pytest.mark.parametrize("replaced_ttl_s", [LONG_S, SHORT_S], ids=["longer-ttl-replaced-before-the-start", "one-ttl"])
async def test_claims_before_a_new_session_end_once_every_earlier_one_must_have_stopped(
        bench: Bench, tenant: str, replaced_ttl_s: int) -> None:
    pid = f"p-{tenant}"
    async with _replaced_before_the_start(bench, pid, replaced_ttl_s) as (s1, planner):
        workers, loop = planner.workers, planner.loop
        first = workers.sessions.first_seen[pid]
        # s1 dies and is started again under the id as s2 (`muster up`'s supervisor).
        await s1.abort()
        s2 = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=SHORT_S)
        registered = [r for r in await EventStore(bench.nc).read(subjects.provisioner_events(tenant, pid))
                      if r.type == "ProvisionerRegistered"]
        assert [(r.event.ttl_s, r.event.v) for r in registered] == [(replaced_ttl_s, 2), (SHORT_S, 2), (SHORT_S, 2)]
        since = registered[-1].seq

        await planner.when(lambda: workers.sessions.settled.get(pid) == s2.info.session)  # there for the TTLs seen
        if replaced_ttl_s == LONG_S and loop.time() < first + LONG_S:
            # s0, which the watch never saw, may still run a claim: not yet, and asked again then.
            assert await workers.ended(tenant, {pid}) == {pid: 0}
            assert loop.time() < first + LONG_S  # (the answer was given in time: it meant something)
            await planner.when(lambda: planner.calls[-1] >= first + LONG_S)
        assert await workers.ended(tenant, {pid}) == {pid: since}


@pytest.mark.parametrize("replaced_ttl_s", [LONG_S, SHORT_S], ids=["longer-ttl-replaced-before-the-start", "one-ttl"])
async def test_claims_of_an_id_whose_record_expired_end_once_the_sessions_it_replaced_must_have_stopped(
        bench: Bench, tenant: str, replaced_ttl_s: int) -> None:
    pid = f"p-{tenant}"
    async with _replaced_before_the_start(bench, pid, replaced_ttl_s) as (s1, planner):
        workers, loop = planner.workers, planner.loop
        sight = workers.sessions.last[pid][1]
        await s1.abort()  # dies, not started again: its record expires one (short) TTL later
        await planner.when(lambda: pid not in workers.sessions.current)
        if replaced_ttl_s == LONG_S and loop.time() < sight + LONG_S:
            # s0 may still run a claim: its lease was renewed until s1 wrote, before the watch saw s1.
            assert await workers.ended(tenant, {pid}) == {pid: 0}
            assert loop.time() < sight + LONG_S  # (the answer was given in time: it meant something)
            await planner.when(lambda: planner.calls[-1] >= sight + LONG_S)
        assert await workers.ended(tenant, {pid}) == {pid: ALL}
