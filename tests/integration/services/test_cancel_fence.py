"""A cancel's fence on a real nats-server (docs/decisions/0046): a create whose tasks nobody
claims ends within seconds of its cancel (not at the 900 s attempt timeout); a provisioner that
starts afterwards takes the messages still in the work queue and runs none of them (the server
refuses its claims; it terminates each message); a claim that got in before the cancel runs to
its end and the rollback deletes what it made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from contracts import subjects
from contracts.commands import Accepted, CancelJob, CreateCluster
from contracts.events import JobRolledBack
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from services.provisioner.entrypoint import start_workers
from services.provisioner.plugins import PluginRegistry
from services.provisioner.worker import WorkerConfig, Workers
from services.solver.entrypoint import start_solver

from .conftest import Terminations, first_record, quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]


@dataclass
class Bus:
    """A planner and a solver, no provisioner until a test starts one (`provisioner`)."""

    url: str
    exit_stack: AsyncExitStack
    client: MusterClient
    store: EventStore
    nc: Any

    async def provisioner(self, **config: Any) -> Workers:
        nc = await connect(self.url, name="provisioner")
        self.exit_stack.push_async_callback(nc.close)
        registry = PluginRegistry.discover()
        self.exit_stack.push_async_callback(registry.aclose)
        return await start_workers(nc, self.exit_stack, registry, WorkerConfig(provisioner_id="prov-late", **config))


@pytest_asyncio.fixture
async def bus(fresh_nats: str) -> AsyncIterator[Bus]:
    async with AsyncExitStack() as exit_stack:
        ncs = []
        for name in ("planner", "solver", "client"):
            nc = await connect(fresh_nats, name=name)
            ncs.append(nc)
            exit_stack.push_async_callback(nc.close)
        await ensure_streams(ncs[0].jetstream())
        await start_planner(ncs[0], exit_stack, PlannerConfig(instance="planner-test"))  # attempt timeout: 900 s
        await start_solver(ncs[1], exit_stack, "solver-test")
        store = EventStore(ncs[2])
        catalog = quick_demo_catalog()
        sim = catalog.providers["sim"]
        catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "latency_ms_create": "1500-1500"}})
        await apply_catalog(store, "default", catalog)
        yield Bus(fresh_nats, exit_stack, MusterClient(ncs[2]), store, ncs[2])


async def _first(bus: Bus, subject: str, kind: str, timeout: float = 30) -> Any:
    """The first event of `kind` on `subject` (from the start of the log)."""
    return await first_record(bus.store, subject, lambda r: r.type == kind, timeout)


async def _job(bus: Bus, job_id: str) -> list[Any]:
    return await bus.store.read_many(subjects.job_history_filters("default", job_id))


async def test_a_cancelled_create_nobody_served_ends_at_once_and_a_later_provisioner_runs_none_of_it(bus: Bus) -> None:
    created = await bus.client.send("default", CreateCluster(name="alone", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    await _first(bus, subjects.job_tasks("default", created.job_id), "TaskQueued")

    assert isinstance(await bus.client.send("default", CancelJob(job_id=created.job_id)), Accepted)
    final = await bus.client.wait(created.job_id, timeout=30)  # not the 900 s of the attempts' timeout
    assert isinstance(final, JobRolledBack) and final.reason.startswith("cancelled by ")
    story = await _job(bus, created.job_id)
    queued = {r.event.task_id for r in story if r.type == "TaskQueued"}
    heads = {r.event.task_id for r in story if r.type == "TaskQueued" and r.event.after is None}
    ended = [r.event for r in story if r.type == "TaskAttemptFailed"]
    assert heads == {"n1000.create", "n1001.create"}  # two messages (with segments, each with its node's next tasks)
    assert {e.task_id for e in ended} == queued and {e.state for e in ended} == {"cancelled"}
    [closed] = [r for r in story if r.type == "ClaimsClosed"]
    assert closed.subject == subjects.claims_closed("default", created.job_id, 0)

    # A provisioner of the class starts now: the two messages are still in the work queue.
    terminated = Terminations()
    await terminated.start(bus.nc)
    workers = await bus.provisioner(capacity=4)
    await terminated.reach(2)
    assert workers.cancelled == 2 and workers.completed == 0
    story = await _job(bus, created.job_id)
    assert not [r for r in story if r.type in ("TaskClaimed", "TaskSucceeded", "TaskFailed")]
    assert (await bus.store.js.stream_info(subjects.TASKS_STREAM)).state.messages == 0  # out of the queue for good


async def test_a_claim_that_raced_the_cancel_runs_to_its_end_and_is_undone(bus: Bus) -> None:
    # One plugin slot, nothing claimed ahead: n1000's create is claimed and runs (1.5 s), n1001's waits unclaimed.
    workers = await bus.provisioner(capacity=1, claim_ahead=0)
    terminated = Terminations()
    await terminated.start(bus.nc)
    created = await bus.client.send("default", CreateCluster(name="raced", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted)
    claim = await _first(bus, subjects.job_task_outcomes("default", created.job_id), "TaskClaimed")
    raced = claim.event.task_id

    assert isinstance(await bus.client.send("default", CancelJob(job_id=created.job_id)), Accepted)
    final = await bus.client.wait(created.job_id, timeout=60)
    assert isinstance(final, JobRolledBack) and final.reason.startswith("cancelled by ")
    story = await _job(bus, created.job_id)
    [other] = {"n1000.create", "n1001.create"} - {raced}
    node = raced.split(".")[0]
    # Every attempt but the raced create (and the rollback's delete) ended unrun: the other create
    # and, with segments (docs/decisions/0058), both nodes' next tasks queued with the creates.
    unrun = {r.event.task_id for r in story if r.type == "TaskQueued"} - {raced, f"undo.{node}.delete"}
    assert other in unrun
    assert sorted((e.event.task_id, e.event.state) for e in story if e.type == "TaskAttemptFailed") == sorted(
        (t, "cancelled") for t in unrun)
    assert [r.event.task_id for r in story if r.type == "TaskCompleted"][0] == raced  # it ran to its end
    [rollback] = [r.event for r in story if r.type == "RollbackPlanned"]
    assert [t.id for t in rollback.tasks] == [f"undo.{node}.delete"]  # and what it made is deleted
    assert (f"undo.{node}.delete", "TaskCompleted") in {(r.event.task_id, r.type) for r in story if r.type == "TaskCompleted"}
    # The cancelled one was taken by the provisioner when its slot freed, and not run; a segment's
    # next step's claim after the raced create is refused too, and its message ends there.
    segment = any(r.type == "TaskQueued" and r.event.after == raced for r in story)
    await terminated.reach(1 + segment)
    assert workers.cancelled == 1 + segment
    assert {r.event.task_id for r in story if r.type == "TaskClaimed"} == {raced, f"undo.{node}.delete"}
