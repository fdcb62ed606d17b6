"""The scoped reads' confirmation with the leader on a real cluster of three nats-servers
(muster/bus/scopedlog.py, decision 0057): a reader connected to a follower, which the follower's
replica answers first (its direct gets; its consumers when placed there), reads what the
leader has. A reader that may not publish on what it reads (governance on the clusters, the
notifier on the jobs, clusters and catalogs) sends its probe on a subject of its own. The
follower is stopped (SIGSTOP) while each write lands on the two others, and read at once when it
is let go. In the runs tried it had applied the write by then (an unconfirmed read found it
too): this checks the confirmation's path on a real cluster (a probe through a follower answered
with the leader's sequence, nothing stored), not a lag; a replica that lacks what the leader has
is played deterministically on one server in test_scopedlog.py."""

from __future__ import annotations

import os
import signal

import pytest
from nats.aio.client import Client

from contracts import subjects
from contracts.events import ClusterRequested
from contracts.records import Append
from muster.bus.cluster import ClusterNode
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore, fenced_last
from muster.bus.streams import ensure_streams

from .clusters import retried

pytestmark = pytest.mark.nats

ROUNDS = 8


def _requested(name: str) -> Append:
    return Append(ClusterRequested(tenant="acme", cluster_id=name, name=name, template="t", provider="p", job_id="j"),
                  msg_id=f"requested/{name}")


async def test_a_read_through_a_lagging_follower_is_confirmed_with_the_leader(nodes: list[ClusterNode]) -> None:
    writer = await connect(",".join(n.url for n in nodes), name="writer")
    try:
        await retried(lambda: ensure_streams(writer.jetstream(), replicas=3))
        info = await writer.jetstream().stream_info(subjects.EVENTS_STREAM)
        assert info.cluster is not None and info.cluster.leader
        follower = next(n for n in nodes if n.name != info.cluster.leader)
        others = [n for n in nodes if n is not follower]
        leader_side = await connect(",".join(n.url for n in others), name="leader-side")
        reader: Client = await connect(follower.url, name="reader")
        try:
            store = EventStore(leader_side)
            # The first write through the server this writer is on: the log was just made, and
            # that server may not know yet where it takes writes (a 503, no responders: once in
            # about sixty runs under load, its first round's write); later writes go the same way.
            warm = subjects.cluster_events("acme", "c-warm")
            await retried(lambda: store.append(warm, [_requested("c-warm")]))
            for who, own in (("gov", subjects.ALL_GOVERNANCE_EVENTS), ("notify", subjects.ALL_NOTIFICATION_EVENTS)):
                scoped = ScopedEventStore(reader, confirm=(own,), deletes=False)
                assert await scoped._is_replicated()
                for i in range(ROUNDS):
                    cluster = subjects.cluster_events("acme", f"c-{who}-{i}")
                    assert follower.process is not None
                    os.kill(follower.process.pid, signal.SIGSTOP)
                    try:
                        [made] = await store.append(cluster, [_requested(f"c-{who}-{i}")])
                    finally:
                        os.kill(follower.process.pid, signal.SIGCONT)
                    # a schedule written right after its cluster's creation asks whether it exists
                    assert [r.seq for r in await scoped.read(cluster)] == [made], (own, i)
                    assert await fenced_last(reader, subjects.EVENTS_STREAM, cluster, 5, on=own.replace("*", "_")) == made
            # the probes stored nothing
            assert await EventStore(leader_side).read("muster.evt._.>") == []
        finally:
            await reader.close()
            await leader_side.close()
    finally:
        await writer.close()
