"""Chained appends: events that would be appended one by one, sent in one round trip.

Appended one at a time, each event waits for the acknowledgement of the one before (a round
trip and a disk sync each, `sync_interval: always`); an atomic batch shares the sync but takes
~10 ms to commit on file storage (decision 6), so on a latency path neither is good. A chain
sends them all at once, in order, on one connection (the server takes them in that order):

- the first event of each subject carries the subject's expected last sequence, as a single
  append would (`None` = no fence, for events whose idempotency key is enough);
- every event after the first carries `Nats-Expected-Last-Msg-Id` = the key of the event
  before it, which the server checks against the last message of the whole stream.

So an event lands only right after its predecessor: when one is refused, everything after it
is refused too, and the log holds a prefix of the chain, exactly as if they had been appended
one by one and the appender had stopped at the first refusal. The stream is shared: when
another writer's message came between two events, the server refuses the rest with "wrong
last msg ID", and the rest is appended one by one, each fenced on the sequence its subject got
in the chain. Never a merge, only the slower path. Use it for events each of which is a whole
decision (or whose prefix is a valid history): the pool's decisions, a planner's reaction.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nats.errors import TimeoutError as NatsTimeout

from contracts.records import H_EXPECT, Append

from .wire import raw_subscribe, raw_unsubscribe

if TYPE_CHECKING:
    from .eventstore import EventStore

H_EXPECT_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
WRONG_LAST_MSG_ID = 10070
"""The server's error code when the stream's last message is not the one a link names."""

Part = tuple[str, Sequence[Append], "int | None"]
"""(subject, events, expected last sequence of the subject or None) as for `EventStore.append`."""


async def append_chain(store: EventStore, parts: Sequence[Part]) -> list[list[int]]:
    """Append every part's events, parts in order; returns each part's sequences. See the
    module's docstring for what lands when something is refused."""
    links = [(subject, item, expect if i == 0 else None, bool(expect is not None))
             for subject, items, expect in parts for i, item in enumerate(items)]
    if not links:
        return [[] for _ in parts]
    encoded = [await store._encode(subject, item) for subject, item, _, _ in links]  # bodies first
    loop = asyncio.get_running_loop()
    answers: list[asyncio.Future[dict[str, Any]]] = [loop.create_future() for _ in links]

    def on_raw(subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        k = int(subject.rsplit(b".", 1)[1])
        if 0 <= k < len(answers) and not answers[k].done():
            answers[k].set_result(json.loads(data) if data else {"error": {"description": "empty answer"}})

    inbox = store.nc.new_inbox()
    sub = await raw_subscribe(store.nc, f"{inbox}.*", on_raw)
    try:
        for k, ((subject, _item, fence, _), (data, headers)) in enumerate(zip(links, encoded, strict=True)):
            if fence is not None:
                headers[H_EXPECT] = str(fence)
            if k > 0:
                headers[H_EXPECT_LAST_MSG_ID] = links[k - 1][1].msg_id
            await store.nc.publish(subject, data, reply=f"{inbox}.{k}", headers=headers)
        try:
            got = await asyncio.wait_for(asyncio.gather(*answers), store.timeout)
        except TimeoutError:
            raise NatsTimeout from None  # as `js.publish`: what landed is unknown
    finally:
        await raw_unsubscribe(store.nc, sub)

    seqs: list[int] = []
    last: dict[str, int] = {}  # subject -> its sequence so far in this chain
    for k, answer in enumerate(got):
        if "error" not in answer:
            seqs.append(int(answer["seq"]))
            last[links[k][0]] = seqs[-1]
            continue
        # The first refusal: from here on one by one, each fenced on what its subject got (a
        # link refused only because another writer came between lands now; a real refusal is
        # reported as a single append reports it).
        for subject, item, fence, fenced in links[k:]:
            expect = last.get(subject, fence) if fenced else None
            [seq] = await store._append(subject, [item], expect)
            seqs.append(seq)
            last[subject] = seq
        break
    out, at = [], 0
    for _, items, _ in parts:
        out.append(seqs[at : at + len(items)])
        at += len(items)
    return out
