"""Snapshots of aggregates (`muster.snapshots`) in the KV bucket `snapshots`.

Key `<tenant>.<kind>.<id>`; the bucket keeps a few revisions per key, so that a replay to an
earlier point can start from the nearest snapshot before it. Reads go through the wire reader
(`muster.bus.wire`): the current value of every key of a kind is one ordered read of the
bucket's stream, last message per subject.

Values are the snapshot's JSON compressed (zlib; a job's state is mostly its plan, which
compresses about tenfold), so that every message on the bus stays under 64 KB like the rest
(`bodies.CHUNK`). A snapshot still larger than that compressed (a job of more than about 170
nodes: docs/planner.md, "Snapshots") is not written, with a clear error: the aggregate resumes
from its events instead, as without snapshots. A value that starts with `{` is an uncompressed
snapshot of an earlier version.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyDeletedError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from muster import snapshots
from muster.snapshots import Snapshot

from . import streams
from .bodies import CHUNK
from .ordered import OrderedReader
from .protocol import parse_headers

BUCKET = "snapshots"
STREAM = f"KV_{BUCKET}"
HISTORY = 8
"""Revisions kept per key: the nearest snapshot before a point is among the last few."""
MAX_VALUE = CHUNK
"""Compressed bytes a snapshot may take (every bus message stays under 64 KB)."""


def pack(key: str, data: bytes) -> bytes:
    packed = zlib.compress(data, 6)
    if len(packed) > MAX_VALUE:
        raise snapshots.SnapshotTooLarge(f"snapshot {key} is {len(packed):,} bytes compressed ({len(data):,} as JSON), over "
                               f"{MAX_VALUE:,}: not written; the aggregate resumes from its events")
    return packed


def unpack(data: bytes) -> Snapshot | None:
    """The snapshot in a stored value (compressed, or plain JSON from before), or None."""
    if not data.startswith(b"{"):
        try:
            data = zlib.decompress(data)
        except zlib.error:
            return None  # not a snapshot: ignored, never misread
    return snapshots.read(data)


def key(kind: str, tenant: str, aggregate_id: str) -> str:
    return f"{tenant}.{kind}.{aggregate_id}"


class SnapshotStore:
    def __init__(self, nc: Client, replicas: int = 1, timeout: float = 5.0) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=timeout)
        self.replicas = replicas
        self._kv: KeyValue | None = None

    async def bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await streams.ensure_bucket(self.js, KeyValueConfig(
                bucket=BUCKET, history=HISTORY, storage=StorageType.FILE, replicas=self.replicas,
                description="snapshots of aggregates: <tenant>.<kind>.<id> -> muster.snapshots JSON",
            ))
        return self._kv

    async def put(self, kind: str, tenant: str, aggregate_id: str, data: bytes) -> None:
        name = key(kind, tenant, aggregate_id)
        await (await self.bucket()).put(name, pack(name, data))

    async def get(self, kind: str, tenant: str, aggregate_id: str) -> Snapshot | None:
        """The current snapshot of one aggregate, if it has a readable one."""
        try:
            entry = await (await self.bucket()).get(key(kind, tenant, aggregate_id))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return unpack(entry.value) if entry.value else None

    async def latest(self, kind: str) -> dict[str, Snapshot]:
        """The current snapshot of every aggregate of `kind` that has a readable one, by id."""
        await self.bucket()
        out: dict[str, Snapshot] = {}

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
            if b"KV-Operation" in header_block and parse_headers(header_block)[1].get("KV-Operation") in ("DEL", "PURGE"):
                return
            snap = unpack(data)
            if snap is not None and snap.kind == kind:
                out[snap.id] = snap

        await OrderedReader(self.nc, STREAM, [f"$KV.{BUCKET}.*.{kind}.*"], on_message, last_per_subject=True).run()
        return out

    async def nearest(self, kind: str, tenant: str, aggregate_id: str, at_seq: int | None,
                      fits: Callable[[Snapshot], bool] | None = None) -> Snapshot | None:
        """The readable snapshot with the highest sequence not after `at_seq` (None: the latest)
        among the revisions the bucket keeps, and that `fits` takes. Reads only: a reader
        without the right to create the bucket (an operator's `muster replay`) gets None
        while it does not exist."""
        found: list[Snapshot] = []

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
            snap = unpack(data) if data else None
            if snap is not None and (at_seq is None or snap.seq <= at_seq) and (fits is None or fits(snap)):
                found.append(snap)

        try:
            await OrderedReader(self.nc, STREAM, [f"$KV.{BUCKET}.{key(kind, tenant, aggregate_id)}"], on_message).run()
        except NotFoundError:
            return None
        return max(found, key=lambda s: s.seq, default=None)
