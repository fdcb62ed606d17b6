"""Large event bodies, stored once by content in the `BODIES` stream; the log holds a reference.

An event whose JSON is larger than `INLINE_LIMIT` (a plan or a layout of thousands of nodes, a
solver's catalog) is not written into `EVENTS` as it is: its JSON is compressed, cut into
chunks of at most `CHUNK` bytes, and stored on `muster.body.<tenant>.<sha256>`; the log gets a
small message in its place, with the same headers plus `Muster-Body: sha256:<hex>` and the body
`{"type", "v", "body": {"ref", "size", "encoding", "stream"}}`. Readers of this package
(`EventStore.read/replay`, `consume_events`) put the whole event back before anyone sees it, so
aggregates and read models fold exactly the events they folded before. docs/decisions/0003.

`BODIES` is as durable as the log (file storage, never expires, no delete, no purge, the same
replicas): a reference in the log must always resolve. Content addressing makes a retried or
repeated put harmless, and the digest is checked on every read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

BODIES_STREAM = "BODIES"
BODY = "muster.body"
INLINE_LIMIT = 32 * 1024
"""Event bodies up to this size stay in the log as they are (readable by any client)."""
CHUNK = 44 * 1024
"""Bytes of compressed body per message: every message on the bus stays under 64 KB, including
the reply of a read through the stream's message API, which carries the chunk in base64 (4/3)."""
H_BODY = "Muster-Body"
H_PART = "Muster-Part"  # "<index>/<count>" on each chunk


class BodyError(Exception):
    """A referenced body is missing or does not match its digest."""


def bodies_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=BODIES_STREAM,
        subjects=[f"{BODY}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=0,
        max_msgs=-1,
        max_bytes=-1,
        discard=DiscardPolicy.NEW,
        deny_delete=True,
        deny_purge=True,
        duplicate_window=120.0,
        num_replicas=replicas,
    )


def body_subject(tenant: str, digest: str) -> str:
    return f"{BODY}.{tenant}.{digest}"


def tenant_of(event_subject: str) -> str:
    """`muster.evt.<tenant>.…` -> tenant (bodies are kept per tenant, like everything else)."""
    parts = event_subject.split(".")
    return parts[2] if len(parts) > 2 else "_"


@dataclass(frozen=True)
class Offloaded:
    """What a reader sees of an offloaded event until its body is fetched (`Bodies.inflate`)."""

    type: str
    ref: str
    size: int


def stub(event_type: str, version: Any, ref: str, size: int) -> bytes:
    return json.dumps({
        "type": event_type, "v": version,
        "body": {"ref": ref, "size": size, "encoding": "zlib", "stream": BODIES_STREAM},
    }).encode()


def parse_stub(data: bytes) -> Offloaded:
    doc = json.loads(data)
    return Offloaded(type=doc["type"], ref=doc["body"]["ref"], size=int(doc["body"]["size"]))


class Bodies:
    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._stored: set[str] = set()

    async def put(self, tenant: str, data: bytes) -> str:
        """Store `data` (if it is not there yet); returns its reference `sha256:<hex>`."""
        # Hashing and compressing megabytes take a while: in a thread, so the service's loop
        # goes on meanwhile (its leases, its heartbeats, other requests).
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        subject = body_subject(tenant, digest)
        if subject in self._stored or await self._complete(subject):
            self._stored.add(subject)
            return f"sha256:{digest}"
        packed = await asyncio.to_thread(zlib.compress, data, 6)
        parts = [packed[i : i + CHUNK] for i in range(0, len(packed), CHUNK)] or [b""]
        for i, part in enumerate(parts):
            # Acknowledged one by one: the last part's presence means every part is stored.
            await self.js.publish(subject, part, headers={H_PART: f"{i}/{len(parts)}", "Nats-Msg-Id": f"{digest}.{i}"})
        self._stored.add(subject)
        return f"sha256:{digest}"

    async def _complete(self, subject: str) -> bool:
        try:
            last = await self.js.get_last_msg(BODIES_STREAM, subject)
        except NotFoundError:
            return False
        index, count = (int(x) for x in (last.headers or {}).get(H_PART, "0/0").split("/"))
        return count > 0 and index == count - 1

    async def get(self, tenant: str, ref: str) -> bytes:
        algo, _, digest = ref.partition(":")
        if algo != "sha256" or not digest:
            raise BodyError(f"unknown body reference {ref!r}")
        subject = body_subject(tenant, digest)
        parts: dict[int, bytes] = {}
        count = None
        seq = 1
        # The message API is answered by the stream's leader, which has every acknowledged
        # write (a direct get may be answered by a follower that lags).
        while count is None or len(parts) < count:
            try:
                msg = await self.js.get_msg(BODIES_STREAM, seq=seq, subject=subject, next=True)
            except NotFoundError:
                break
            index, count = (int(x) for x in (msg.headers or {}).get(H_PART, "0/1").split("/"))
            parts.setdefault(index, msg.data or b"")
            if msg.seq is None:  # a stored message always has one
                break
            seq = msg.seq + 1
        if count is None or len(parts) < count:
            raise BodyError(f"body {ref} of tenant {tenant} is missing or incomplete in {BODIES_STREAM}")
        data = await asyncio.to_thread(zlib.decompress, b"".join(parts[i] for i in range(count)))
        if await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()) != digest:
            raise BodyError(f"body {ref} of tenant {tenant} does not match its digest")
        return data
