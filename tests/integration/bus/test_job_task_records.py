"""A job's task records on a subject of their own (docs/decisions/0033): every append of the job
is fenced on the job's own subject, so a stale owner is refused whichever of the two it writes
on; the consumers of job events (the tracker's index, the notifier) never receive a task record.
Against the in-memory log and JetStream."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

from contracts import subjects
from contracts.catalog import Action
from contracts.events import JobPlanned, JobRequested, PlannedTaskRecord, TaskCompleted
from contracts.layout import NodeSpec
from muster.bus.eventstore import EventStore
from muster.bus.repository import pending_appends, rebuild
from muster.ports.eventlog import ConcurrencyError, EventLog
from muster.ports.memory import MemoryEventLog
from services.notifier.routing import ROUTES as NOTIFIER_ROUTES
from services.planner import joblog
from services.planner.domain.job import Job, job_uuid
from services.tracker.routing import ROUTES as TRACKER_ROUTES

pytestmark = pytest.mark.nats
NODES = ("n1", "n2", "n3")


@pytest.fixture(params=["memory", "jetstream"])
def log(request: pytest.FixtureRequest) -> EventLog:
    return MemoryEventLog() if request.param == "memory" else EventStore(request.getfixturevalue("nc"))


async def _planned(log: EventLog, tenant: str) -> Job:
    job_id = str(job_uuid(tenant, "records"))
    job = Job(JobRequested(tenant=tenant, job_id=job_id, cluster_id="c", operation="create", request={}))
    tasks = [PlannedTaskRecord(id=f"{n}.create", node=n, action=Action.CREATE) for n in NODES]
    job.record_plan(JobPlanned(job_id=job_id, mode="eager", tasks=tasks, links=[], stages=[[t.id for t in tasks]],
                               nodes=[NodeSpec(id=n, hardwaretype="h", imagetype="i", services=[]) for n in NODES]))
    await joblog.append(log, job, pending_appends(job))
    return job


async def _copies(log: EventLog, job: Job, n: int) -> list[Job]:
    """`n` planners that read the job's log at the same moment."""
    history = await joblog.history(log, job.tenant, str(job.id))
    copies = [rebuild(Job, history) for _ in range(n)]
    assert all(c is not None for c in copies)
    return copies  # type: ignore[return-value]


async def test_a_stale_owners_task_records_are_refused_on_either_path(log: EventLog, tenant: str) -> None:
    job = await _planned(log, tenant)
    owner, stale, stale_chain = await _copies(log, job, 3)
    owner.queue("n1.create")
    await joblog.append(log, owner, pending_appends(owner))  # a marker on the job's subject, then the record
    stored = await joblog.history(log, tenant, str(job.id))
    assert [(r.type, r.subject) for r in stored[-2:]] == [
        ("TasksRecorded", subjects.job_events(tenant, str(job.id))), ("TaskQueued", subjects.job_tasks(tenant, str(job.id)))]

    stale.queue("n2.create")  # the same view, before the owner's append: its record is refused
    with pytest.raises(ConcurrencyError):
        await joblog.append(log, stale, pending_appends(stale))
    stale_chain.queue("n3.create")
    with pytest.raises(ConcurrencyError):
        await log.append_chain(joblog.chain_parts(stale_chain, pending_appends(stale_chain)))
    assert [r.seq for r in await joblog.history(log, tenant, str(job.id))] == [r.seq for r in stored]

    # The owner goes on (each append fenced on its marker or event before), and the log folds whole.
    owner.queue("n2.create")
    await joblog.append(log, owner, pending_appends(owner))
    owner.complete(TaskCompleted(job_id=str(job.id), task_id="n1.create", attempt=1, result={}))
    owner.pause("someone", "r1")
    await log.append_chain(parts := joblog.chain_parts(owner, pending := pending_appends(owner)))
    assert [type(a.event).__name__ for _, items, _ in parts for a in items] == ["TasksRecorded", "TaskCompleted", "JobPaused"]
    assert len(pending) == 2
    folded = rebuild(Job, await joblog.history(log, tenant, str(job.id)))
    assert folded is not None and folded.version == owner.version and folded.paused
    assert folded.task_state["n1.create"] == "succeeded" and folded.task_state["n2.create"] == "queued"


async def test_the_consumers_of_job_events_receive_no_task_records(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    job = await _planned(store, tenant)
    [owner] = await _copies(store, job, 1)
    for node in NODES:
        owner.queue(f"{node}.create")
    await joblog.append(store, owner, pending_appends(owner))
    for node in NODES:
        owner.complete(TaskCompleted(job_id=str(job.id), task_id=f"{node}.create", attempt=1, result={}))
    owner.succeed()
    await joblog.append(store, owner, pending_appends(owner))
    own = await store.read(subjects.job_events(tenant, str(job.id)))
    records = await store.read(subjects.job_tasks(tenant, str(job.id)))
    assert [r.type for r in own] == ["JobRequested", "JobPlanned", "TasksRecorded", "JobSucceeded"]
    assert len(records) == 2 * len(NODES)

    js = nc.jetstream()
    for route in (TRACKER_ROUTES[0], NOTIFIER_ROUTES[0]):
        # The route's own filters, narrowed to this test's tenant (the server is shared).
        assert route.filter == subjects.ALL_JOB_EVENTS
        filters = [f.replace("muster.evt.*.", f"muster.evt.{tenant}.", 1) for f in (route.filter, *route.also)]
        info = await js.add_consumer(subjects.EVENTS_STREAM, ConsumerConfig(
            durable_name=f"{tenant}-{route.durable}", filter_subjects=filters, ack_policy=AckPolicy.EXPLICIT))
        assert info.num_pending == len(own), (route.durable, info.num_pending)
