"""The planner's view of a provisioner id started again (docs/decisions/0054), on a real server:
a process replaced before the planner first looked, with a longer presence TTL than the one
that replaced it, may run on (cut off) until that first sight plus its TTL, which its
registration carries; the claims before the current process's registration end no sooner, and
the planner asks again then. With one TTL throughout, they end one TTL after the new process
wrote its record, as before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack

import pytest

from contracts import subjects
from muster.bus.eventstore import EventStore
from services.planner.adapters import NatsWorkers
from services.planner.presencewatch import watch_presence

from .conftest import DEADLINE_S, Bench, HeldExecutor

pytestmark = pytest.mark.nats

SHORT_S, LONG_S = 1, 8


@pytest.mark.parametrize("replaced_ttl_s", [LONG_S, SHORT_S], ids=["longer-ttl-replaced-before-the-start", "one-ttl"])
async def test_claims_before_a_new_session_end_once_every_earlier_one_must_have_stopped(
        bench: Bench, tenant: str, replaced_ttl_s: int) -> None:
    pid = f"p-{tenant}"
    # Before the planner starts: s0 registers, s1 takes the id over (s0 renews no more).
    await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=replaced_ttl_s)
    s1 = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=SHORT_S)

    workers, loop = NatsWorkers(bench.nc, log_=EventStore(bench.nc)), asyncio.get_running_loop()
    asked, calls = asyncio.Condition(), list[float]()

    async def gone(_: str) -> None:  # (the planner's `provisioner_gone`: its cancelled jobs closed again)
        async with asked:
            calls.append(loop.time())
            asked.notify_all()

    async def when(predicate: Callable[[], bool]) -> None:
        async with asked:
            await asyncio.wait_for(asked.wait_for(predicate), DEADLINE_S)

    async with AsyncExitStack() as stack:
        await watch_presence(bench.nc, stack, workers.sessions, gone)
        first = workers.sessions.first_seen[pid]
        # s1 dies and is started again under the id as s2 (`muster up`'s supervisor).
        await s1.abort()
        s2 = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=SHORT_S)
        registered = [r for r in await EventStore(bench.nc).read(subjects.provisioner_events(tenant, pid))
                      if r.type == "ProvisionerRegistered"]
        assert [(r.event.ttl_s, r.event.v) for r in registered] == [(replaced_ttl_s, 2), (SHORT_S, 2), (SHORT_S, 2)]
        since = registered[-1].seq

        await when(lambda: workers.sessions.settled.get(pid) == s2.info.session)  # there for the TTLs its watch saw
        if replaced_ttl_s == LONG_S and loop.time() < first + LONG_S:
            # s0, which the watch never saw, may still run a claim: not yet, and asked again then.
            assert await workers.ended(tenant, {pid}) == {pid: 0}
            assert loop.time() < first + LONG_S  # (the answer was given in time: it meant something)
            await when(lambda: calls[-1] >= first + LONG_S)
        assert await workers.ended(tenant, {pid}) == {pid: since}
