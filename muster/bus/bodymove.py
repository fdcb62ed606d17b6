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
"""

from __future__ import annotations

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


async def move_old_bodies(nc: Client) -> int:
    """Copy every body an event since the mark references that is not under the event's subject
    yet; returns how many were copied. The first time, a read of the whole log."""
    js = nc.jetstream()
    try:
        mark = await js.get_last_msg(BODIES_STREAM, MOVED)
        since = int(mark.data or b"0")
    except NotFoundError:
        since = 0
    offloaded: list[tuple[str, str]] = []
    last = since

    def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
        nonlocal last
        last = max(last, seq)
        if H_BODY.encode() in header_block:
            offloaded.append((subject.decode(), parse_headers(header_block)[1][H_BODY]))

    await OrderedReader(nc, subjects.EVENTS_STREAM, [subjects.ALL_EVENTS], on_message, start_seq=since + 1).run()
    bodies, moved = Bodies(js), 0
    for event_subject, ref in dict.fromkeys(offloaded):
        digest = ref.partition(":")[2]
        if await bodies.stored(part_subject(event_subject, digest, 0)):
            continue  # stored there by this version, or copied by a start that stopped before the mark
        try:
            data = await bodies.get(event_subject, Offloaded("", ref, 0))
        except Exception as err:  # noqa: BLE001 - told; a missing body is missing either way
            log.error("an offloaded body could not be read to be moved", subject=event_subject, ref=ref, error=str(err))
            continue
        await bodies.put(event_subject, data)
        moved += 1
    if last > since:
        await js.publish(MOVED, str(last).encode())
    log.info("bodies stored before 0057 copied under their events' subjects", moved=moved, offloaded=len(offloaded))
    return moved

