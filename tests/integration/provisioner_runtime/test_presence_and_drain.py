"""Registration, presence (appears, refreshes, expires when the process dies, leaves on a clean
stop) and drain (on request: finishes what runs, takes nothing new, leaves)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import replace

import pytest

from contracts import subjects
from contracts.tasks import HeldAttempts, ProvisionerInfo, TaskMessage, TaskOutcome
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from services.planner.adapters import ALL, NatsWorkers
from services.provisioner.app import request_drain
from services.provisioner.presence import KV_STREAM, PresenceWatch, live_provisioners, wait_gone
from services.provisioner.routing import drain_subject

from .conftest import DEADLINE_S, Bench, HeldExecutor, LogWatch

pytestmark = pytest.mark.nats


async def test_a_provisioner_registers_and_is_listed(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    await bench.provisioner(HeldExecutor(), pid, capacity=4, provisioner_class="default")

    live = await live_provisioners(bench.nc, tenant=tenant)
    assert [p.info.id for p in live] == [pid]
    record = live[0]
    assert record.info.capacity == 4 and record.info.tenants == [tenant]
    assert record.info.plugins == [{"name": "held", "type": "automator", "version": "0.1"}]
    assert record.in_flight == 0 and not record.draining
    assert await live_provisioners(bench.nc, tenant=f"{tenant}-other") == []
    assert await live_provisioners(bench.nc, tenant=tenant, provisioner_class="gpu") == []

    await bench.log.wait_for(lambda log: len(log.of("ProvisionerRegistered")) == 1)
    registered = bench.log.of("ProvisionerRegistered")[0]
    assert registered.provisioner == record.info


async def test_presence_expires_when_the_provisioner_dies(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    changes: list[tuple[str, str]] = []
    async with PresenceWatch(bench.nc.jetstream(), on_change=lambda i, _, c: changes.append((i, c))) as view:
        p = await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=2)
        await view.wait_until(lambda live: pid in live, DEADLINE_S)

        await p.abort()  # no deregistration: only the TTL tells
        await view.wait_until(lambda live: pid not in live, DEADLINE_S)
    mine = [c for i, c in changes if i == pid]
    assert mine[-1] == "expired" and set(mine[:-1]) == {"seen"}
    assert pid not in [r.info.id for r in await live_provisioners(bench.nc)]
    assert bench.log.of("ProvisionerDeregistered") == []


async def test_a_live_provisioner_refreshes_its_presence(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    refreshed: list[str] = []
    async with PresenceWatch(bench.nc.jetstream(), on_change=lambda i, _, c: refreshed.append(c) if i == pid else None) as view:
        await bench.provisioner(HeldExecutor(), pid, presence_ttl_s=2)
        # Three refreshes (every ttl/3) span a whole TTL: still there.
        await view.wait_until(lambda live: refreshed.count("seen") >= 4, DEADLINE_S)
        assert pid in view.live and "expired" not in refreshed


async def test_a_clean_stop_deregisters(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    p = await bench.provisioner(HeldExecutor(), pid)
    gone = asyncio.create_task(wait_gone(bench.nc.jetstream(), pid, DEADLINE_S))
    await p.stop()
    assert await gone == "left"
    await bench.log.wait_for(lambda log: len(log.of("ProvisionerDeregistered")) == 1)
    left = bench.log.of("ProvisionerDeregistered")[0]
    assert (left.provisioner_id, left.reason, left.session) == (pid, "stopped", p.info.session)
    assert pid not in [r.info.id for r in await live_provisioners(bench.nc)]


async def test_drain_finishes_in_flight_work_and_takes_nothing_new(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    held, other = HeldExecutor(), HeldExecutor(hold=False)
    drained = asyncio.Event()
    p = await bench.provisioner(held, pid, capacity=4)
    p.on_drained = drained.set
    await bench.publish("n1-install")
    await bench.publish("n2-install")
    await held.wait_started(2)

    answer = await request_drain(bench.nc, pid)
    assert answer == {"provisioner": pid, "draining": True, "already": False, "in_flight": 2}
    assert (await request_drain(bench.nc, pid))["already"] is True
    [record] = await live_provisioners(bench.nc, tenant=tenant)
    assert record.draining and record.in_flight == 2

    # A task published now goes to another provisioner, at once; the draining one, with two
    # free slots, takes nothing.
    await bench.workers(other, f"q-{tenant}")
    await bench.publish("n3-install")
    await other.wait_started(1)
    assert [t.task_id for t in other.started] == ["n3-install"]
    assert not p.finished.is_set()

    held.release()
    await asyncio.wait_for(p.finished.wait(), DEADLINE_S)
    assert drained.is_set()
    assert sorted(t.task_id for t in held.finished) == ["n1-install", "n2-install"]
    await bench.log.wait_for(lambda log: len(log.of("ProvisionerDeregistered")) == 1)
    left = bench.log.of("ProvisionerDeregistered")[0]
    assert (left.reason, left.completed) == ("drained", 2)
    by = {e.task_id: e.provisioner for e in bench.log.of("TaskSucceeded")}
    assert by == {"n1-install": pid, "n2-install": pid, "n3-install": f"q-{tenant}"}
    assert await live_provisioners(bench.nc, tenant=tenant) == []

    # Gone: nobody answers on its drain subject.
    with pytest.raises(LookupError, match=drain_subject(pid).replace(".", r"\.")):
        await request_drain(bench.nc, pid)


async def test_drain_of_an_idle_provisioner_leaves_at_once(bench: Bench, tenant: str) -> None:
    pid = f"p-{tenant}"
    p = await bench.provisioner(HeldExecutor(), pid)
    await request_drain(bench.nc, pid)
    await asyncio.wait_for(p.finished.wait(), DEADLINE_S)
    assert await live_provisioners(bench.nc, tenant=tenant) == []


async def test_nobody_is_listed_before_any_provisioner_ever_registered(fresh_nats: str) -> None:
    nc = await connect(fresh_nats, name="test")
    try:
        assert await live_provisioners(nc) == []
    finally:
        await nc.close()


async def test_a_provisioner_says_which_attempts_it_holds(bench: Bench, tenant: str) -> None:
    """What a planner asks every live provisioner after the task queue was lost (decision 13):
    the attempts running there, and none once their outcomes are stored."""
    pid = f"p-{tenant}"
    executor = HeldExecutor()
    p = await bench.provisioner(executor, pid, capacity=2, claim_ahead=0)
    asked = NatsWorkers(bench.nc)
    tasks = [await bench.publish(f"n{i}-install") for i in (1, 2)]
    await executor.wait_started(2)
    keys = {f"{t.job_id}.{t.task_id}.{t.attempt}" for t in tasks}
    reply = await bench.nc.request(subjects.provisioner_held(pid), b"", timeout=DEADLINE_S)
    assert HeldAttempts.model_validate_json(reply.data) == HeldAttempts(provisioner=pid, attempts=sorted(keys))
    held = await asked.holding()
    assert held is not None and keys <= held  # the planner's adapter asks every live provisioner
    executor.release()
    await asyncio.wait_for(p.workers.idle.wait(), DEADLINE_S)  # both outcomes stored and acked
    reply = await bench.nc.request(subjects.provisioner_held(pid), b"", timeout=DEADLINE_S)
    assert HeldAttempts.model_validate_json(reply.data).attempts == []


async def test_a_retry_may_go_elsewhere_while_a_live_provisioner_has_not_tried_the_task(bench: Bench, tenant: str) -> None:
    """What a provisioner that lacks a task's secret asks (decision 0039): another live one of
    the tenant and class that is not in the task's `avoid`, and is not draining, may have it."""
    from services.provisioner.plugins.testing import make_task
    from services.provisioner.presence import untried_elsewhere

    task = make_task("install", service="svc", tenant=tenant)
    await bench.provisioner(HeldExecutor(), f"a-{tenant}", provisioner_class="default")
    assert not await untried_elsewhere(bench.nc, f"a-{tenant}", task)  # alone
    assert not await untried_elsewhere(bench.nc, f"a-{tenant}", task.model_copy(update={"tenant": f"{tenant}-x"}))
    b = await bench.provisioner(HeldExecutor(), f"b-{tenant}", provisioner_class="default")
    await bench.provisioner(HeldExecutor(), f"gpu-{tenant}", provisioner_class="gpu")  # (another class: never)
    assert await untried_elsewhere(bench.nc, f"a-{tenant}", task)
    assert not await untried_elsewhere(bench.nc, f"a-{tenant}", task.model_copy(update={"avoid": [f"b-{tenant}"]}))
    await b.drain()
    assert not await untried_elsewhere(bench.nc, f"a-{tenant}", task)


