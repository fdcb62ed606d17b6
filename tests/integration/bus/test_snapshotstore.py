"""Snapshots in the KV bucket `snapshots`, and the subjects of the log, on a real nats-server."""

from __future__ import annotations

import os

import pytest
from nats.aio.client import Client

from contracts.events import JobPaused
from muster import snapshots
from muster.bus.eventstore import Append, EventStore
from muster.bus.snapshotstore import BUCKET, MAX_VALUE, SnapshotStore, key
from services.planner.domain.cluster import Cluster
from services.planner.snapshots import CLUSTER

pytestmark = pytest.mark.nats


def _cluster(tenant: str, n: int, status: str) -> tuple[Cluster, str]:
    from contracts.events import ClusterRequested

    cluster_id = f"00000000-0000-0000-0000-{n:012d}"
    cluster = Cluster(ClusterRequested(tenant=tenant, cluster_id=cluster_id, name=f"c{n}", template="t", provider="p", job_id="j"))
    cluster.set_status(status, "j1")
    return cluster, cluster_id


async def test_the_latest_snapshot_of_every_aggregate_and_the_nearest_before_a_point(nc: Client, tenant: str) -> None:
    store = SnapshotStore(nc)
    a, a_id = _cluster(tenant, 1, "active")
    b, b_id = _cluster(tenant, 2, "failed")
    for seq in (10, 20, 30):
        await store.put("cluster", tenant, a_id, snapshots.take(CLUSTER, a, tenant, seq))
    await store.put("cluster", tenant, b_id, snapshots.take(CLUSTER, b, tenant, 15))
    await store.put("cluster", tenant, f"{b_id[:-1]}9", b"an old format or garbage")  # ignored, never misread
    latest = await store.latest("cluster")
    assert latest[a_id].seq == 30 and latest[b_id].seq == 15 and latest[a_id].aggregate.status == "active"
    assert f"{b_id[:-1]}9" not in latest
    assert (await store.nearest("cluster", tenant, a_id, 25)).seq == 20  # type: ignore[union-attr]
    assert (await store.nearest("cluster", tenant, a_id, None)).seq == 30  # type: ignore[union-attr]
    assert await store.nearest("cluster", tenant, a_id, 5) is None
    assert await store.nearest("cluster", tenant, "no-such-cluster", None) is None


async def test_the_subjects_of_the_log_with_their_counts(nc: Client, tenant: str) -> None:
    store = EventStore(nc)
    for i, n in ((1, 3), (2, 1)):
        for k in range(n):
            await store.append(f"muster.evt.{tenant}.cluster.c{i}", [Append(JobPaused(job_id="j", by="x"), msg_id=f"{tenant}.{i}.{k}")])
    assert await store.subjects(f"muster.evt.{tenant}.cluster.*") == {
        f"muster.evt.{tenant}.cluster.c1": 3, f"muster.evt.{tenant}.cluster.c2": 1}
    assert await store.subjects(f"muster.evt.{tenant}.job.*") == {}


async def test_a_large_snapshot_is_stored_compressed_under_64_kb_and_one_too_large_is_not_stored(nc: Client, tenant: str) -> None:
    store = SnapshotStore(nc)
    cluster, cluster_id = _cluster(tenant, 3, "active")
    cluster.config = {f"k{i}": "the same words again " * 4 for i in range(3000)}  # a plan-like state: repetitive
    data = snapshots.take(CLUSTER, cluster, tenant, 40)
    assert len(data) > 200_000
    await store.put("cluster", tenant, cluster_id, data)
    stored = await (await nc.jetstream().key_value(BUCKET)).get(key("cluster", tenant, cluster_id))
    assert stored.value is not None and len(stored.value) <= MAX_VALUE < 64 * 1024
    back = await store.get("cluster", tenant, cluster_id)
    assert back is not None and back.seq == 40 and back.aggregate.config == cluster.config
    assert (await store.latest("cluster"))[cluster_id].seq == 40

    cluster.config = {"noise": os.urandom(100_000).hex()}  # does not compress below the limit
    with pytest.raises(snapshots.SnapshotTooLarge, match=f"over {MAX_VALUE:,}: not written"):
        await store.put("cluster", tenant, cluster_id, snapshots.take(CLUSTER, cluster, tenant, 50))
    assert (await store.get("cluster", tenant, cluster_id)).seq == 40  # type: ignore[union-attr]


async def test_a_snapshot_stored_uncompressed_by_an_earlier_version_is_still_read(nc: Client, tenant: str) -> None:
    store = SnapshotStore(nc)
    cluster, cluster_id = _cluster(tenant, 4, "active")
    await (await store.bucket()).put(key("cluster", tenant, cluster_id), snapshots.take(CLUSTER, cluster, tenant, 7))
    assert (await store.get("cluster", tenant, cluster_id)).seq == 7  # type: ignore[union-attr]
