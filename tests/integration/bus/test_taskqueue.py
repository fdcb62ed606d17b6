"""The task queue's pipelined publish (`NatsTaskQueue.publish_many`) against a real nats-server:
every message stored once, each message's own outcome reported."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from contracts import subjects
from contracts.catalog import Action
from contracts.tasks import NodeInfo, ProviderRef, TaskMessage
from muster.bus.taskqueue import NatsTaskQueue
from muster.bus.wire import flush
from muster.ports.eventlog import StoreError

pytestmark = pytest.mark.nats


def _task(tenant: str, i: int, attempt: int = 1) -> TaskMessage:
    return TaskMessage(
        tenant=tenant, cluster_id="c", job_id=f"j{tenant}", task_id=f"n{i}.install.s", attempt=attempt, action=Action.INSTALL,
        node=NodeInfo(id=f"n{i}", hostname=f"n{i}.x", nodenum=i, hardwaretype="small", imagetype="u"),
        provider=ProviderRef(name="sim", providertype="simulated"),
    )


async def _stored(nc: Client, tenant: str) -> int:
    subject = subjects.task_queue(tenant, "default")
    info = await nc.jetstream().stream_info(subjects.TASKS_STREAM, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def test_many_tasks_beyond_the_window_are_each_stored_once(nc: Client, tenant: str) -> None:
    queue = NatsTaskQueue(nc.jetstream(), window=16)
    messages = [_task(tenant, i) for i in range(300)]
    assert await queue.publish_many(messages) == [None] * 300
    assert await _stored(nc, tenant) == 300
    # Published again (a restarted planner): acknowledged as duplicates, stored once.
    again = messages[:40] + [_task(tenant, 0, attempt=2)]
    assert await queue.publish_many(again) == [None] * 41
    assert await _stored(nc, tenant) == 301
    assert queue.in_flight == 0


async def test_concurrent_calls_share_the_window(nc: Client, tenant: str) -> None:
    queue = NatsTaskQueue(nc.jetstream(), window=16)
    calls = [[_task(tenant, i) for i in range(k * 200, (k + 1) * 200)] for k in range(3)]
    outcomes = await asyncio.gather(*(queue.publish_many(messages) for messages in calls))
    assert outcomes == [[None] * 200] * 3
    assert await _stored(nc, tenant) == 600 and queue.in_flight == 0


async def test_each_message_gets_its_own_outcome(nc: Client, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tasks of the tenant "lost" go to a subject no stream takes: the server answers those
    # with a status (no responders); the others are stored.
    lost = f"{tenant}x"
    real = subjects.task_queue
    monkeypatch.setattr(subjects, "task_queue", lambda t, c: f"nostream.{t}" if t == lost else real(t, c))
    queue = NatsTaskQueue(nc.jetstream(), window=4)
    messages = [_task(lost if i % 3 == 0 else tenant, i) for i in range(12)]
    outcomes = await queue.publish_many(messages)
    assert [type(o) for o in outcomes] == [StoreError if i % 3 == 0 else type(None) for i in range(12)]
    assert await _stored(nc, tenant) == 8


async def test_messages_nobody_acknowledges_fail_after_the_timeout(nc: Client, tenant: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    silent = f"{tenant}s"
    real = subjects.task_queue
    monkeypatch.setattr(subjects, "task_queue", lambda t, c: f"silent.{t}" if t == silent else real(t, c))
    sub = await nc.subscribe(f"silent.{silent}")  # a responder that never answers
    try:
        queue = NatsTaskQueue(nc.jetstream(), window=8, timeout=1.0)
        messages = [_task(tenant, i) for i in range(5)] + [_task(silent, 5)] + [_task(tenant, i) for i in range(6, 20)]
        outcomes = await queue.publish_many(messages)
        assert isinstance(outcomes[5], TimeoutError)
        assert outcomes[:5] + outcomes[6:] == [None] * 19
        assert queue.in_flight == 0  # nothing left waiting for an answer that will not come
        assert await queue.publish_many([_task(tenant, 30)]) == [None]  # the queue still works
    finally:
        await sub.unsubscribe()


async def test_a_call_cancelled_midway_leaves_nothing_in_the_window(nc: Client, tenant: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = subjects.task_queue
    monkeypatch.setattr(subjects, "task_queue", lambda t, c: f"silent.{t}" if t == tenant else real(t, c))
    sub = await nc.subscribe(f"silent.{tenant}")  # nobody answers: the call waits
    try:
        queue = NatsTaskQueue(nc.jetstream(), window=4, timeout=30.0)
        call = asyncio.ensure_future(queue.publish_many([_task(tenant, i) for i in range(10)]))
        done, _ = await asyncio.wait([call], timeout=1.0)  # (it cannot finish: nobody answers)
        assert not done and queue.in_flight > 0
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert queue.in_flight == 0
    finally:
        await sub.unsubscribe()


async def test_a_wave_goes_as_atomic_batches_one_answer_each_and_a_repeat_goes_one_by_one(nc: Client, tenant: str) -> None:
    asked: list[bool] = []  # per message published: whether it asks for an answer

    async def on_task(msg: Msg) -> None:
        asked.append(bool(msg.reply))

    sub = await nc.subscribe(subjects.task_queue(tenant, "default"), cb=on_task)
    queue = NatsTaskQueue(nc.jetstream())
    messages = [_task(tenant, i) for i in range(1500)]
    assert await queue.publish_many(messages) == [None] * 1500
    assert await _stored(nc, tenant) == 1500
    # Published again with one new attempt: the batch holding repeats is refused, and each
    # message goes alone (repeats acknowledged, the new one stored).
    assert await queue.publish_many(messages[:20] + [_task(tenant, 0, attempt=2)]) == [None] * 21
    assert await _stored(nc, tenant) == 1501 and queue.in_flight == 0
    await flush(nc)
    await sub.unsubscribe()
    assert len(asked) == 1500 + 21 + 21 and sum(asked[:1500]) == 2  # two batches of the wave: two answers
    assert all(asked[-21:])  # then one by one
