"""The in-memory fakes keep the guarantees of the JetStream adapters the service layer relies
on: expected-sequence fencing, idempotency keys, whole-or-nothing batches, subject filters,
de-duplicated task attempts, and a clock that runs due calls in time order."""

from __future__ import annotations

from datetime import timedelta

import pytest

from contracts.events import JobFailed, JobSucceeded
from muster.ports.eventlog import Append, ConcurrencyError
from muster.ports.memory import ManualClock, MemoryEventLog, MemoryTaskQueue, matches


def _a(msg_id: str, reason: str = "x") -> Append:
    return Append(JobFailed(job_id="j", reason=reason), msg_id=msg_id)


async def test_a_stale_writer_is_refused_and_a_retry_of_a_landed_append_is_not_stored_twice() -> None:
    log = MemoryEventLog()
    assert await log.append("s.a", [_a("1")], expect_last_seq=0) == [1]
    with pytest.raises(ConcurrencyError):
        await log.append("s.a", [_a("2")], expect_last_seq=0)  # someone else wrote first
    assert await log.append("s.a", [_a("1")], expect_last_seq=0) == [1]  # a retry: its key is the last
    assert await log.append("s.b", [_a("1")]) == [1]  # de-duplicated by key, even elsewhere
    assert len(log.records) == 1 and await log.last_seq("s.a") == 1 and await log.last_seq("s.b") == 0


async def test_a_batch_lands_whole_or_not_at_all() -> None:
    log = MemoryEventLog()
    await log.append("s.a", [_a("1")])
    assert await log.append("s.a", [_a("2"), _a("3")], expect_last_seq=1) == [2, 3]
    assert await log.append("s.a", [_a("2"), _a("3")], expect_last_seq=1) == [2, 3]  # the retry
    with pytest.raises(ConcurrencyError):
        await log.append("s.a", [_a("4"), _a("2")], expect_last_seq=3)  # a key seen before, not a retry
    assert [r.seq for r in await log.read("s.>")] == [1, 2, 3]


async def test_a_chain_stores_the_prefix_before_its_first_refusal() -> None:
    """As `EventStore.append_chain`: one event at a time, each fenced on the one before it on
    its subject; the first refusal stops the chain."""
    log = MemoryEventLog()
    assert await log.append_chain([("s.a", [_a("1"), _a("2")], 0), ("s.b", [_a("3")], None)]) == [[1, 2], [3]]
    await log.append("s.c", [_a("4")])
    with pytest.raises(ConcurrencyError):
        await log.append_chain([("s.a", [_a("5")], 2), ("s.c", [_a("6")], 0), ("s.a", [_a("7")], None)])
    assert [r.seq for r in await log.read("s.>")] == [1, 2, 3, 4, 5]  # "5" landed, nothing after "6"


async def test_injected_faults_fail_before_or_after_landing() -> None:
    log = MemoryEventLog()
    log.inject(lambda s, items: True, TimeoutError("refused"))
    with pytest.raises(TimeoutError):
        await log.append("s.a", [_a("1")])
    log.inject(lambda s, items: True, TimeoutError("ack lost"), lands=True)
    with pytest.raises(TimeoutError):
        await log.append("s.a", [_a("2")])
    assert [r.seq for r in log.records] == [1] and await log.append("s.a", [_a("2")]) == [1]


async def test_reads_follow_nats_subject_filters_in_log_order() -> None:
    clock = ManualClock()
    log = MemoryEventLog(clock)
    for i, subject in enumerate(["e.t.job.1", "e.t.cluster.1", "e.t.job.2", "e.u.job.1"]):
        await log.append(subject, [Append(JobSucceeded(job_id=str(i)), msg_id=str(i))])
    assert [r.subject for r in await log.read("e.*.job.*")] == ["e.t.job.1", "e.t.job.2", "e.u.job.1"]
    assert [r.seq for r in await log.read("e.t.>", start_seq=2, up_to_seq=3)] == [2, 3]
    assert [r.seq for r in await log.read_many(["e.u.>", "e.t.cluster.*"])] == [2, 4]
    seen: list[int] = []
    assert await log.replay("e.t.job.*", lambda r: seen.append(r.seq)) == 2 and seen == [1, 3]
    assert log.records[0].time == clock.now()
    assert matches("a.>", "a.b.c") and not matches("a.>", "a") and not matches("a.*", "a.b.c") and matches("a.*.c", "a.b.c")


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
