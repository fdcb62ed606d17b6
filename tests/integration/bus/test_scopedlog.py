"""The scoped reads' confirmation with the leader (muster/bus/scopedlog.py, decision 0057): the
probe's answer, and a read whose consumer's replica lacks what the leader has goes on until it
has it. One server here: the lagging replica is played by a probe that appends (the server has
the event the moment after the consumer said nothing was pending)."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append, Recorded
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore, fenced_last
from muster.bus.streams import ensure_streams


def _requested(tenant: str, name: str) -> Append:
    event = ClusterRequested(tenant=tenant, cluster_id=name, name=name, template="t", provider="p", job_id="j")
    return Append(event, msg_id=f"requested/{tenant}/{name}")


async def test_the_probe_answers_the_last_sequence_and_stores_nothing(nc: Client, tenant: str) -> None:
    await ensure_streams(nc.jetstream())
    store = EventStore(nc)
    one, two = subjects.cluster_events(tenant, "c1"), subjects.cluster_events(tenant, "c2")
    [first] = await store.append(one, [_requested(tenant, "c1")])
    [second] = await store.append(two, [_requested(tenant, "c2")])
    before = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    assert await fenced_last(nc, subjects.EVENTS_STREAM, one, 5) == first
    assert await fenced_last(nc, subjects.EVENTS_STREAM, f"{subjects.EVT}.{tenant}.cluster.*", 5) == second
    assert await fenced_last(nc, subjects.EVENTS_STREAM, f"{subjects.EVT}.{tenant}.>", 5) == second
    assert await fenced_last(nc, subjects.EVENTS_STREAM, subjects.cluster_events(tenant, "none"), 5) == 0
    assert (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq == before


class _Lagging(ScopedEventStore):
    """Its first probes find an event the consumer's replica did not have yet."""

    def __init__(self, nc: Client, late: tuple[str, Append], confirm: bool | tuple[str, ...] = True) -> None:
        super().__init__(nc, confirm=confirm)
        self._replicated = True
        self.late: tuple[str, Append] | None = late

    async def _leader_last(self, subject_filter: str) -> int:
        if self.late is not None:
            subject, item = self.late
            self.late = None
            await EventStore(self.nc).append(subject, [item])
        return await super()._leader_last(subject_filter)


async def test_a_probe_no_server_answers_yet_is_sent_again_until_one_does(nc: Client, tenant: str) -> None:
    """No responder (the server the reader is on has not the stream's interest for a moment: a
    follower just resumed, a leader being elected; met on a 3-node cluster in
    test_scopedlog_cluster.py) is asked again within the timeout, as a busy fence is."""
    stream, subject = f"PROBE_{tenant}", f"probe.{tenant}.c1"
    refused = asyncio.Event()
    sent = nc.request

    async def request(*args: Any, **kwargs: Any) -> Any:
        try:
            return await sent(*args, **kwargs)
        except NoRespondersError:
            refused.set()
            raise

    nc.request = request  # type: ignore[method-assign]
    try:
        probe = asyncio.create_task(fenced_last(nc, stream, subject, 10))
        await asyncio.wait_for(refused.wait(), 5)  # no stream takes the subject yet
        await nc.jetstream().add_stream(name=stream, subjects=[f"probe.{tenant}.>"])
        try:
            assert await asyncio.wait_for(probe, 10) == 0
        finally:
            await nc.jetstream().delete_stream(stream)
    finally:
        del nc.request


async def test_a_read_goes_on_to_the_leaders_last_event(nc: Client, tenant: str) -> None:
    await ensure_streams(nc.jetstream())
    pools = f"{subjects.EVT}.{tenant}.cluster.*"
    subject = subjects.cluster_events(tenant, "c1")
    [first] = await EventStore(nc).append(subject, [_requested(tenant, "c1")])
    late = (subjects.cluster_events(tenant, "c2"), _requested(tenant, "c2"))
    replayed: list[int] = []
    assert await _Lagging(nc, late).replay(pools, lambda r: replayed.append(r.seq)) == 2
    assert replayed[0] == first and len(replayed) == 2
    assert [r.seq for r in await _Lagging(nc, (subject, _requested(tenant, "c1b"))).read(subject, start_seq=first + 1)] == [
        (await EventStore(nc).read(subject))[-1].seq]


