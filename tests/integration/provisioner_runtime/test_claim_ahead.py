"""Claiming ahead on a real nats-server: tasks held beyond capacity are claimed while the slots
turn over, each claim stored before its plugin starts, never more plugins than capacity; a task
claimed ahead that finds no free slot goes back to the queue for another provisioner."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from contracts import subjects
from contracts.tasks import TaskMessage, TaskOutcome
from muster.bus.eventstore import EventStore
from services.provisioner.worker import Workers

from .conftest import DEADLINE_S, Bench, HeldExecutor

pytestmark = pytest.mark.nats


@dataclass
class ClaimFirst:
    """Returns at once; notes, as each plugin starts, whether its claim is in the log, how many
    plugins run and how many tasks the workers hold."""

    store: EventStore
    provisioner: str
    workers: Workers | None = None
    unclaimed: list[str] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    most_held: int = 0
    done: int = 0

    def describe(self) -> list[dict[str, str]]:
        return [{"name": "claim-first", "type": "automator", "version": "0.1"}]

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        if self.workers is not None:
            self.most_held = max(self.most_held, self.workers.in_flight)
        try:
            subject = subjects.task_events(task.tenant, task.job_id, task.task_id, self.provisioner)
            if not any(r.type == "TaskClaimed" for r in await self.store.read(subject)):
                self.unclaimed.append(task.task_id)
        finally:
            self.running -= 1
        self.done += 1
        return TaskOutcome(ok=True, result={"ran": task.task_id})


async def test_tasks_claimed_ahead_run_in_turn_never_beyond_capacity(bench: Bench) -> None:
    n = 120
    executor = ClaimFirst(EventStore(bench.nc), "prov-ahead")
    w = await bench.workers(executor, "prov-ahead", capacity=2, claim_ahead=4)
    executor.workers = w
    for i in range(n):
        await bench.publish(f"n{i}-install")

    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == n, timeout=60)
    assert executor.unclaimed == []  # every claim was stored before its plugin started
    assert executor.most_running <= 2  # capacity bounds the plugins...
    assert executor.most_held > 2  # ...not the tasks held: some were claimed ahead
    claims = bench.log.of("TaskClaimed")
    assert len(claims) == n and {c.delivery for c in claims} == {1}
    assert {c.worker for c in claims} <= {f"prov-ahead/w{k}" for k in range(6)}
    assert bench.log.of("TaskFailed") == []
    await asyncio.wait_for(w.idle.wait(), DEADLINE_S)
    assert w.completed == n and w.in_flight == 0 and w.plugins_running == 0


@dataclass
class ByName(HeldExecutor):
    """Tasks whose id says `hold` wait for the test; the others return at once."""

    hold: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.held = asyncio.Event()

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        if "hold" not in task.task_id:
            self.started.append(task)
            await self._notify()
            return TaskOutcome(ok=True, result={"ran": task.task_id})
        self.started.append(task)
        await self._notify()
        await self.held.wait()
        return TaskOutcome(ok=True, result={"ran": task.task_id})


async def test_a_task_claimed_ahead_behind_a_long_one_goes_to_another_provisioner(bench: Bench) -> None:
    a = ByName()
    wa = await bench.workers(a, "prov-a", capacity=1, claim_ahead=1)
    # A quick task: the slot turns over fast, so one task may be claimed ahead.
    await bench.publish("n0-install")
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded", "n0-install")) == 1)
    # A long one takes the only slot; the next is claimed ahead and waits for it...
    await bench.publish("n1-hold")
    await a.wait_started(2)
    await bench.publish("n2-install")
    await bench.log.wait_for(lambda log: len(log.of("TaskClaimed", "n2-install")) == 1)
    # ...until it gives up (AHEAD_WAIT_S) and goes back to the queue, where another takes it.
    b = HeldExecutor(hold=False)
    await bench.workers(b, "prov-b")
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded", "n2-install")) == 1)
    claims = [(c.provisioner, c.delivery) for c in bench.log.of("TaskClaimed", "n2-install")]
    assert claims == [("prov-a", 1), ("prov-b", 2)]
    assert bench.log.of("TaskSucceeded", "n2-install")[0].provisioner == "prov-b"
    assert [t.task_id for t in a.started] == ["n0-install", "n1-hold"] and wa.passed == 1
    # prov-a claims nothing more ahead while its slot is held.
    assert wa.core.wanted() == 0
    a.held.set()
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded", "n1-hold")) == 1)
