"""Bodies stored before decision 0057 copied to where this version's scoped readers find them.

Before 0057 a body's parts were all on `muster.body.<tenant>.<hex>` and read through the
message API, the subject in the request's body; the pool service, the solver, governance and the
notifier may no longer ask that (any tenant's bodies were theirs that way). Their events stored
since carry `parts` in their stub, and each part is on its own subject under the event's
(`muster.bus.bodies.part_subject`). An event offloaded before keeps its stub (the log is never
rewritten), so the auth service, which may read and write everything, copies each such body once
to the event's subjects (`move_old_bodies`, at each start, in the background), and a reader of a
stub with no `parts` looks there first (`Bodies.get`). A mark on `MOVED` holds the log's last
sequence looked at: the next start reads only the events appended since (an older service still
running after the auth service's upgrade may have offloaded some the old way).

Only what can hold an old body is read (session 26): the old bodies are listed first (the parts
on `muster.body.<tenant>.<hex>`, headers only); none at all (a deployment that began with
session 25 or later, or whose old bodies were all copied before the mark): no event is read.
Otherwise one read of the log's headers (the reference is a header), an event kept when its
tenant holds an old body of that digest, and the bodies copied several at a time. Read per
tenant instead, the server looked at every message once per tenant's consumer (their events
are interleaved), slower than the one read. Figures: docs/benchmarks.md, bench/bodymove_bench.py.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import structlog
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from contracts import subjects

from .bodies import BODIES_STREAM, H_BODY, Bodies, Offloaded, part_subject
from .ordered import OrderedReader
from .protocol import parse_headers

log = structlog.get_logger("muster.bus")

MOVED = f"{subjects.BODY}._moved.0057"
"""The log's last sequence whose events' bodies are where this version reads them."""
AT_ONCE = 16
"""Bodies copied at once: each is a few round trips and some compression (in a thread), so
one at a time left the connection and the cores mostly idle."""
OLD_LAYOUT = f"{subjects.BODY}.*.*"
"""Where the parts of bodies stored before 0057 are (`muster.body.<tenant>.<hex>`); a part of
this version's has at least six tokens (`muster.body.<tenant>.<kind>.<id>.<hex>.<i>`)."""


async def old_bodies(nc: Client) -> dict[str, set[str]]:
    """The digests of the bodies stored the old way, by tenant."""
    found: dict[str, set[str]] = defaultdict(set)

    def on_part(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
        tenant, digest = subject.decode().split(".")[2:4]
        if subject.decode() != MOVED:
            found[tenant].add(digest)

    await OrderedReader(nc, BODIES_STREAM, [OLD_LAYOUT], on_part, headers_only=True).run()
    return dict(found)


async def referencing(nc: Client, old: dict[str, set[str]], since: int) -> list[tuple[str, str]]:
    """(event subject, reference) of each event after `since` that names one of `old`'s bodies.
    One read of the log's headers, not one per tenant: a consumer filtered to one tenant has the
    server look at every message of a log whose tenants' events are interleaved, once per tenant."""
    offloaded: list[tuple[str, str]] = []
    marker = H_BODY.encode()

    def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
        if marker in header_block:
            digests = old.get(subject.split(b".", 3)[2].decode())
            ref = parse_headers(header_block)[1][H_BODY] if digests else ""
            if digests and ref.partition(":")[2] in digests:
                offloaded.append((subject.decode(), ref))

    await OrderedReader(nc, subjects.EVENTS_STREAM, [subjects.ALL_EVENTS], on_message, start_seq=since + 1,
                        headers_only=True).run()
    return offloaded


async def move_old_bodies(nc: Client) -> int:
    """Copy every body an event since the mark references that is not under the event's subject
    yet; returns how many were copied."""
    js = nc.jetstream()
    try:
        mark = await js.get_last_msg(BODIES_STREAM, MOVED)
        since = int(mark.data or b"0")
    except NotFoundError:
        since = 0
    # The log's end before the old bodies are listed: an event after it is read next time, and
    # one up to it was appended after its body was stored, so its body is in the list.
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    old = await old_bodies(nc) if last > since else {}
    offloaded = await referencing(nc, old, since) if old else []
    bodies, room = Bodies(js), asyncio.Semaphore(AT_ONCE)

    async def copy(event_subject: str, ref: str) -> bool:
        async with room:
            digest = ref.partition(":")[2]
            if await bodies.stored(part_subject(event_subject, digest, 0)):
                return False  # stored there by this version, or copied by a start that stopped before the mark
            try:
                data = await bodies.get(event_subject, Offloaded("", ref, 0))
            except Exception as err:  # noqa: BLE001 - told; a missing body is missing either way
                log.error("an offloaded body could not be read to be moved", subject=event_subject, ref=ref, error=str(err))
                return False
            await bodies.put(event_subject, data)
            return True

    moved = sum(await asyncio.gather(*(copy(s, r) for s, r in dict.fromkeys(offloaded))))
    if last > since:
        await js.publish(MOVED, str(last).encode())
    log.info("bodies stored before 0057 copied under their events' subjects", moved=moved, offloaded=len(offloaded),
             old_bodies=sum(len(d) for d in old.values()), tenants_read=len(old))
    return moved
