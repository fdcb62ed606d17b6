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

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout

from contracts.records import H_EXPECT, Append

from .immediate import frame
from .wire import raw_subscribe

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
    replies = await _replies(store.nc)
    answers, first = replies.expect(len(links))
    try:
        for k, ((_subject, _item, fence, _), (_data, headers)) in enumerate(zip(links, encoded, strict=True)):
            if fence is not None:
                headers[H_EXPECT] = str(fence)
            if k > 0:
                headers[H_EXPECT_LAST_MSG_ID] = links[k - 1][1].msg_id
        if not _write_now(store.nc, [frame(subject, f"{replies.prefix}.{first + k}", headers, data)
                                     for k, ((subject, *_), (data, headers)) in enumerate(zip(links, encoded, strict=True))]):
            for k, ((subject, *_), (data, headers)) in enumerate(zip(links, encoded, strict=True)):
                await store.nc.publish(subject, data, reply=f"{replies.prefix}.{first + k}", headers=headers)
        try:
            got = await asyncio.wait_for(asyncio.gather(*answers), store.timeout)
        except TimeoutError:
            raise NatsTimeout from None  # as `js.publish`: what landed is unknown
    finally:
        replies.forget(first, len(links))

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


def _write_now(nc: Client, commands: list[bytes]) -> bool:
    """The chain's messages written to the connection now, after whatever nats-py has queued
    (as `muster.bus.immediate` does): not left for nats-py's flusher task, which runs only
    when the loop comes round, and without its per-header checks. False when the connection
    is not up (publish the ordinary way)."""
    transport = getattr(nc, "_transport", None)
    if not nc.is_connected or transport is None:
        return False
    nc._pending.extend(commands)
    transport.writelines(nc._pending)
    nc._pending = []
    nc._pending_data_size = 0
    return True


class _Replies:
    """The answers to every chain sent on one connection, on one subscription (`<inbox>.<n>`,
    n counting up): a subscription per chain cost a SUB and an UNSUB each, about a tenth of the
    CPU of the planner's reaction to a pool grant (docs/pools.md, "Latency")."""

    def __init__(self, nc: Client) -> None:
        self.prefix = nc.new_inbox()
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next = 0
        self.subscribed = asyncio.ensure_future(raw_subscribe(nc, f"{self.prefix}.*", self.on_raw))

    def expect(self, n: int) -> tuple[list[asyncio.Future[dict[str, Any]]], int]:
        loop = asyncio.get_running_loop()
        first, self.next = self.next, self.next + n
        answers = [loop.create_future() for _ in range(n)]
        self.waiting.update(zip(range(first, first + n), answers, strict=True))
        return answers, first

    def forget(self, first: int, n: int) -> None:
        for k in range(first, first + n):
            self.waiting.pop(k, None)

    def on_raw(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        answer = self.waiting.pop(int(subject.rsplit(b".", 1)[1]), None)
        if answer is not None and not answer.done():  # a late answer to a chain given up on: dropped
            answer.set_result(json.loads(data) if data else {"error": {"description": "empty answer"}})


_REPLIES = "_muster_chain_replies"


async def _replies(nc: Client) -> _Replies:
    """The connection's chain replies, subscribed once; every chain waits until the server
    has the subscription, so no answer can come before it."""
    replies: _Replies | None = getattr(nc, _REPLIES, None)
    if replies is None:
        replies = _Replies(nc)
        setattr(nc, _REPLIES, replies)
    if not replies.subscribed.done():
        try:
            await asyncio.shield(replies.subscribed)  # one caller cancelled must not undo it for the others
        except Exception:
            if getattr(nc, _REPLIES, None) is replies:
                delattr(nc, _REPLIES)  # the next chain subscribes again
            raise
    return replies
