"""What a task becomes before a plugin sees it, and what a plugin's outcome may weigh.

The cluster config's macros (`%host.service.x%`...) are expanded here too, once the nodes map
is back (`muster/macros.py`, pure: the catalog validates with it too): a macro that cannot be expanded fails the attempt naming it.

A task message carries the key of the cluster's nodes map (`nodes_ref`), not the map: this
resolves it from the KV bucket `nodemaps` (contracts/nodemaps.py) and puts the map back, so a
plugin sees the task exactly as it was before the map moved out of the message. Chunks and
manifests are named by their content, so the chunks of the last few maps are kept (a later
task of the same cluster fetches only the chunks that changed). A map that cannot be
found (expired while the task waited for days) fails the attempt with the reason; the planner
retries it with the map written again. docs/provisioner.md, "The nodes map".
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Protocol

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from contracts.limits import MAX_RESULT_BYTES, check_size
from contracts.nodemaps import BUCKET, NodeChunk, NodeManifest
from contracts.tasks import NodeInfo, TaskMessage, TaskOutcome
from muster.macros import MacroError, expand_task

CACHED_CHUNKS = 512
"""Chunks kept before those no kept map uses are let go."""
CACHED_MAPS = 8


class Executor(Protocol):
    async def execute(self, task: TaskMessage) -> TaskOutcome: ...


class MapMissing(Exception):
    pass


class _Lru(OrderedDict[str, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key: str, value: Any) -> Any:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value

    def recall(self, key: str) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value


class NodesResolver:
    """An executor around the plugins: resolves `nodes_ref`, bounds the result."""

    def __init__(self, inner: Executor, js: JetStreamContext) -> None:
        self.inner = inner
        self.js = js
        self._kv: Any = None
        self._chunks: dict[str, dict[str, NodeInfo]] = {}
        self._maps = _Lru(CACHED_MAPS)
        self._chunks_of = _Lru(CACHED_MAPS)
        self._reading: dict[str, asyncio.Future[dict[str, NodeInfo]]] = {}
        self.fetched = 0

    def describe(self) -> list[dict[str, Any]]:
        inner: Any = self.inner  # the plugin registry describes its plugins; the Executor port does not say so
        return list(inner.describe())

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        if task.nodes_ref:
            try:
                nodes = await self.nodes(task.nodes_ref)
            except MapMissing as err:
                return TaskOutcome(ok=False, error=str(err))
            task = task.model_copy(update={"nodes": nodes, "nodes_ref": None})
        try:  # with the whole map at hand: Coopr's config macros (muster/macros.py)
            task = expand_task(task)
        except MacroError as err:  # permanent: the same layout on a retry (docs/client.md, "Config macros")
            return TaskOutcome(ok=False, error=str(err), permanent=err.permanent)
        outcome = await self.inner.execute(task)
        reason = check_size("the result", outcome.result, MAX_RESULT_BYTES)
        if reason:
            return TaskOutcome(ok=False, error=f"{reason}: the plugin's result was not recorded",
                               stdout=outcome.stdout, stderr=outcome.stderr)
        return outcome

    async def nodes(self, ref: str) -> dict[str, NodeInfo]:
        """The whole map named by a manifest key (bus errors propagate: the task is retried).
        Tasks that need a map not yet at hand wait for one reading of it: dozens of tasks of a
        wave name the same new map at once, and each reading it alone cost a copy of the whole
        map per task."""
        found: dict[str, NodeInfo] | None = self._maps.recall(ref)
        if found is not None:
            return found
        reading = self._reading.get(ref)
        if reading is None:
            reading = self._reading[ref] = asyncio.ensure_future(self._read(ref))
            reading.add_done_callback(lambda _: self._reading.pop(ref, None))
        return await asyncio.shield(reading)

    async def _read(self, ref: str) -> dict[str, NodeInfo]:
        manifest = NodeManifest.model_validate_json(await self._get(ref, "nodes map"))
        merged: dict[str, NodeInfo] = {}
        for key in manifest.chunks:
            chunk = self._chunks.get(key)
            if chunk is None:
                chunk = self._chunks[key] = NodeChunk.model_validate_json(await self._get(key, "nodes map chunk")).nodes
            merged.update(chunk)
        if len(merged) != manifest.count:
            raise MapMissing(f"nodes map {ref} lists {manifest.count} nodes but its chunks hold {len(merged)}")
        # The order the planner built the map in, before it went by reference.
        ordered = dict(sorted(merged.items()))
        self._maps.remember(ref, ordered)
        self._chunks_of.remember(ref, manifest.chunks)
        self._forget_chunks()
        return ordered

    def _forget_chunks(self) -> None:
        """Keep only the chunks of the maps kept. A growing cluster rewrites its chunks as its
        nodes get addresses, each version under a new key: kept by count, the superseded ones
        filled memory (hundreds of thousands of node entries at 10,000 nodes) and made every
        garbage collection slower."""
        if len(self._chunks) <= CACHED_CHUNKS:
            return
        wanted = {key for chunks in self._chunks_of.values() for key in chunks}
        for key in [k for k in self._chunks if k not in wanted]:
            del self._chunks[key]

    async def _get(self, key: str, what: str) -> bytes:
        try:
            if self._kv is None:
                self._kv = await self.js.key_value(BUCKET)
            entry = await self._kv.get(key)
        except (BucketNotFoundError, KeyNotFoundError, NotFoundError):
            raise MapMissing(f"{what} {key} is not in the KV bucket {BUCKET!r} (expired, or never written)") from None
        self.fetched += 1
        return bytes(entry.value or b"")
