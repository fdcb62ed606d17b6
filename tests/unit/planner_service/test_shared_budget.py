"""Concurrency limits that hold across planners: each limit's slots are one shared budget,
divided by shard and changed by compare-and-set (docs/decisions/0029-shared-budget.md). On
fakes: two planners that share the log and the budgets, each acting for its own shard; the
real thing (3 planner processes on a nats-server) is tests/integration/services/test_shared_limits.py."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from planner_harness import Harness, OwnedWhere, demo_catalog

from contracts.commands import Accepted, CreateCluster
from contracts.tasks import TaskMessage
from muster.ports.memory import MemoryBudgets, MemoryEventLog
from services.planner.app import PlannerConfig
from services.planner.domain import planning
from services.planner.domain.budget import divide
from services.planner.domain.limits import PROVIDER_ACTIONS

SHARDS = 2


def shard_of(cluster_id: str) -> int:
    return zlib.crc32(cluster_id.encode()) % SHARDS


class Held:
    """A planner's shards, as the leases would have them."""

    def __init__(self, *shards: int) -> None:
        self.held = set(shards)

    def shard_of(self, cluster_id: str) -> int:
        return shard_of(cluster_id)

    def holds(self, shard: int) -> bool:
        return shard in self.held


# -- the division, pure -------------------------------------------------------------------------


def test_waiting_tasks_get_the_room_the_other_shards_leave() -> None:
    mine = {0, 1}.__contains__
    assert divide({2: 3}, mine, {0: 1}, {0: 4}, 5) == {2: 3, 0: 2}
    assert divide({2: 5}, mine, {}, {0: 4, 1: 1}, 5) == {2: 5}  # no room: nothing written for them
    assert divide({2: 1}, mine, {}, {0: 2, 1: 2}, 5) == {2: 1, 0: 2, 1: 2}


def test_slots_nothing_uses_go_back_and_tasks_in_flight_keep_theirs_over_the_limit() -> None:
    mine = {0}.__contains__
    assert divide({0: 4, 1: 2}, mine, {0: 1}, {}, 5) == {0: 1, 1: 2}  # three given back
    assert divide({0: 4, 1: 5}, mine, {0: 3}, {0: 2}, 5) == {0: 3, 1: 5}  # taken over, over the limit: no more
    assert divide({0: 2, 1: 1}, mine, {}, {}, 5) == {1: 1}  # a gained shard's leftovers
    assert divide({1: 2}, mine, {0: 1}, {0: 1}, None) == {1: 2, 0: 1}  # no limit (any more): nothing granted


# -- two planners on fakes ------------------------------------------------------------------------


def request_for(shard: int, start: int) -> str:
    """A request id whose new cluster lands on `shard`."""
    n = start
    while shard_of(planning.created_ids("default", f"r{n}")[1]) != shard:
        n += 1
    return f"r{n}"


class Pair:
    def __init__(self, maxconcurrent: int, **config: Any) -> None:
        catalog = demo_catalog()
        catalog.providers["sim"] = catalog.providers["sim"].model_copy(update={"maxconcurrent": maxconcurrent})
        self.log, self.budgets = MemoryEventLog(), MemoryBudgets()
        self.planners: dict[str, Harness] = {}
        for name, shard in (("a", 0), ("b", 1)):
            held = Held(shard)
            h = Harness(PlannerConfig(instance=f"planner-{name}", **config), catalog, log=self.log,
                        ownership=OwnedWhere(lambda t, c, held=held: held.holds(shard_of(c))), shards=held,
                        budgets=self.budgets.view(name))
            h.behaviour = lambda m: "hold"
            self.planners[name] = h
        self.next = 0

    async def create(self, on: str, nodes: int = 3) -> Accepted:
        h = self.planners[on]
        rid = request_for(0 if on == "a" else 1, self.next)
        self.next = int(rid[1:]) + 1
        reply = await h.send(CreateCluster(name=f"c{rid}", template="hadoop-small", nodes=nodes, request_id=rid))
        assert isinstance(reply, Accepted), reply
        return reply

    async def settle(self) -> None:
        """Both planners take every event, and every budget change the other made."""
        moved = True
        while moved:
            moved = False
            for name, h in self.planners.items():
                before = (len(self.log.records), len(h.held))
                await h.settle()
                changed, self.budgets.changes[name] = self.budgets.changes[name], []
                for budget in dict.fromkeys(changed):
                    await h.planner.on_budget_change(budget)
                moved |= bool(changed) or (len(self.log.records), len(h.held)) != before

    def in_flight(self) -> list[TaskMessage]:
        return [m for h in self.planners.values() for m in h.held]

    async def run_one_at_a_time(self) -> list[list[TaskMessage]]:
        seen = []
        await self.settle()
        while self.in_flight():
            seen.append(self.in_flight())
            h = next(h for h in self.planners.values() if h.held)
            first, h.held = h.held[0], h.held[1:]
            await h.work(first, "succeed")
            await self.settle()
        return seen


