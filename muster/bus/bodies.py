"""Large event bodies, stored once by content in the `BODIES` stream; the log holds a reference.

An event whose JSON is larger than `INLINE_LIMIT` (a plan or a layout of thousands of nodes, a
solver's catalog) is not written into `EVENTS` as it is: its JSON is compressed, cut into
chunks of at most `CHUNK` bytes, and stored on `muster.body.<tenant>.<sha256>`; the log gets a
small message in its place, with the same headers plus `Muster-Body: sha256:<hex>` and the body
`{"type", "v", "body": {"ref", "size", "encoding", "stream", "parts"}}`. Readers of this package
(`EventStore.read/replay`, `consume_events`) put the whole event back before anyone sees it, so
aggregates and read models fold exactly the events they folded before. docs/decisions/0003.

Where a body is stored follows the event's subject (decision 0057): part `i` of the body of an
event on `muster.evt.<rest>` is the one message on `muster.body.<rest>.<hex>.<i>` (`part_subject`),
read by the direct get that names that subject in the request's subject. So whoever may read the
event's subject there (a service's rights name the filters it reads, `muster.body.<filter>.*.*`)
may read its body, and no other: a body stored per tenant (`muster.body.<tenant>.<hex>`, the
layout before, a stub with no `parts`), read by the message API with the subject in the request's
body, was readable by every service that reads bodies at all.

`BODIES` is as durable as the log (file storage, never expires, no delete, no purge, the same
replicas): a reference in the log must always resolve. Content addressing makes a retried or
repeated put harmless, and the digest is checked on every read.

Content addressing is per event subject: the same body under two subjects is stored twice. Not
deduped across subjects, on purpose: a reader may read only the bodies under the subjects its
rights name, so a copy shared by two subjects would have to be readable by the readers of both
(a catalog two tenants applied alike, read by either tenant's services), and a service could
learn by a digest whether another subject holds a body. Counted in a 1,000-node create
(bench/body_copies_bench.py, session 26): 2 bodies (the plan on the job's subject, the layout
on the cluster's), no digest under two subjects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RawStreamMsg, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from contracts import subjects

BODIES_STREAM = "BODIES"
BODY = subjects.BODY
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
        allow_direct=True,  # each part is read by the direct get of its own subject
        num_replicas=replicas,
    )


def body_subject(tenant: str, digest: str) -> str:
    """Where a body of the layout before 0057 is (every part on one subject, per tenant)."""
    return f"{BODY}.{tenant}.{digest}"


def part_subject(event_subject: str, digest: str, index: int) -> str:
    """Where part `index` of the body of an event on `event_subject` is: the event's subject
    (under `muster.body.` for `muster.evt.`), the digest, the part's index."""
    return subjects.body_part(event_subject, digest, index)


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
    parts: int | None = None
    """How many parts, each on its own subject (`part_subject`); None: a body stored before
    0057, all its parts on one subject of its tenant (`body_subject`)."""


def stub(event_type: str, version: Any, ref: str, size: int, parts: int) -> bytes:
    return json.dumps({
        "type": event_type, "v": version,
        "body": {"ref": ref, "size": size, "encoding": "zlib", "stream": BODIES_STREAM, "parts": parts},
    }).encode()


def parse_stub(data: bytes) -> Offloaded:
    doc = json.loads(data)
    parts = doc["body"].get("parts")
    return Offloaded(type=doc["type"], ref=doc["body"]["ref"], size=int(doc["body"]["size"]),
                     parts=int(parts) if parts is not None else None)


def _digest(ref: str) -> str:
    algo, _, digest = ref.partition(":")
    if algo != "sha256" or not digest:
        raise BodyError(f"unknown body reference {ref!r}")
    return digest


