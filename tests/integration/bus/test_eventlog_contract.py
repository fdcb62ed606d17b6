"""The event log port's contract (`muster.ports.eventlog`), one suite for every implementation:
the in-memory fake the service layers' unit tests stand on, and JetStream with group commit on
(as shipped) and off. Fencing, idempotency keys, whole batches, chains, submits, reads and
replays; what only JetStream can show is in test_publisher.py and test_grouped.py."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.catalog import Action
from contracts.events import ClusterRequested, JobPaused, JobRequested, TaskClaimed, TaskQueued
from muster.bus.eventstore import EventStore
from muster.bus.repository import Repository, log_seq
from muster.ports.eventlog import Append, ConcurrencyError, EventLog, Recorded
from muster.ports.memory import MemoryEventLog
from services.planner.domain.cluster import Cluster
from services.planner.domain.job import Job, job_uuid

pytestmark = pytest.mark.nats


@pytest.fixture(params=["memory", "jetstream", "jetstream-singles", "jetstream-unlinked"])
def log(request: pytest.FixtureRequest) -> EventLog:
    """The event log port: the in-memory fake, or the JetStream adapter (group commit on, as
    shipped, or off; chains linked, as on one replica, or not, as on a replicated stream)."""
    if request.param == "memory":
        return MemoryEventLog()
    return EventStore(request.getfixturevalue("nc"), group_commit=request.param != "jetstream-singles",
                      linked_chains=request.param != "jetstream-unlinked")


def _requested(tenant: str, job_id: str) -> JobRequested:
    return JobRequested(tenant=tenant, job_id=job_id, cluster_id="c1", operation="create", request={"nodes": 3})


def _ev(tenant: str, i: int) -> Append:
    return Append(TaskClaimed(job_id="j", task_id=f"t{i}", attempt=1, provisioner="p", worker=f"p/w{i}"), msg_id=f"{tenant}.c{i}")


def _ids(records: list[Recorded]) -> list[str]:
    return [r.event.task_id for r in records]


# -- appends ---------------------------------------------------------------------------------


async def test_stale_writer_is_refused(log: EventLog, tenant: str) -> None:
    repo = Repository(log)
    job_id = str(job_uuid(tenant, None))
    subject = subjects.job_events(tenant, job_id)
    await repo.save(Job(_requested(tenant, job_id)), subject)
    first, second = await repo.load(Job, subject), await repo.load(Job, subject)
    assert first is not None and second is not None
    first.fail("first writer")
    await repo.save(first, subject)
    second.fail("stale writer")
    with pytest.raises(ConcurrencyError):
        await repo.save(second, subject)
    events = await log.read(subject)
    assert [r.type for r in events] == ["JobRequested", "JobFailed"] and events[-1].event.reason == "first writer"


async def test_duplicate_publish_is_appended_once(log: EventLog, tenant: str) -> None:
    subject = subjects.job_events(tenant, "j1")
    item = Append(_requested(tenant, "j1"), msg_id=f"{tenant}:j1:1", aggregate_id="j1", version=1)
    first = await log.append(subject, [item], expect_last_seq=0)
    # A retry of the same append (e.g. the ack was lost): same key, same expectation.
    assert await log.append(subject, [item], expect_last_seq=0) == first
    assert await log.append(subjects.job_events(tenant, "other"), [item]) == first  # the key, wherever it goes
    assert len(await log.read(subject)) == 1 and await log.last_seq(subjects.job_events(tenant, "other")) == 0


async def test_duplicate_batch_is_appended_once_and_batches_are_atomic(log: EventLog, tenant: str) -> None:
    subject = subjects.job_events(tenant, "j2")
    batch = [Append(TaskQueued(job_id="j2", task_id=f"t{i}", attempt=1, node="n1", action=Action.CREATE),
                    msg_id=f"{tenant}:j2:{i}") for i in range(3)]
    seqs = await log.append(subject, batch, expect_last_seq=0)
    assert seqs == list(range(seqs[0], seqs[0] + 3))
    assert await log.append(subject, batch, expect_last_seq=0) == seqs
    stale = [Append(TaskQueued(job_id="j2", task_id=f"x{i}", attempt=1, node="n1", action=Action.CREATE),
                    msg_id=f"{tenant}:x{i}") for i in range(2)]
    with pytest.raises(ConcurrencyError):
        await log.append(subject, stale, expect_last_seq=0)
    with pytest.raises(ConcurrencyError):  # a key stored before, in a batch that is not its retry
        await log.append(subject, [stale[0], batch[0]], expect_last_seq=seqs[-1])
    assert _ids(await log.read(subject)) == ["t0", "t1", "t2"]


async def test_aggregate_rebuilt_from_the_log_equals_the_saved_one(log: EventLog, tenant: str) -> None:
    repo = Repository(log)
    cluster = Cluster(ClusterRequested(tenant=tenant, cluster_id="00000000-0000-4000-8000-000000000001", name="c",
                                       template="t", provider="p", config={"a": {"b": 1}}, job_id="j"))
    cluster.record_results("n1", "n1.create", {"providerid": "p-1"}, {"access_v4": "10.0.0.1"}, "h1")
    cluster.record_results("n1", "n1.confirm", {"ssh_host_keys": {"ed25519": "k"}}, {}, "")
    cluster.set_status("active", "j")
    subject = subjects.cluster_events(tenant, str(cluster.id))
    await repo.save(cluster, subject)
    rebuilt = await repo.load(Cluster, subject)
    assert rebuilt is not None and rebuilt.__dict__ == cluster.__dict__
    assert rebuilt.version == 4 and log_seq(rebuilt) == log_seq(cluster)


# -- chains ----------------------------------------------------------------------------------


async def test_a_chain_lands_in_order_fenced_per_subject(log: EventLog, tenant: str) -> None:
    a, b = f"muster.evt.{tenant}.cluster.a", f"muster.evt.{tenant}.job.b"
    [first] = await log.append(b, [_ev(tenant, 0)])
    [sa, sb] = await log.append_chain([(a, [_ev(tenant, 1)], 0), (b, [_ev(tenant, 2), _ev(tenant, 3)], first)])
    assert sb[0] > sa[0] and sb[1] > sb[0]
    assert _ids(await log.read(b)) == ["t0", "t2", "t3"] and [r.seq for r in await log.read(a)] == sa
    assert await log.append_chain([]) == [] and await log.append_chain([(a, [], None)]) == [[]]


async def test_a_stale_first_fence_stores_nothing(log: EventLog, tenant: str) -> None:
    a = f"muster.evt.{tenant}.job.a"
    await log.append(a, [_ev(tenant, 0)])
    with pytest.raises(ConcurrencyError):
        await log.append_chain([(a, [_ev(tenant, 1), _ev(tenant, 2)], 0)])  # it is not empty
    assert _ids(await log.read(a)) == ["t0"]


async def test_a_refusal_in_the_middle_leaves_the_prefix_and_nothing_after(log: EventLog, tenant: str) -> None:
    a, b, c = (f"muster.evt.{tenant}.job.{x}" for x in "abc")
    await log.append(b, [_ev(tenant, 0)])
    with pytest.raises(ConcurrencyError):
        await log.append_chain([(a, [_ev(tenant, 1)], 0), (b, [_ev(tenant, 2)], 0), (c, [_ev(tenant, 3)], None)])
    assert _ids(await log.read(f"muster.evt.{tenant}.job.*")) == ["t0", "t1"]


async def test_a_repeated_chain_is_stored_once(log: EventLog, tenant: str) -> None:
    """A chain sent again after a lost ack: stored once. A single event is known as the repeat
    it is; a longer chain is refused as stale, and its writer reloads as after any refusal."""
    a, b = f"muster.evt.{tenant}.job.a", f"muster.evt.{tenant}.job.b"
    [one] = await log.append_chain([(a, [_ev(tenant, 1)], 0)])
    assert await log.append_chain([(a, [_ev(tenant, 1)], 0)]) == [one]
    await log.append_chain([(b, [_ev(tenant, 2), _ev(tenant, 3)], 0)])
    with pytest.raises(ConcurrencyError):
        await log.append_chain([(b, [_ev(tenant, 2), _ev(tenant, 3)], 0)])
    assert len(await log.read(a)) == 1 and len(await log.read(b)) == 2


async def test_chains_at_once_each_get_their_own_sequences(log: EventLog, tenant: str) -> None:
    subs = [f"muster.evt.{tenant}.job.s{i}" for i in range(10)]
    got = await asyncio.gather(*(log.append_chain([(s, [_ev(tenant, 2 * i), _ev(tenant, 2 * i + 1)], 0)])
                                 for i, s in enumerate(subs)))
    for s, [seqs] in zip(subs, got, strict=True):
        assert [r.seq for r in await log.read(s)] == seqs


async def test_a_fenced_append_lands_whole_only_if_nothing_matching_the_filter_moved(log: EventLog, tenant: str) -> None:
    kind = f"muster.evt.{tenant}.gov.rule"
    [first] = await log.append(f"{kind}.a", [_ev(tenant, 0)])
    stale = [(f"{kind}.b", _ev(tenant, 1)), (f"{kind}.c", _ev(tenant, 2))]
    seqs = await log.append_fenced(stale, first, f"{kind}.*")
    assert len(seqs) == 2 and seqs[1] == seqs[0] + 1
    with pytest.raises(ConcurrencyError):  # b and c moved the kind past `first`
        await log.append_fenced([(f"{kind}.d", _ev(tenant, 3)), (f"{kind}.e", _ev(tenant, 4))], first, f"{kind}.*")
    await log.append(f"muster.evt.{tenant}.gov.other.x", [_ev(tenant, 5)])  # not the filter's: no fence
    assert len(await log.append_fenced([(f"{kind}.d", _ev(tenant, 3))], seqs[-1], f"{kind}.*")) == 1
    assert _ids(await log.read(f"{kind}.*")) == ["t0", "t1", "t2", "t3"]


async def test_a_second_fence_in_a_fenced_append_holds_its_own_subject_and_the_append_lands_whole_or_not(
        log: EventLog, tenant: str) -> None:
    """Two aggregates in one store (a cluster's events, then its job's: decision 45), each fenced
    on its own subject; either stale, nothing lands."""
    cluster, job = f"muster.evt.{tenant}.cluster.c", f"muster.evt.{tenant}.job.j"
    records = f"{job}.tasks"  # (fenced on the job's subject: decision 33)
    [c0] = await log.append(cluster, [_ev(tenant, 0)])
    [j0] = await log.append(job, [_ev(tenant, 1)])
    seqs = await log.append_fenced([(cluster, _ev(tenant, 2)), (records, _ev(tenant, 3)), (job, _ev(tenant, 4))], c0, cluster,
                                   more=[(1, j0, job)])
    assert len(seqs) == 3 and seqs == sorted(seqs)
    with pytest.raises(ConcurrencyError):  # the job moved past j0
        await log.append_fenced([(cluster, _ev(tenant, 5)), (records, _ev(tenant, 6))], seqs[0], cluster, more=[(1, j0, job)])
    with pytest.raises(ConcurrencyError):  # the cluster moved past c0
        await log.append_fenced([(cluster, _ev(tenant, 7)), (job, _ev(tenant, 8))], c0, cluster, more=[(1, seqs[2], job)])
    assert _ids(await log.read(cluster)) == ["t0", "t2"] and _ids(await log.read(f"{job}.>")) == ["t3"]
    assert len(await log.append_fenced([(cluster, _ev(tenant, 9)), (job, _ev(tenant, 10))], seqs[0], cluster,
                                       more=[(1, seqs[2], job)])) == 2


# -- submits (group commit on or off) --------------------------------------------------------


async def test_submits_are_each_stored_once_in_the_order_asked(log: EventLog, tenant: str) -> None:
    subs = [f"muster.evt.{tenant}.task.j.t{i}" for i in range(30)]
    if isinstance(log, EventStore):
        await log.writer.publisher.start()  # (a submit before it goes through a task of its own, later)
    seqs = await asyncio.wait_for(asyncio.gather(*(log.submit(s, _ev(tenant, i)) for i, s in enumerate(subs))), 10)
    assert len(set(seqs)) == 30 and seqs == sorted(seqs)
    for i, (s, seq) in enumerate(zip(subs, seqs, strict=True)):
        [r] = await log.read(s)
        assert r.seq == seq and r.event == _ev(tenant, i).event
    # A retry (a worker that died before its ack): known by its key, stored once, in a group too.
    again = await asyncio.gather(*(log.submit(s, _ev(tenant, i)) for i, s in enumerate(subs[:10])),
                                 log.submit(f"muster.evt.{tenant}.task.j.new", _ev(tenant, 99)))
    assert again[:10] == seqs[:10] and again[10] > seqs[-1]
    assert len(await log.read(f"muster.evt.{tenant}.task.>")) == 31


async def test_a_submit_without_a_running_publisher_yet_is_stored_too(log: EventLog, tenant: str) -> None:
    subject = f"muster.evt.{tenant}.task.j.early"
    seq = await asyncio.wait_for(log.submit(subject, _ev(tenant, 1)), 10)
    assert [r.seq for r in await log.read(subject)] == [seq]


# -- reads -----------------------------------------------------------------------------------


async def test_reads_follow_subject_filters_in_log_order_up_to_a_sequence(log: EventLog, tenant: str) -> None:
    seqs = []
    for i, kind in enumerate(["job", "cluster", "job", "task"]):
        seqs += await log.append(f"muster.evt.{tenant}.{kind}.x{i}", [Append(JobPaused(job_id=f"j{i}", by="me"), msg_id=f"{tenant}-{i}")])
    assert [r.seq for r in await log.read(f"muster.evt.{tenant}.job.*")] == [seqs[0], seqs[2]]
    assert [r.seq for r in await log.read(f"muster.evt.{tenant}.>", start_seq=seqs[1], up_to_seq=seqs[2])] == seqs[1:3]
    assert [r.seq for r in await log.read_many([f"muster.evt.{tenant}.task.*", f"muster.evt.{tenant}.cluster.*"])] == [
        seqs[1], seqs[3]]
    assert await log.subjects(f"muster.evt.{tenant}.job.*") == {f"muster.evt.{tenant}.job.x0": 1, f"muster.evt.{tenant}.job.x2": 1}
    assert await log.last_seq(f"muster.evt.{tenant}.job.x2") == seqs[2] and await log.last_seq(f"muster.evt.{tenant}.none") == 0
    more = await log.append(f"muster.evt.{tenant}.job.x0", [Append(JobPaused(job_id="j0", by="me"), msg_id=f"{tenant}-0b")])
    assert [r.seq for r in await log.read_through(f"muster.evt.{tenant}.job.x0", seqs[0])] == [seqs[0]]
    assert [r.seq for r in await log.read_through(f"muster.evt.{tenant}.job.x0", more[0])] == [seqs[0], more[0]]


async def test_a_heads_read_gives_reads_events_by_type_and_key_without_their_bodies(log: EventLog, tenant: str) -> None:
    seqs = []
    for i in range(5):
        item = _ev(tenant, i) if i % 2 else Append(JobPaused(job_id=f"j{i}", by="me"), msg_id=f"{tenant}-p{i}")
        seqs += await log.append(f"muster.evt.{tenant}.{'task' if i < 4 else 'job'}.x{i}", [item])
    heads = await log.read_heads(f"muster.evt.{tenant}.task.*", up_to_seq=seqs[2])
    assert [(h.seq, h.subject, h.type, h.msg_id) for h in heads] == [
        (seqs[0], f"muster.evt.{tenant}.task.x0", "JobPaused", f"{tenant}-p0"),
        (seqs[1], f"muster.evt.{tenant}.task.x1", "TaskClaimed", f"{tenant}.c1"),
        (seqs[2], f"muster.evt.{tenant}.task.x2", "JobPaused", f"{tenant}-p2")]
    every = await log.read_heads(f"muster.evt.{tenant}.>", start_seq=seqs[1])
    assert [h.seq for h in every] == [r.seq for r in await log.read(f"muster.evt.{tenant}.>", start_seq=seqs[1])] == seqs[1:]


async def test_replay_takes_several_filters_and_a_start_sequence(log: EventLog, tenant: str) -> None:
    seqs = []
    for i in range(6):
        kind = ("job", "cluster", "task")[i % 3]
        seqs += await log.append(f"muster.evt.{tenant}.{kind}.x{i}", [Append(JobPaused(job_id=f"j{i}", by="me"), msg_id=f"{tenant}-{i}")])
    got: list[int] = []
    filters = [f"muster.evt.{tenant}.job.*", f"muster.evt.{tenant}.cluster.*"]
    assert await log.replay(filters, lambda r: got.append(r.seq), start_seq=seqs[1]) == 3
    assert got == [seqs[1], seqs[3], seqs[4]]
    assert await log.replay(f"muster.evt.{tenant}.none.*", lambda r: got.append(0)) == 0 and len(got) == 3


async def test_the_events_stream_cannot_be_purged_or_have_messages_deleted(nc: Client, tenant: str) -> None:
    """(JetStream only: the stream's own guarantee.)"""
    from nats.js.errors import APIError

    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.config.deny_delete and info.config.deny_purge and info.config.max_age in (0, None)
    seq = (await EventStore(nc).append(subjects.job_events(tenant, "j3"), [Append(_requested(tenant, "j3"), msg_id=f"{tenant}-j3")]))[0]
    with pytest.raises(APIError):
        await js.delete_msg(subjects.EVENTS_STREAM, seq)
    with pytest.raises(APIError):
        await js.purge_stream(subjects.EVENTS_STREAM)



async def test_a_named_writer_is_on_every_event_it_appends(nc: Client, tenant: str) -> None:
    """(JetStream only.) The log says which planner wrote what (`Muster-Writer`): fencing is
    checked from it (tests/fault/fencing.py)."""
    from contracts.records import H_WRITER

    subject = subjects.job_events(tenant, "j5")
    one = Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-1", aggregate_id="j5", version=1)
    two = [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-{i}") for i in (2, 3)]
    seqs = await EventStore(nc, writer_name="planner-7").append(subject, [one], expect_last_seq=0)
    seqs += await EventStore(nc, writer_name="planner-8").append(subject, two)  # an atomic batch
    seqs += (await EventStore(nc, writer_name="planner-9").append_chain(
        [(subject, [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-5")], seqs[-1])]))[0]
    seqs.append(await EventStore(nc, writer_name="planner-6").submit(subject, Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-6")))
    seqs += await EventStore(nc).append(subject, [Append(_requested(tenant, "j5"), msg_id=f"{tenant}-j5-4")])
    js = nc.jetstream()
    writers = [(await js.get_msg(subjects.EVENTS_STREAM, seq)).headers or {} for seq in seqs]
    assert [h.get(H_WRITER) for h in writers] == ["planner-7", "planner-8", "planner-8", "planner-9", "planner-6", None]
    assert [r.seq for r in await EventStore(nc).read(subject)] == seqs  # and the events read as before


def test_the_jetstream_store_offers_exactly_the_ports_methods() -> None:
    port = {name for name, value in vars(EventLog).items() if callable(value) and not name.startswith("_")}
    offered = {name for name, value in vars(EventStore).items() if callable(value) and not name.startswith("_")}
    assert offered == port == {"append", "append_chain", "append_fenced", "submit", "last_seq", "read", "read_heads", "read_many", "subjects",
                               "subject_names", "read_through",
                               "replay"}
    assert port <= {name for name in dir(MemoryEventLog) if not name.startswith("_")}