def provider_tasks(messages: list[TaskMessage]) -> int:
    return sum(m.action.value in PROVIDER_ACTIONS for m in messages)


async def test_two_planners_keep_one_provider_limit_together() -> None:
    pair = Pair(maxconcurrent=2)
    replies = [await pair.create(on) for on in ("a", "b", "a", "b")]
    steps = await pair.run_one_at_a_time()
    assert max(provider_tasks(s) for s in steps) == 2  # 12 creates wanted to go at once, 6 on each planner
    for reply in replies:
        owner = pair.planners["a" if shard_of(reply.cluster_id) == 0 else "b"]
        assert owner.job(reply.job_id).state == "succeeded"
    assert len({m.job_id for s in steps for m in s if m.action.value == "create"}) == 4  # every job got slots
    assert all(not stored.shares for stored in pair.budgets.values.values())  # every slot given back


async def test_a_tenant_limit_is_shared_too() -> None:
    pair = Pair(maxconcurrent=100, tenant_limit=3)
    replies = [await pair.create(on, nodes=4) for on in ("a", "b")]
    steps = await pair.run_one_at_a_time()
    assert max(len(s) for s in steps) == 3  # 8 creates wanted to go at once
    assert {m.job_id for s in steps for m in s} == {r.job_id for r in replies}


async def test_a_budget_that_cannot_be_written_holds_the_tasks_and_is_tried_again() -> None:
    pair = Pair(maxconcurrent=2)
    a = pair.planners["a"]
    pair.budgets.fail = ConnectionError("no bus")
    await pair.create("a")
    await pair.settle()
    assert a.held == []  # no slot without the budget
    pair.budgets.fail = None
    await a.clock.advance(0.3)  # the retry's timer
    await pair.settle()
    assert provider_tasks(a.held) == 2


async def test_a_shard_taken_over_keeps_its_tasks_in_flight_and_gives_back_the_rest() -> None:
    pair = Pair(maxconcurrent=3)
    a, b = pair.planners["a"], pair.planners["b"]
    await pair.create("b", nodes=2)
    await pair.settle()
    assert provider_tasks(b.held) == 2 and pair.budgets.values["provider.default.sim"].shares == {1: 2}
    # b dies; its two tasks still run. a gains shard 1, counts them, and holds their slots.
    b.planner.timers.cancel_all()
    del pair.planners["b"], pair.budgets.changes["b"]
    a.ports["shards"].held.add(1)
    await a.restart()
    a.queue.take()  # the resume published b's two attempts again (same ids): the copies dropped
    await pair.settle()
    assert pair.budgets.values["provider.default.sim"].shares == {1: 2}
    await pair.create("a", nodes=3)
    await pair.settle()
    assert provider_tasks(a.held) == 1  # the one slot left
    for message in list(b.held):  # b's tasks finish; a takes their outcomes
        b.held.remove(message)
        await a.work(message, "succeed")
    await pair.settle()
    assert provider_tasks(a.held) == 3


@pytest.mark.parametrize("maxconcurrent", [1])
async def test_one_slot_moves_between_planners(maxconcurrent: int) -> None:
    pair = Pair(maxconcurrent=maxconcurrent)
    await pair.create("a", nodes=2)
    await pair.create("b", nodes=2)
    steps = await pair.run_one_at_a_time()
    creates = [m for s in steps for m in s if m.action.value == "create"]
    assert max(provider_tasks(s) for s in steps) == 1
    assert len({m.job_id for m in creates}) == 2


def test_a_task_asks_for_a_later_limit_only_once_every_earlier_one_has_room_for_it() -> None:
    """Tasks that need a provider slot and a tenant slot: a shard without provider room does
    not also take tenant slots, which another shard's tasks holding provider slots need (each
    shard holding what the other needs was a run that never ended)."""
    from collections import Counter

    from services.planner.domain.limits import Limits

    provider, tenant = ("provider", "acme", "sim"), ("tenant", "acme")
    limits = Limits(provider_limit=lambda t, p: 2, default_tenant_limit=3, shard_of=lambda c: 0)
    limits.grants = {provider: {1: 2}, tenant: {}}
    limits.held = {"j0": Counter({((provider, 0), (tenant, 0)): 3}), "j1": Counter({((provider, 1), (tenant, 1)): 3})}
    assert limits.demand(provider) == ({}, {0: 3, 1: 3})
    assert limits.demand(tenant) == ({}, {1: 2})  # shard 0 has no provider room: it asks no tenant slot
    limits.count[(provider, 1)] = 1  # one of shard 1's provider slots in use: one free for a waiting task
    assert limits.demand(tenant) == ({}, {1: 1})