class Bodies:
    """`wait`: how long a read of a replicated `BODIES` waits for a part the replica that answered
    has not applied yet (the event that references it was appended after every part was
    acknowledged, so it is there, or coming); on one server a part not found is missing."""

    def __init__(self, js: JetStreamContext, wait: float = 10.0) -> None:
        self.js = js
        self.wait = wait
        self._stored: set[str] = set()
        self._replicated: bool | None = None

    async def _is_replicated(self) -> bool:
        if self._replicated is None:
            try:  # (the list of streams: every service that reads bodies may ask it, and it names no subject)
                infos = await self.js.streams_info()
            except Exception:  # noqa: BLE001 - unknown: wait for a part, as on a replicated stream
                return True
            self._replicated = any(i.config.name == BODIES_STREAM and (i.config.num_replicas or 1) > 1 for i in infos)
        return self._replicated

    async def put(self, event_subject: str, data: bytes) -> tuple[str, int]:
        """Store `data`, the body of an event on `event_subject` (if it is not there yet):
        its reference `sha256:<hex>` and its number of parts."""
        # Hashing and compressing megabytes take a while: in a thread, so the service's loop
        # goes on meanwhile (its leases, its heartbeats, other requests).
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        packed = await asyncio.to_thread(zlib.compress, data, 6)
        parts = [packed[i : i + CHUNK] for i in range(0, len(packed), CHUNK)] or [b""]
        last = part_subject(event_subject, digest, len(parts) - 1)
        if last in self._stored or await self._part(last) is not None:
            self._stored.add(last)
            return f"sha256:{digest}", len(parts)
        for i, part in enumerate(parts):
            # Acknowledged one by one: the last part's presence means every part is stored.
            await self.js.publish(part_subject(event_subject, digest, i), part,
                                  headers={H_PART: f"{i}/{len(parts)}", "Nats-Msg-Id": f"{digest}.{event_subject}.{i}"})
        self._stored.add(last)
        return f"sha256:{digest}", len(parts)

    async def _message(self, subject: str) -> RawStreamMsg | None:
        """The part stored on `subject` (None: none there, or not on the replica that answered)."""
        try:
            return await self.js.get_last_msg(BODIES_STREAM, subject, direct=True)
        except NotFoundError:
            return None
        except NoRespondersError:
            raise BodyError(f"{BODIES_STREAM} answers no direct get (a stream declared by an older version: "
                            "the auth service of this version allows it at its start)") from None
        except NatsTimeout:
            raise BodyError(f"no answer to the direct get of {subject} (is it outside this connection's "
                            "rights? nats-server's log names a permissions violation)") from None

    async def _part(self, subject: str) -> bytes | None:
        msg = await self._message(subject)
        return None if msg is None else msg.data or b""

    async def stored(self, subject: str) -> bool:
        return await self._message(subject) is not None

    async def get(self, event_subject: str, body: Offloaded) -> bytes:
        """The body of the event on `event_subject` whose stub is `body`, checked."""
        digest = _digest(body.ref)
        parts = body.parts
        if parts is None:  # (stored before 0057: copied under the event's subject by the auth service, `bodymove`?)
            first = await self._message(part_subject(event_subject, digest, 0))
            if first is not None:
                parts = int((first.headers or {}).get(H_PART, "0/1").split("/")[1])
        if parts is None:
            packed = await self._get_old(tenant_of(event_subject), body.ref, digest)
        else:
            loop = asyncio.get_running_loop()
            deadline, tries = loop.time() + self.wait, 0
            parts_ = [part_subject(event_subject, digest, i) for i in range(parts)]
            found: dict[int, bytes] = {}
            while True:
                got = await asyncio.gather(*(self._part(s) for i, s in enumerate(parts_) if i not in found))
                missing = [i for i in range(parts) if i not in found]
                found |= {i: part for i, part in zip(missing, got, strict=True) if part is not None}
                if len(found) == parts:
                    break
                if loop.time() >= deadline or not await self._is_replicated():
                    raise BodyError(f"body {body.ref} of {event_subject} is missing or incomplete in {BODIES_STREAM}")
                # Not a wait for state that is to come: every part was acknowledged (stored on a
                # quorum) before the event naming it was appended, so it is stored; a direct get
                # is answered by any replica, and a follower that has not applied it yet says
                # "not found". So a bounded retry of that read (its pause doubling, for at most
                # `wait`), as `OrderedReader` waits for a lagging replica. No event could be
                # waited on instead: this reader may not consume `BODIES` (its rights are the
                # direct gets of its own subjects) and no message tells when a follower applied
                # a write. On one server a part not found is missing: no retry.
                tries += 1
                await asyncio.sleep(0.005 * 2 ** min(tries, 7))
            packed = b"".join(found[i] for i in range(parts))
        data = await asyncio.to_thread(zlib.decompress, packed)
        if await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()) != digest:
            raise BodyError(f"body {body.ref} of {event_subject} does not match its digest")
        return data

    async def _get_old(self, tenant: str, ref: str, digest: str) -> bytes:
        """A body stored before 0057 (`body_subject`): its parts through the message API, which
        the stream's leader answers (it has every acknowledged write), the subject in the
        request's body; a service whose rights are scoped (decision 0057) may not ask it."""
        subject = body_subject(tenant, digest)
        parts: dict[int, bytes] = {}
        count = None
        seq = 1
        while count is None or len(parts) < count:
            try:
                msg = await self.js.get_msg(BODIES_STREAM, seq=seq, subject=subject, next=True)
            except NotFoundError:
                break
            except NatsTimeout:
                raise BodyError(f"body {ref} of tenant {tenant} was stored in the layout before decision 0057, "
                                "which this connection may not read (docs/runtime.md, Upgrading muster)") from None
            index, count = (int(x) for x in (msg.headers or {}).get(H_PART, "0/1").split("/"))
            parts.setdefault(index, msg.data or b"")
            if msg.seq is None:  # a stored message always has one
                break
            seq = msg.seq + 1
        if count is None or len(parts) < count:
            raise BodyError(f"body {ref} of tenant {tenant} is missing or incomplete in {BODIES_STREAM}")
        return b"".join(parts[i] for i in range(count))