async def test_a_provisioner_that_cannot_renew_its_presence_stops_its_forward_attempts(fresh_nats: str, tenant: str) -> None:
    # Decision 54: once its record may have expired, a planner may count what it claimed as lost
    # (its job cancelled), so it must not run it on. A server of its own: the bucket is broken.
    async with AsyncExitStack() as stack:
        nc = await connect(fresh_nats, name="test")
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        log = LogWatch()
        sub = await log.start(nc, tenant)
        stack.push_async_callback(sub.unsubscribe)
        bench = Bench(fresh_nats, tenant, stack, log, nc)
        held = StoppableExecutor()
        p = await bench.provisioner(held, f"p-{tenant}", presence_ttl_s=2, ack_wait_s=30.0)
        fence = subjects.claims_closed(tenant, "j1", 0)
        task = await bench.publish("n1.install", fence=fence)
        await held.wait_started(1)

        # Every presence write refused from now on (as when the bus is out of reach): messages
        # larger than the bucket's stream takes.
        js = nc.jetstream()
        config = (await js.stream_info(KV_STREAM)).config
        await js.update_stream(replace(config, max_msg_size=1))
        # Within the TTL the plugin is stopped and the delivery given back; taken again, it is not
        # claimed (nor run) while the lease has lapsed.
        await asyncio.wait_for(held.stopped.wait(), DEADLINE_S)
        assert held.running == 0 and held.finished == [] and len(held.started) == 1
        assert p.workers.lapsed == 1 and log.of("TaskSucceeded") == []

        # The bucket takes writes again: a new term, and the task (claimed in it) runs.
        await js.update_stream(replace(config, max_msg_size=-1))
        await held.wait_started(2)
        held.release()
        await log.wait_for(lambda log: len(log.of("TaskSucceeded", task.task_id)) == 1)
        # Two claims: the stopped run's, and the one made in the new term.
        assert [c.delivery for c in log.of("TaskClaimed", task.task_id)][0] == 1 and len(log.of("TaskClaimed")) == 2


