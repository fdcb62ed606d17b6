"""The cluster's nodes map, stored once per version where tasks can find it.

A task that needs the map (automator actions) carries the key of its manifest; the chunks and
the manifest are in the KV bucket `nodemaps` under keys derived from their content
(contracts/nodemaps.py). Per cluster this keeps which chunks it wrote last, and rewrites only
the chunks whose nodes changed since (the cluster lists the nodes whose addresses or host names
changed since its last layout change): the map of a 10,000-node cluster in which one node got
its address costs one chunk of 64 nodes and a manifest, not 3 MB.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType

from contracts.catalog import Catalog
from contracts.nodemaps import BUCKET, NodeChunk, NodeManifest, chunk_of, content_key
from muster.bus import streams

from .domain.cluster import Cluster
from .tasks import node_info

MAX_AGE_S = 24 * 3600.0
"""How long a stored map lives: longer than any task waits in a queue. A key written more than
half of this ago is written again before a task refers to it."""


class Store(Protocol):
    async def put(self, key: str, value: bytes) -> object: ...


async def ensure_bucket(js: JetStreamContext, replicas: int = 1) -> Store:
    return await streams.ensure_bucket(js, KeyValueConfig(
        bucket=BUCKET, history=1, ttl=MAX_AGE_S, storage=StorageType.FILE, replicas=replicas,
        description="nodes maps of clusters, by content: <tenant>.<sha256> -> NodeChunk | NodeManifest",
        # Gets go to the stream leader: a task may be read the moment after its map was written.
        direct=False,
    ))


class MemoryStore:
    """For planners on in-memory ports (unit tests)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def put(self, key: str, value: bytes) -> object:
        self.data[key] = value
        return None


class LazyBucket:
    """The bucket, declared on first use (for planners built without the composition root)."""

    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        self.js, self.replicas = js, replicas
        self._store: Store | None = None

    async def put(self, key: str, value: bytes) -> object:
        if self._store is None:
            self._store = await ensure_bucket(self.js, self.replicas)
        return await self._store.put(key, value)


@dataclass
class _Written:
    """What was written for one cluster, and from which state of it."""

    cluster: Cluster
    catalog: Catalog
    epoch: int
    seen: int
    members: dict[int, list[str]]
    chunks: dict[int, str]
    manifest: str
    oldest: float = 0.0
    """When the oldest of its keys was written."""


@dataclass
class NodeMaps:
    store: Store
    max_age_s: float = MAX_AGE_S
    written: dict[str, _Written] = field(default_factory=dict)
    put_at: dict[str, float] = field(default_factory=dict)
    puts: int = 0

    def __post_init__(self) -> None:
        self._turn = asyncio.Lock()

    async def ref(self, cluster: Cluster, catalog: Catalog) -> str:
        """The key of the cluster's nodes map as it is now, written if it was not. Calls for
        one planner take turns (tasks are published concurrently); what was written is
        remembered only once all of it is stored, so a failed put is simply done again."""
        async with self._turn:
            return await self._ref(cluster, catalog)

    async def _ref(self, cluster: Cluster, catalog: Catalog) -> str:
        cid = str(cluster.id)
        w = self.written.get(cid)
        if w is None or w.cluster is not cluster or w.catalog is not catalog or w.epoch != cluster.layout_epoch \
                or w.seen > len(cluster.touched) or time.monotonic() - w.oldest > self.max_age_s / 2:
            # First time, or the cluster was reloaded from the log, or its layout or the
            # catalog changed, or some key may soon expire: every chunk (same keys).
            members: dict[int, list[str]] = {}
            for node_id in sorted(cluster.nodes):
                members.setdefault(chunk_of(cluster.nodes[node_id].nodenum), []).append(node_id)
            w = _Written(cluster, catalog, cluster.layout_epoch, 0, members, {}, "")
            dirty = set(members)
        else:
            dirty = {chunk_of(cluster.nodes[n].nodenum) for n in cluster.touched[w.seen:] if n in cluster.nodes}
            if not dirty:
                return w.manifest
        chunks = dict(w.chunks)
        memo: dict[Any, Any] = {}
        for chunk in sorted(dirty):
            body = NodeChunk(nodes={n: node_info(cluster, catalog, n, memo) for n in w.members[chunk]})
            chunks[chunk] = await self._put(cluster.tenant, body.model_dump_json().encode())
        manifest = NodeManifest(cluster_id=cid, count=len(cluster.nodes), chunks=[chunks[c] for c in sorted(chunks)])
        w.manifest = await self._put(cluster.tenant, manifest.model_dump_json().encode())
        w.chunks, w.seen = chunks, len(cluster.touched)
        w.oldest = min(self.put_at[k] for k in (w.manifest, *chunks.values()))
        self.written[cid] = w
        return w.manifest

    def _stale(self, key: str) -> bool:
        at = self.put_at.get(key)
        return at is None or time.monotonic() - at > self.max_age_s / 2

    async def _put(self, tenant: str, data: bytes) -> str:
        key = content_key(tenant, data)
        if self._stale(key):
            await self.store.put(key, data)
            self.put_at[key] = time.monotonic()
            self.puts += 1
        return key

    def forget(self, cluster_id: str) -> None:
        self.written.pop(cluster_id, None)