class _Behind(ScopedEventStore):
    """A replica that has not applied the event the reader was delivered when its first consumer
    says nothing more is pending: the event is appended only once that consumer has given its
    last (the one before). Its reads are never confirmed with the leader (`confirm=False`)."""

    def __init__(self, nc: Client, late: tuple[str, Append]) -> None:
        super().__init__(nc, confirm=False, deletes=False)
        self._replicated = True
        self.late: tuple[str, Append] | None = late
        self.appending: list[asyncio.Future[list[int]]] = []

    def _decoded(self, subject: bytes, seq: int, data: bytes, header_block: bytes) -> Recorded:
        if self.late is not None:
            where, item = self.late
            self.late = None
            self.appending.append(asyncio.ensure_future(EventStore(self.nc).append(where, [item])))
        return super()._decoded(subject, seq, data, header_block)


async def test_a_read_through_a_delivered_event_goes_on_until_it_has_it(nc: Client, tenant: str) -> None:
    """The notifier is told of a job's end (a consumer of every job) and reads the job up to it,
    where it may not ask the leader: a consumer on a replica that lacks the end is followed by
    another until the read has it."""
    await ensure_streams(nc.jetstream())
    subject = subjects.job_events(tenant, "j1")
    [first] = await EventStore(nc).append(subject, [_requested(tenant, "j1-a")])
    end = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq + 1
    behind = _Behind(nc, (subject, _requested(tenant, "j1-end")))
    read = [r.seq for r in await behind.read_through(subject, end)]
    [[appended]] = await asyncio.gather(*behind.appending)
    assert appended == end and read == [first, end]


async def test_a_filter_it_may_not_publish_on_is_confirmed_by_a_probe_on_one_of_its_own(nc: Client, tenant: str) -> None:
    """Governance reads the cluster a schedule names and may not publish on clusters; the notifier
    a job end's cluster and catalog, the same. The probe goes on a subject of their own (the first
    filter of `confirm`), the filter read in `...-Subject`: the leader's last sequence of the
    filter, nothing stored. A cluster just made (its event on the leader, not on the consumer's
    replica yet) is found: before, this read ended at what the replica had (no such cluster)."""
    await ensure_streams(nc.jetstream())
    cluster = subjects.cluster_events(tenant, "c1")
    before = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    for own in (subjects.ALL_GOVERNANCE_EVENTS, subjects.ALL_NOTIFICATION_EVENTS):
        lagging = _Lagging(nc, (cluster, _requested(tenant, f"c1-{own}")), confirm=(own,))
        assert lagging._probe_on(cluster) == own.replace("*", "_")
        assert [r.event.name for r in await lagging.read(cluster)] == ["c1-" + f for f in (
            subjects.ALL_GOVERNANCE_EVENTS, subjects.ALL_NOTIFICATION_EVENTS)[: 1 + (own == subjects.ALL_NOTIFICATION_EVENTS)]]
    catalog = f"{subjects.EVT}.{tenant}.catalog.>"
    [entry] = await EventStore(nc).append(f"{subjects.EVT}.{tenant}.catalog.services", [_requested(tenant, "catalog")])
    assert await fenced_last(nc, subjects.EVENTS_STREAM, catalog, 5, on="muster.evt._.notify._") == entry
    assert await fenced_last(nc, subjects.EVENTS_STREAM, cluster, 5, on="muster.evt._.gov._._") == entry - 1
    after = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state
    assert after.last_seq == before + 3  # the three events, no probe
    assert await EventStore(nc).read("muster.evt._.>") == []
