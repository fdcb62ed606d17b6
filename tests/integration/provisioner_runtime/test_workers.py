"""Workers on a real nats-server: redelivery after a dead worker, capacity, claims kept alive,
several tenants, avoid-on-retry."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from nats.aio.msg import Msg

from contracts import subjects
from muster.bus.wire import flush

from .conftest import DEADLINE_S, Bench, HeldExecutor, SlowExecutor

pytestmark = pytest.mark.nats


async def test_a_task_of_a_worker_that_dies_runs_again_on_another(bench: Bench) -> None:
    doomed, survivor = HeldExecutor(), HeldExecutor(hold=False)
    a_conn = await bench.connection("doomed")
    a = await bench.workers(doomed, "prov-a", nc=a_conn, ack_wait_s=1.0)
    await bench.publish("n1-install")
    await doomed.wait_started(1)

    # Now a second provisioner is there, and the first one's connection goes away mid-task.
    await bench.workers(survivor, "prov-b", ack_wait_s=1.0)
    await a_conn.close()
    await survivor.wait_started(1)

    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded", "n1-install")) == 1)
    claims = bench.log.of("TaskClaimed", "n1-install")
    assert [(c.provisioner, c.delivery) for c in claims] == [("prov-a", 1), ("prov-b", 2)]
    outcome = bench.log.of("TaskSucceeded", "n1-install")[0]
    assert outcome.provisioner == "prov-b" and outcome.result == {"ran": "n1-install"}
    assert bench.log.of("TaskFailed") == []
    assert a.completed == 0 and doomed.finished == []


async def test_capacity_bounds_the_tasks_in_flight(bench: Bench) -> None:
    held = HeldExecutor()
    w = await bench.workers(held, "prov-cap", capacity=3)
    for i in range(10):
        await bench.publish(f"n{i}-install")
    await held.wait_started(3)
    assert w.in_flight == 3

    held.release()
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 10)
    assert held.most == 3
    claims = bench.log.of("TaskClaimed")
    assert len(claims) == 10 and {c.delivery for c in claims} == {1}
    # Three plugins at most; once they return quickly, up to three more tasks are held (claimed
    # ahead, waiting for a slot), each in a numbered place of its own.
    assert {c.worker for c in claims} <= {f"prov-cap/w{k}" for k in range(6)}
    await asyncio.wait_for(w.idle.wait(), DEADLINE_S)  # the last ack is sent after the outcome
    assert w.completed == 10 and w.in_flight == 0


async def test_a_long_task_keeps_its_claim(bench: Bench) -> None:
    # The task takes three times the ack wait: in-progress acks keep it, so a second worker,
    # idle and waiting for work all along, never sees it.
    slow, idle = SlowExecutor(seconds=3.0), HeldExecutor(hold=False)
    await bench.workers(slow, "prov-slow", ack_wait_s=1.0)
    await bench.publish("n1-install")
    await bench.log.wait_for(lambda log: len(log.of("TaskClaimed")) == 1)
    await bench.workers(idle, "prov-idle", ack_wait_s=1.0)

    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)
    assert [(c.provisioner, c.delivery) for c in bench.log.of("TaskClaimed")] == [("prov-slow", 1)]
    assert idle.started == []


async def test_a_busy_tenant_does_not_starve_another(bench: Bench, tenant: str) -> None:
    other = f"{tenant}x"
    sub = await bench.log.start(bench.nc, other)
    bench.stack.push_async_callback(sub.unsubscribe)
    held = HeldExecutor()
    w = await bench.workers(held, "prov-mt", capacity=2, tenants=(tenant, other))
    await bench.publish("n1-install")
    await held.wait_started(1)

    # One slot left: the other tenant's task takes it now, not after a long poll elsewhere ends.
    await bench.publish("m1-install", tenant=other)
    await held.wait_started(2)
    assert {t.tenant for t in held.started} == {tenant, other}
    assert w.in_flight == 2

    # Full: a third task waits for a slot, then runs.
    await bench.publish("n2-install")
    held.release()
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 3)
    assert held.most == 2


async def test_a_provisioner_in_avoid_runs_the_task_when_nobody_else_does(bench: Bench) -> None:
    alone = HeldExecutor(hold=False)
    w = await bench.workers(alone, "prov-only", avoid_deliveries=2, avoid_delay_s=0.1)
    await bench.publish("n1-install", attempt=2, avoid=["prov-only"])

    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)
    claims = bench.log.of("TaskClaimed")
    assert [(c.provisioner, c.delivery) for c in claims] == [("prov-only", 3)]
    assert w.passed == 2


async def test_a_provisioner_in_avoid_leaves_the_task_to_another(bench: Bench) -> None:
    before, other = HeldExecutor(hold=False), HeldExecutor(hold=False)
    # It would let the task go a thousand times: only another provisioner can run it.
    await bench.workers(before, "prov-before", avoid_deliveries=1000, avoid_delay_s=0.05)
    await bench.workers(other, "prov-other")
    await bench.publish("n1-install", attempt=2, avoid=["prov-before"])

    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)
    assert [c.provisioner for c in bench.log.of("TaskClaimed")] == ["prov-other"]
    assert before.started == []


async def test_an_undecodable_task_is_dropped_and_the_worker_goes_on(bench: Bench) -> None:
    held = HeldExecutor(hold=False)
    conn = await bench.connection("prov-bad")
    w = await bench.workers(held, "prov-bad", nc=conn)
    taken = await _taken(bench, "ACK", "MSG_TERMINATED")
    await bench.nc.jetstream().publish(subjects.task_queue(bench.tenant, "default"), b'{"type": "Task", "v": 1}')
    await bench.publish("n1-install")
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)
    assert [t.task_id for t in held.started] == ["n1-install"]
    await asyncio.wait_for(w.idle.wait(), DEADLINE_S)
    # The server took the worker's term and ack (taken in the consumer's own loop: a consumer info
    # asked as soon as they were sent may not count them yet).
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in taken)), DEADLINE_S)
    info = await bench.nc.jetstream().consumer_info("TASKS", f"workers-{bench.tenant}-default")
    assert info.num_pending == 0 and info.num_ack_pending == 0


async def test_a_deleted_queue_is_declared_again(bench: Bench) -> None:
    held = HeldExecutor(hold=False)
    await bench.workers(held, "prov-redeclare")
    durable = f"workers-{bench.tenant}-default"
    await bench.nc.jetstream().delete_consumer("TASKS", durable)
    await bench.publish("n1-install")
    await bench.log.wait_for(lambda log: len(log.of("TaskSucceeded")) == 1)
    info = await bench.nc.jetstream().consumer_info("TASKS", durable)
    assert info.config.filter_subject == subjects.task_queue(bench.tenant, "default")


async def _taken(bench: Bench, *kinds: str) -> list[asyncio.Event]:
    """One event per kind, set when nats-server says it took a settlement of that kind from the
    workers' consumer: `ACK` (its sampled acks, every ack sampled from now on) or an advisory
    (`MSG_TERMINATED`)."""
    js = bench.nc.jetstream()
    durable = subjects.task_consumer(bench.tenant, "default")
    events = []
    for kind in kinds:
        seen = asyncio.Event()

        async def on(_msg: Msg, seen: asyncio.Event = seen) -> None:
            seen.set()
        where = "METRIC.CONSUMER.ACK" if kind == "ACK" else f"ADVISORY.CONSUMER.{kind}"
        await bench.nc.subscribe(f"$JS.EVENT.{where}.{subjects.TASKS_STREAM}.{durable}", cb=on)
        events.append(seen)
    await flush(bench.nc)
    info = await js.consumer_info(subjects.TASKS_STREAM, durable)
    await js.add_consumer(subjects.TASKS_STREAM, dataclasses.replace(info.config, sample_freq="100%"))
    return events
