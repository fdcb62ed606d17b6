"""What only the in-memory fakes have: injected faults, the clock's time, de-duplicated task
attempts, and a clock that runs due calls in time order. The event log's contract, which the
fake shares with JetStream, is tests/integration/bus/test_eventlog_contract.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from contracts.events import JobFailed, JobSucceeded
from muster.ports.eventlog import Append
from muster.ports.memory import ManualClock, MemoryEventLog, MemoryTaskQueue, matches


def _a(msg_id: str, reason: str = "x") -> Append:
    return Append(JobFailed(job_id="j", reason=reason), msg_id=msg_id)


async def test_injected_faults_fail_before_or_after_landing() -> None:
    log = MemoryEventLog()
    log.inject(lambda s, items: True, TimeoutError("refused"))
    with pytest.raises(TimeoutError):
        await log.append("s.a", [_a("1")])
    log.inject(lambda s, items: True, TimeoutError("ack lost"), lands=True)
    with pytest.raises(TimeoutError):
        await log.append("s.a", [_a("2")])
    assert [r.seq for r in log.records] == [1] and await log.append("s.a", [_a("2")]) == [1]


async def test_records_take_the_clocks_time_and_filters_match_as_nats_subjects_do() -> None:
    clock = ManualClock()
    log = MemoryEventLog(clock)
    await log.append("e.t.job.1", [Append(JobSucceeded(job_id="1"), msg_id="1")])
    assert log.records[0].time == clock.now()
    assert matches("a.>", "a.b.c") and not matches("a.>", "a") and not matches("a.*", "a.b.c") and matches("a.*.c", "a.b.c")


async def test_a_submit_fault_fails_its_future_before_or_after_landing() -> None:
    log = MemoryEventLog()
    log.inject(lambda s, items: True, TimeoutError("refused"))
    with pytest.raises(TimeoutError):
        await log.submit("s.a", _a("1"))
    log.inject(lambda s, items: True, TimeoutError("ack lost"), lands=True)
    with pytest.raises(TimeoutError):
        await log.submit("s.a", _a("1"))
    assert await log.submit("s.a", _a("1")) == 1 and len(log.records) == 1


async def test_the_task_queue_takes_each_attempt_once() -> None:
    from planner_harness import Harness

    from contracts.commands import CreateCluster

    h = Harness()
    h.behaviour = lambda m: "hold"
    await h.send(CreateCluster(name="q", template="hadoop-small", nodes=2))
    await h.settle()
    queue = MemoryTaskQueue()
    first = h.held[0]
    queue.fail(lambda m: True, RuntimeError("no stream"))
    with pytest.raises(RuntimeError):
        await queue.publish(first)
    await queue.publish(first)
    await queue.publish(first)
    assert queue.messages == [first] and queue.take() == [first] and queue.take() == []


async def test_the_manual_clock_runs_due_calls_in_time_order_and_skips_cancelled_ones() -> None:
    clock = ManualClock()
    ran: list[str] = []

    def call(name: str):
        async def run() -> None:
            ran.append(name)
            if name == "a":  # a call may schedule another that falls due in the same advance
                clock.call_at(clock.now() + timedelta(seconds=1), call("c"))
        return run

    start = clock.now()
    clock.call_at(start + timedelta(seconds=2), call("b"))
    clock.call_at(start + timedelta(seconds=1), call("a"))
    clock.call_at(start + timedelta(seconds=3), call("x")).cancel()
    await clock.advance(1.5)
    assert ran == ["a"] and clock.now() == start + timedelta(seconds=1.5)
    await clock.advance(5)
    assert ran == ["a", "b", "c"] and clock.pending == 0
