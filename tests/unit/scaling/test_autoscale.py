"""Worker scaling (#14.4) without a broker: the decision against live capacity, and the
autoscaler's bounds, cool-down and rest, on a manual clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from muster.ports.memory import ManualClock
from muster.runtime.autoscale import AutoscalePolicy, Autoscaler, decide
from muster.scaling import ClassScaling, by_class


def presence(pid: str, klass: str, capacity: int, draining: bool = False) -> Any:
    return SimpleNamespace(info=SimpleNamespace(id=pid, provisioner_class=klass, capacity=capacity), draining=draining)


def answer(planner: str, **queues: dict[str, Any]) -> dict[str, Any]:
    return {"planner": planner, "queues": [
        {"tenant": q.get("tenant", "t"), "class": k, "recommended_workers": q.get("need", 0), "queue_length": q.get("queued", 0),
         "in_progress": q.get("running", 0), "arrival_rate_per_s": q.get("rate", 0.0)} for k, q in queues.items()]}


def test_needs_are_summed_over_planners_and_compared_with_live_capacity() -> None:
    answers = [answer("p1", default={"need": 10, "queued": 4, "rate": 1.5}), answer("p2", default={"need": 7, "running": 3}, gpu={"need": 1})]
    live = [presence("a", "default", 8), presence("b", "default", 4), presence("c", "default", 8, draining=True), presence("g", "gpu", 2)]
    scale = by_class(answers, live)
    d = scale["default"]
    assert (d.needed, d.capacity, d.provisioners, d.delta, d.queue_length, d.in_progress) == (17, 12, 2, 5, 4, 3)
    assert d.processes(8) == 1 and d.processes(4) == 2
    assert scale["gpu"].delta == -1 and scale["gpu"].processes(2) == 0  # removing rounds down: never below the need
    assert by_class([], [presence("a", "default", 8)])["default"].processes(8) == -1


def _scaling(needed: int, capacity: int, rate: float = 0.0) -> ClassScaling:
    return ClassScaling("default", needed, capacity, capacity // 8, 0, 0, rate)


def test_decisions_stay_within_the_bounds() -> None:
    policy = AutoscalePolicy(min_processes=1, max_processes=3, capacity_each=8)
    assert decide(_scaling(40, 8), 1, policy) == 2  # wants 4 more, room for 2
    assert decide(_scaling(0, 24), 3, policy) == -2  # wants all gone, keeps 1
    assert decide(None, 0, policy) == 1  # below the minimum
    assert decide(_scaling(9, 16), 2, policy) == 0  # 7 spare slots: not a whole process


class FakeFleet:
    def __init__(self, n: int = 1) -> None:
        self.names = [f"provisioner-{i}" for i in range(1, n + 1)]
        self.started = self.drained = 0

    def count(self) -> int:
        return len(self.names)

    async def start_one(self) -> str:
        self.started += 1
        self.names.append(f"provisioner-x{self.started}")
        return self.names[-1]

    async def drain_one(self) -> str | None:
        self.drained += 1
        return self.names.pop()


class World:
    """What the bus would say: the planners' need, and presence of the fleet's processes."""

    def __init__(self, fleet: FakeFleet) -> None:
        self.fleet, self.need, self.rate, self.calls = fleet, 0, 0.0, 0

    async def gather(self) -> tuple[list[dict[str, Any]], list[Any]]:
        self.calls += 1
        return ([answer("p1", default={"need": self.need, "rate": self.rate, "queued": self.need})],
                [presence(n, "default", 8) for n in self.fleet.names])


async def test_it_scales_up_on_activity_and_down_after_the_window_with_a_cool_down() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    fleet = FakeFleet(1)
    world = World(fleet)
    scaler = Autoscaler(fleet, world.gather, clock, AutoscalePolicy(max_processes=4, cooldown_s=30, settle_s=1, window_s=60))

    # At rest nothing is scheduled: nothing polls.
    assert clock.pending == 0
    world.need, world.rate = 30, 5.0
    scaler.poke()
    scaler.poke()  # a burst: one look
    assert clock.pending == 1
    await clock.advance(1)
    assert fleet.count() == 4 and fleet.started == 3  # 30 slots: 4 processes of 8 (the maximum)

    # The work stops. Within the cool-down nothing is drained, whatever the figures say.
    world.need, world.rate = 0, 0.0
    scaler.poke()
    await clock.advance(2)
    assert fleet.count() == 4
    # After the cool-down and the window, it drains to the minimum, by itself (timers).
    await clock.advance(120)
    assert fleet.count() == 1 and fleet.drained == 3
    calls = world.calls
    await clock.advance(3600)
    assert world.calls == calls and clock.pending == 0  # at rest again: no more looks
    assert [c for _, c in scaler.actions] == [3, -3]


async def test_it_keeps_the_minimum_and_survives_an_unreachable_bus() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    fleet = FakeFleet(0)
    failing = {"n": 1}

    async def gather() -> tuple[list[dict[str, Any]], list[Any]]:
        if failing["n"]:
            failing["n"] -= 1
            raise TimeoutError("no bus")
        return [], []

    scaler = Autoscaler(fleet, gather, clock, AutoscalePolicy(min_processes=2, cooldown_s=10))
    scaler.poke()
    await clock.advance(1)
    assert fleet.count() == 0  # the bus was away: it will look again
    await clock.advance(10)
    assert fleet.count() == 2


class SlowFleet(FakeFleet):
    """A process takes a while to start (`muster up` waits for it): looks may overlap."""

    def __init__(self, n: int, clock: ManualClock) -> None:
        super().__init__(n)
        self.clock = clock
        self.go = asyncio.Event()

    async def start_one(self) -> str:
        await self.go.wait()
        await self.clock.advance(2)
        return await super().start_one()


async def test_a_look_while_a_change_is_being_made_waits_for_it_and_keeps_the_cool_down() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    fleet = SlowFleet(1, clock)
    world = World(fleet)
    world.need, world.rate = 16, 5.0
    scaler = Autoscaler(fleet, world.gather, clock, AutoscalePolicy(max_processes=4, cooldown_s=30, settle_s=1, window_s=60))
    first = asyncio.ensure_future(scaler.evaluate())
    second = asyncio.ensure_future(scaler.evaluate())  # task events poked it while the first starts a process
    await asyncio.sleep(0)
    fleet.go.set()
    assert await first == 1 and await second == 0  # once, not once for each look
    assert fleet.started == 1 and [c for _, c in scaler.actions] == [1]
    assert scaler.last_change == clock.now()  # from when the process was up
