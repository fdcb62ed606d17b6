"""The log's promises, against a real nats-server; the ones the port promises (fencing,
idempotency keys, whole batches, reads up to a sequence) also against the in-memory fake, so
the service layers' unit tests stand on the same guarantees."""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.catalog import Action
from contracts.events import ClusterRequested, JobRequested, TaskQueued
from muster.bus.eventstore import Append, ConcurrencyError, EventStore
from muster.bus.repository import Repository, log_seq
from muster.ports.memory import MemoryEventLog
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job, job_uuid

pytestmark = pytest.mark.nats


@pytest.fixture(params=["jetstream", "memory"])
def log(request: pytest.FixtureRequest) -> Any:
    """The event log port: the JetStream adapter, or the in-memory fake."""
    return EventStore(request.getfixturevalue("nc")) if request.param == "jetstream" else MemoryEventLog()


def _requested(tenant: str, job_id: str) -> JobRequested:
    return JobRequested(tenant=tenant, job_id=job_id, cluster_id="c1", operation="create", request={"nodes": 3})


async def test_stale_writer_is_refused(log: Any, tenant: str) -> None:
    store = log
    repo = Repository(store)
    job_id = str(job_uuid(tenant, None))
    subject = subjects.job_events(tenant, job_id)
    await repo.save(Job(_requested(tenant, job_id)), subject)

    first = await repo.load(Job, subject)
    second = await repo.load(Job, subject)
    assert first is not None and second is not None
    first.fail("first writer")
    await repo.save(first, subject)
    second.fail("stale writer")
    with pytest.raises(ConcurrencyError):
        await repo.save(second, subject)

    events = await store.read(subject)
    assert [r.type for r in events] == ["JobRequested", "JobFailed"]
    assert events[-1].event.reason == "first writer"


async def test_duplicate_publish_is_appended_once(log: Any, tenant: str) -> None:
    store = log
    subject = subjects.job_events(tenant, "j1")
    item = Append(_requested(tenant, "j1"), msg_id=f"{tenant}:j1:1", aggregate_id="j1", version=1)
    first = await store.append(subject, [item], expect_last_seq=0)
    # A retry of the same append (e.g. the ack was lost): same key, same expectation.
    again = await store.append(subject, [item], expect_last_seq=0)
    assert again == first
    assert len(await store.read(subject)) == 1


async def test_duplicate_batch_is_appended_once_and_batches_are_atomic(log: Any, tenant: str) -> None:
    store = log
    subject = subjects.job_events(tenant, "j2")
    batch = [
        Append(TaskQueued(job_id="j2", task_id=f"t{i}", attempt=1, node="n1", action=Action.CREATE), msg_id=f"{tenant}:j2:{i}")
        for i in range(3)
    ]
    seqs = await store.append(subject, batch, expect_last_seq=0)
    assert len(seqs) == 3 and seqs == list(range(seqs[0], seqs[0] + 3))
    assert await store.append(subject, batch, expect_last_seq=0) == seqs
    stale = [Append(TaskQueued(job_id="j2", task_id=f"x{i}", attempt=1, node="n1", action=Action.CREATE), msg_id=f"{tenant}:x{i}") for i in range(2)]
    with pytest.raises(ConcurrencyError):
        await store.append(subject, stale, expect_last_seq=0)
    assert [r.event.task_id for r in await store.read(subject)] == ["t0", "t1", "t2"]


async def test_aggregate_rebuilt_from_the_log_equals_the_saved_one(log: Any, tenant: str) -> None:
    repo = Repository(log)
    cluster = Cluster(ClusterRequested(tenant=tenant, cluster_id="00000000-0000-4000-8000-000000000001", name="c",
                                       template="t", provider="p", config={"a": {"b": 1}}, job_id="j"))
    cluster.record_results("n1", "n1.create", {"providerid": "p-1"}, {"access_v4": "10.0.0.1"}, "h1")
    cluster.record_results("n1", "n1.confirm", {"ssh_host_keys": {"ed25519": "k"}}, {}, "")
    cluster.set_status("active", "j")
    subject = subjects.cluster_events(tenant, str(cluster.id))
    await repo.save(cluster, subject)

    rebuilt = await repo.load(Cluster, subject)
    assert rebuilt is not None
    assert rebuilt.__dict__ == cluster.__dict__
    assert rebuilt.version == 4 and log_seq(rebuilt) == log_seq(cluster)
    assert rebuilt.results["n1"] == {"providerid": "p-1", "ssh_host_keys": {"ed25519": "k"}}


async def test_the_events_stream_cannot_be_purged_or_have_messages_deleted(nc: Client, tenant: str) -> None:
    from nats.js.errors import APIError

    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.config.deny_delete and info.config.deny_purge and info.config.max_age in (0, None)
    seq = (await EventStore(nc).append(subjects.job_events(tenant, "j3"), [Append(_requested(tenant, "j3"), msg_id=f"{tenant}-j3")]))[0]
    with pytest.raises(APIError):
        await js.delete_msg(subjects.EVENTS_STREAM, seq)
    with pytest.raises(APIError):
        await js.purge_stream(subjects.EVENTS_STREAM)


async def test_read_up_to_a_sequence_stops_there(log: Any, tenant: str) -> None:
    store = log
    subject = subjects.job_events(tenant, "j4")
    seqs = [
        (await store.append(subject, [Append(_requested(tenant, "j4"), msg_id=f"{tenant}-j4-{i}")]))[0] for i in range(4)
    ]
    assert [r.seq for r in await store.read(subject, up_to_seq=seqs[1])] == seqs[:2]
    assert [r.seq for r in await store.read(subject)] == seqs


async def test_a_named_writer_is_on_every_event_it_appends(nc: Client, tenant: str) -> None:
    """The log says which planner wrote what (`Muster-Writer`): fencing is checked from it."""
    from contracts.records import H_WRITER

    subject = subjects.job_events(tenant, "j5")
    one = Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-1", aggregate_id="j5", version=1)
    two = [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-{i}") for i in (2, 3)]
    seqs = await EventStore(nc, writer_name="planner-7").append(subject, [one], expect_last_seq=0)
    seqs += await EventStore(nc, writer_name="planner-8").append(subject, two)  # an atomic batch
    seqs += (await EventStore(nc, writer_name="planner-9").append_chain(
        [(subject, [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-5")], seqs[-1])]))[0]
    seqs += await EventStore(nc).append(subject, [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-4")])
    js = nc.jetstream()
    writers = [(await js.get_msg(subjects.EVENTS_STREAM, seq)).headers or {} for seq in seqs]
    assert [h.get(H_WRITER) for h in writers] == ["planner-7", "planner-8", "planner-8", "planner-9", None]
    assert [r.seq for r in await EventStore(nc).read(subject)] == seqs  # and the events read as before