class StoppableExecutor(HeldExecutor):
    """`HeldExecutor`, and `stopped` set when a run is stopped from outside (cancelled)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stopped = asyncio.Event()

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        try:
            return await super().execute(task)
        except asyncio.CancelledError:
            self.stopped.set()
            raise


async def test_the_planner_counts_gone_only_registered_provisioners_whose_presence_ended(bench: Bench, tenant: str) -> None:
    # Decision 54: gone = the bucket's leader holds no record, and it registered (so it keeps a
    # lease); all its claims are then of a process that stopped.
    workers = NatsWorkers(bench.nc, log_=EventStore(bench.nc))
    live, dead, left = f"live-{tenant}", f"dead-{tenant}", f"left-{tenant}"
    await bench.provisioner(HeldExecutor(), live, presence_ttl_s=15)
    victim = await bench.provisioner(HeldExecutor(), dead, presence_ttl_s=1)
    leaving = await bench.provisioner(HeldExecutor(), left)
    await bench.workers(HeldExecutor(), f"bare-{tenant}")  # no registration, no presence: not known to be gone
    everyone = {live, dead, left, f"bare-{tenant}", f"never-{tenant}"}
    nothing = dict.fromkeys(everyone, 0)
    assert await workers.ended(tenant, everyone) == nothing  # (the bare one and the unknown one: never registered)

    async with PresenceWatch(bench.nc.jetstream()) as view:
        await victim.abort()  # dies: only its TTL tells
        await leaving.stop()  # leaves cleanly: its record deleted
        await view.wait_until(lambda now: dead not in now and left not in now, DEADLINE_S)
    # This planner watches no presence: a record found gone counts a TTL of each session the id
    # registered after it was first found so (decision 54, amended in session 27), and it is
    # asked again then (`on_settled`).
    settled: dict[str, asyncio.Event] = {dead: asyncio.Event(), left: asyncio.Event()}
    workers.sessions.on_settled = lambda pid: settled[pid].set() if pid in settled else None
    first = await workers.ended(tenant, everyone)
    assert {pid: n for pid, n in first.items() if pid not in settled} == {k: v for k, v in nothing.items() if k not in settled}
    for pid in settled:
        if first[pid] != ALL:
            await asyncio.wait_for(settled[pid].wait(), DEADLINE_S)
    assert await workers.ended(tenant, everyone) == {**nothing, dead: ALL, left: ALL}
    assert await workers.ended(f"{tenant}-other", everyone) == nothing  # (registered on another tenant's log only)


async def test_a_process_started_again_under_the_same_id_takes_the_record_over_and_the_first_stops(
        bench: Bench, tenant: str) -> None:
    # Decision 54: the earlier session, if it lives on (cut off, then back), renews the record no
    # more, so its lease lapses and its forward attempts stop; and it never deletes the new one's.
    pid = f"p-{tenant}"
    first_runs, second_runs = StoppableExecutor(), HeldExecutor()
    first = await bench.provisioner(first_runs, pid, presence_ttl_s=2, ack_wait_s=3.0)
    told: list[ProvisionerInfo] = []
    first.presence.on_replaced = told.append  # (the process exits on it: tests/e2e/test_supervisor.py)
    task = await bench.publish("n1.install", fence=subjects.claims_closed(tenant, "j1", 0))
    await first_runs.wait_started(1)

    second = await bench.provisioner(second_runs, pid, presence_ttl_s=2, ack_wait_s=3.0)
    await asyncio.wait_for(first_runs.stopped.wait(), DEADLINE_S)
    assert first.presence.replaced and not second.presence.replaced
    assert [info.session for info in told] == [second.info.session]
    await second_runs.wait_started(1)  # the message came back, and the live one took it
    second_runs.release()
    await bench.log.wait_for(lambda log: [e.provisioner for e in log.of("TaskSucceeded", task.task_id)] == [pid])

    await first.stop()
    [record] = [p for p in await live_provisioners(bench.nc, tenant=tenant)]
    assert record.info.session == second.info.session  # its record stays
