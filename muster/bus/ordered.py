"""Bulk reads of a stream in order, read from the wire (`wire.raw_subscribe`).

A profile of a full fold of the log (docs/benchmarks.md, "Planner state rebuild") showed
nats-py spending more time per message than decoding and folding it. `OrderedReader` does what
nats-py's ordered consumer does, on raw frames: an ephemeral push consumer (no acks, flow
control, heartbeats) whose deliveries must come in consumer-sequence order; a gap or a silent
consumer (a reconnect, a restarted server) re-creates it from the stream sequence after the
last message taken, so every message is seen once, in log order. Each consumer it makes has a
name of its own, so that its filter is in the request's subject, where a service's rights see
it (docs/security.md).

On a replicated stream (`leader_check`) a read also ends the way `EventStore.read` does: the
consumer of one replica (an ephemeral consumer of one replica may be placed on a follower) says
nothing more is pending once it has sent what that replica has applied, and a follower that was
cut off or restarted may not have applied the latest writes yet. So the stream leader is asked
for the next match after the last message taken, and whatever it has is read from it, in order,
before the read ends (tests/fault/test_sharded_planners.py found a planner taking over shards
right after a NATS node restarted without the two clusters created 0.3 s before).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError

from .protocol import ack_sequences, parse_headers
from .wire import RawHandler, fresh_name, raw_subscribe, raw_unsubscribe

LeaderLast = Callable[[str], Awaitable[int]]
"""The stream leader's last sequence of a filter (0: none): another way to confirm a read's end
than the message API, for a reader whose rights do not have it (`scopedlog.fenced_last`)."""

OnMessage = Callable[[bytes, int, bytes, bytes], Awaitable[None] | None]
"""(subject, stream sequence, payload, header block) of one message, in stream order. What it
returns, if anything, is awaited before the next message is read: the read pauses (its consumer
given up, a new one made after) rather than take in what follows meanwhile."""


NO_DELETE_INACTIVE_S = 5.0
"""How long a consumer of a reader that deletes none stays once nobody listens to it (a push
consumer is active while its reader is subscribed, whatever it has to send)."""


class OrderedReader:
    """Every message of `stream` matching `filters` from `start_seq` on, in stream order, to
    `on_message` (synchronously, from the connection's read loop); `run()` returns how many
    once a delivery says nothing more is pending. An exception from `on_message` stops the
    read and is raised by `run()`. When `on_message` returns an awaitable (a message that
    needs more than its frame: an offloaded body to fetch), the consumer is given up, the
    awaitable awaited, and the read goes on from the next message with a new one: nothing
    that follows is held meanwhile (a 10,000-node plan's body takes a second to fetch, in
    which a reader would take in hundreds of thousands of events)."""

    def __init__(
        self,
        nc: Client,
        stream: str,
        filters: Sequence[str],
        on_message: OnMessage,
        *,
        start_seq: int = 1,
        last_per_subject: bool = False,
        heartbeat_s: float = 2.0,
        api_timeout: float = 10.0,
        leader_check: bool = False,
        leader_last: LeaderLast | None = None,
        deletes: bool = True,
        reach_seq: int | None = None,
        reach_wait: float = 10.0,
        headers_only: bool = False,
    ) -> None:
        self.nc = nc
        self.headers_only = headers_only
        """Each message's subject and headers only (its payload empty; `Nats-Msg-Size` says how
        big it is): a scan for a header costs the log's headers, not its bodies."""
        self.reach_seq = reach_seq if not last_per_subject else None
        """A sequence of the filters the reader knows is stored (it was delivered that event): the
        read goes on until it has it, as with `leader_last`, for a reader that may not ask the
        leader; a replica that has not applied it within `reach_wait` seconds fails the read."""
        self.reach_wait = reach_wait
        self._reach_by: float | None = None
        self.deletes = deletes
        """Deletes each consumer it is done with; otherwise (a reader whose rights delete none:
        session 23) the server removes it once nobody listens (`NO_DELETE_INACTIVE_S`)."""
        self.api_timeout = api_timeout
        self.leader_check = leader_check and not last_per_subject
        """Confirm the end with the stream leader (see the module's docstring). Not for a
        read of each subject's last message: what a leader would add is a later value, which
        a reader of current values takes at its next read anyway."""
        self.from_leader = 0
        """Messages read from the leader because the consumer's replica did not have them."""
        self.leader_last = leader_last if not last_per_subject else None
        """Confirm the end by the leader's last sequence of the filters instead: while the leader
        has more than was read, the consumer's replica lags, and the read goes on with a new
        consumer (after a pause: the replica applies it within a replication round)."""
        self.behind = 0
        """How many times the consumer's replica had less than the leader (`leader_last`)."""
        self.js = nc.jetstream(timeout=api_timeout)
        self.stream = stream
        self.filters = list(filters)
        self.on_message = on_message
        self.heartbeat_s = heartbeat_s
        self.count = 0
        self.resets = 0
        """How many times the consumer was re-created (a gap or a silent consumer)."""
        self.consumer = ""
        """The name of the consumer reading now."""
        self._next_seq = start_seq
        self._last_per_subject = last_per_subject
        """Only each subject's last message (a KV bucket's current values)."""
        self._dseq = 0
        self._activity = 0
        self._wake: asyncio.Future[str] | None = None
        self._failure: BaseException | None = None
        self._paused: Awaitable[None] | None = None
        self._last_pending = -1
        self.pauses = 0
        """How many times the read paused for a message's awaitable."""

    async def run(self, timeout: float = 600.0) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            outcome = await self._one_consumer(deadline)
            if outcome == "paused":
                waiting, self._paused = self._paused, None
                assert waiting is not None
                self.pauses += 1
                await asyncio.wait_for(waiting, max(0.0, deadline - loop.time()))
                if self._last_pending != 0:
                    continue  # a new consumer from the message after the paused one
                outcome = "done"
            if outcome == "done":
                if await self._behind_leader(deadline):
                    continue  # on from the next message, with a new consumer
                return await self._confirmed(deadline)
            self.resets += 1  # "reset": carry on from the message after the last one taken

    async def _behind_leader(self, deadline: float) -> bool:
        """Whether the leader has a message of the filters this read has not reached yet, or the
        read has not reached `reach_seq` (then after a pause, so that the replica has applied it);
        never without `leader_last` or `reach_seq`."""
        if self.leader_last is None and self.reach_seq is None:
            return False
        last = max([self.reach_seq or 0] + [await self.leader_last(f) for f in self.filters if self.leader_last is not None])
        if last < self._next_seq:
            return False
        loop = asyncio.get_running_loop()
        if self.reach_seq is not None and last == self.reach_seq:
            if self._reach_by is None:
                self._reach_by = loop.time() + self.reach_wait
            deadline = min(deadline, self._reach_by)
        pause = min(0.005 * 2 ** min(self.behind, 6), deadline - loop.time())
        if pause <= 0:
            raise TimeoutError(f"reading {self.stream} {self.filters}: the replica read has not reached the leader's {last}"
                               if last != self.reach_seq else
                               f"reading {self.stream} {self.filters}: the replica read has not reached {last}, "
                               f"delivered to this reader, within {self.reach_wait:g} s")
        self.behind += 1
        await asyncio.sleep(pause)  # (a bounded wait for replication, not a poll for work)
        return True

    async def _confirmed(self, deadline: float) -> int:
        """The count, once the leader has nothing after the last message taken (what it has is
        handed over first, lowest sequence first over the filters)."""
        if not self.leader_check:
            return self.count
        loop = asyncio.get_running_loop()
        heads = dict(zip(self.filters, await asyncio.gather(*(self._leader_next(f, self._next_seq) for f in self.filters)),
                         strict=True))
        while any(heads.values()):
            if loop.time() >= deadline:
                raise TimeoutError(f"reading {self.stream} {self.filters}: {self.count} messages in, out of time")
            f, frame = min(((f, h) for f, h in heads.items() if h is not None), key=lambda item: item[1][1])
            then = self.on_message(*frame)
            self._next_seq = frame[1] + 1
            self.count += 1
            self.from_leader += 1
            if then is not None and inspect.isawaitable(then):
                await then
            for other, head in heads.items():  # (literal filters of one lane match different messages)
                if head is not None and head[1] < self._next_seq:
                    heads[other] = await self._leader_next(other, self._next_seq)
        return self.count

    async def _leader_next(self, subject_filter: str, seq: int) -> tuple[bytes, int, bytes, bytes] | None:
        return await leader_next(self.nc, self.stream, subject_filter, seq, self.api_timeout)

    async def _one_consumer(self, deadline: float) -> str:
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[str] = loop.create_future()
        self._wake, self._dseq = wake, 0
        inbox = self.nc.new_inbox()
        sub = await raw_subscribe(self.nc, inbox, self._handler(wake))
        consumer = ""
        try:
            info = await self._create(inbox, deadline)
            consumer = self.consumer = info.name
            if info.num_pending == 0 and self._dseq == 0 and not wake.done():
                return "done"  # nothing matches from here: no delivery will ever say so
            seen = -1
            while not wake.done():
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"reading {self.stream} {self.filters}: {self.count} messages in, out of time")
                try:
                    await asyncio.wait_for(asyncio.shield(wake), min(left, 3 * self.heartbeat_s))
                except TimeoutError:
                    if self._activity == seen:  # not even a heartbeat: the consumer is gone
                        return "reset"
                    seen = self._activity
            if self._failure is not None:
                raise self._failure
            return wake.result()
        finally:
            await raw_unsubscribe(self.nc, sub)
            if consumer and self.deletes:
                await self._delete(consumer)

    async def _create(self, inbox: str, deadline: float) -> Any:
        config = ConsumerConfig(
            deliver_subject=inbox, ack_policy=AckPolicy.NONE, max_deliver=1, flow_control=True,
            idle_heartbeat=self.heartbeat_s, mem_storage=True, num_replicas=1,
            # the server removes a lost one (or, for a reader that deletes none, one done with)
            inactive_threshold=max(30.0, 10 * self.heartbeat_s) if self.deletes else NO_DELETE_INACTIVE_S,
            deliver_policy=DeliverPolicy.ALL if self._next_seq <= 1 else DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=None if self._next_seq <= 1 else self._next_seq,
            # A name of its own each time (a reset's consumer is another): with it, nats-py puts
            # a lone filter in the request's subject, where a service's rights are checked.
            name=fresh_name(),
            headers_only=self.headers_only or None,
        )
        if self._last_per_subject and self.count == 0:  # (after a reset: on from where it was)
            config.deliver_policy, config.opt_start_seq = DeliverPolicy.LAST_PER_SUBJECT, None
        if len(self.filters) == 1:
            config.filter_subject = self.filters[0]
        else:
            config.filter_subjects = self.filters
        loop = asyncio.get_running_loop()
        pause = 0.25
        while True:  # a bounded retry of a request while the server comes back, not a poll
            try:
                return await self.js.add_consumer(self.stream, config)
            except (TimeoutError, OSError, ConnectionError) as err:
                if loop.time() + pause >= deadline:
                    raise TimeoutError(f"reading {self.stream}: no consumer ({err or type(err).__name__})") from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    async def _delete(self, consumer: str) -> None:
        try:
            await self.js.delete_consumer(self.stream, consumer)
        except Exception:  # noqa: BLE001 - it expires on its own (inactive_threshold)
            pass

    def _handler(self, wake: asyncio.Future[str]) -> RawHandler:
        def on_raw(subject: bytes, reply: bytes, data: bytes, headers: bytes) -> str | None:
            if wake.done():
                return None  # a consumer given up on: its late deliveries are not ours
            self._activity += 1
            if not data and headers[8:9] == b" ":  # a status: flow control or a heartbeat
                status, fields = parse_headers(headers)
                if status != "100":
                    return None
                if fields.get("Description", "").startswith("FlowControl"):
                    return reply.decode()
                last = fields.get("Nats-Last-Consumer")
                if last is not None and int(last) != self._dseq:
                    wake.set_result("reset")  # we missed deliveries
                    return None
                return fields.get("Nats-Consumer-Stalled") or None
            sseq, dseq, pending = ack_sequences(reply)
            if dseq != self._dseq + 1:
                wake.set_result("reset")
                return None
            self._dseq = dseq
            try:
                then = self.on_message(subject, sseq, data, headers)
            except Exception as err:  # noqa: BLE001 - handed to run()'s caller
                self._failure = err
                wake.set_result("failed")
                return None
            self._next_seq = sseq + 1
            self.count += 1
            if then is not None and inspect.isawaitable(then):
                self._paused, self._last_pending = then, pending
                wake.set_result("paused")
            elif pending == 0:
                wake.set_result("done")
            return None

        return on_raw


async def leader_next(nc: Client, stream: str, subject_filter: str, seq: int, timeout: float) -> tuple[bytes, int, bytes, bytes] | None:
    """The first message at or after `seq` on the filter as the stream leader has it (the
    message API is answered by the leader; a direct get may be answered by any replica), as a
    frame (subject, sequence, payload, header block as stored); None if there is none. Any
    other answer raises as nats-py's API errors do (a 503 while the stream elects a leader)."""
    request = json.dumps({"seq": seq, "next_by_subj": subject_filter}).encode()
    reply = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", request, timeout=timeout)
    answer = json.loads(reply.data)
    error = answer.get("error")
    if error is not None:
        if error.get("code") == 404:  # no message at or after it
            return None
        APIError.from_error(error)  # (always raises: the error's own type)
    m = answer["message"]
    return m["subject"].encode(), int(m["seq"]), base64.b64decode(m.get("data") or ""), base64.b64decode(m.get("hdrs") or "")


LANE_HELD = 32_768
"""Messages one lane of a merged read holds before its consumer pauses (given up, and made
again once the merge has taken half of them): a lane far ahead of the others would otherwise
hold the rest of its filter. Each pause costs what the server had sent on meanwhile, sent again,
so it is well above one job's story of the size the tracker snapshots."""


def lanes_of(filters: Sequence[str]) -> list[list[str]]:
    """The consumers a read of `filters` needs: the literal subjects together, each wildcard
    filter alone. nats-server's consumer of several filters, one of them a wildcard over many
    subjects, pays per stored message for every subject it might match: reading a 1,000-node
    job's story took a whole core for 42 s, one consumer a filter 0.4 s (decision 0035)."""
    literal = [f for f in filters if not _wildcard(f)]
    return ([literal] if literal else []) + [[f] for f in filters if _wildcard(f)]


def _wildcard(subject: str) -> bool:
    return any(t in ("*", ">") for t in subject.split("."))


async def read_in_order(nc: Client, stream: str, filters: Sequence[str], on_message: OnMessage, *, start_seq: int = 1,
                        api_timeout: float = 10.0, timeout: float = 600.0, leader_check: bool = False,
                        leader_last: LeaderLast | None = None, deletes: bool = True) -> int:
    """`OrderedReader(...).run()` for any filters: one ordered consumer a lane (`lanes_of`),
    merged by stream sequence as they come, each message handed over once (filters may
    overlap) and in stream order; what `on_message` returns, if anything, is awaited before
    the next. Returns how many were handed over. `leader_check`: each lane's end confirmed
    with the stream leader before the merge counts it over (a replicated stream); `leader_last`:
    the same by the leader's last sequence of each lane's filters."""
    lanes = lanes_of(filters)
    if len(lanes) == 1:
        return await OrderedReader(nc, stream, lanes[0], on_message, start_seq=start_seq, api_timeout=api_timeout,
                                   leader_check=leader_check, leader_last=leader_last, deletes=deletes).run(timeout)
    return await _Merge(nc, stream, lanes, on_message, start_seq, api_timeout, leader_check, leader_last, deletes).run(timeout)


Frame = tuple[bytes, int, bytes, bytes]


class _Lane:
    def __init__(self) -> None:
        self.held: collections.deque[Frame] = collections.deque()
        self.over = False
        self.room = asyncio.Event()


class _Merge:
    """Lanes read at once; the merge hands over the lowest sequence at the head of a lane once
    every lane not over has a head (each lane is in stream order, so nothing lower can come)."""

    def __init__(self, nc: Client, stream: str, lanes: list[list[str]], on_message: OnMessage, start_seq: int,
                 api_timeout: float, leader_check: bool = False, leader_last: LeaderLast | None = None,
                 deletes: bool = True) -> None:
        self.lanes = [_Lane() for _ in lanes]
        self.readers = [OrderedReader(nc, stream, f, self._taker(lane), start_seq=start_seq, api_timeout=api_timeout,
                                      leader_check=leader_check, leader_last=leader_last, deletes=deletes)
                        for f, lane in zip(lanes, self.lanes, strict=True)]
        self.on_message = on_message
        self.moved = asyncio.Event()

    def _taker(self, lane: _Lane) -> OnMessage:
        def take(subject: bytes, seq: int, data: bytes, headers: bytes) -> Awaitable[None] | None:
            lane.held.append((subject, seq, data, headers))
            self.moved.set()
            if len(lane.held) < LANE_HELD:
                return None
            lane.room.clear()
            return self._room(lane)
        return take

    @staticmethod
    async def _room(lane: _Lane) -> None:
        await lane.room.wait()

    async def _read(self, reader: OrderedReader, lane: _Lane, timeout: float) -> None:
        try:
            await reader.run(timeout)
        finally:
            lane.over = True
            self.moved.set()

    async def run(self, timeout: float) -> int:
        tasks = [asyncio.ensure_future(self._read(r, lane, timeout)) for r, lane in zip(self.readers, self.lanes, strict=True)]
        try:
            async with asyncio.timeout(timeout):
                return await self._merge(tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _merge(self, tasks: list[asyncio.Task[None]]) -> int:
        handed, last = 0, 0
        while True:
            self.moved.clear()
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if any(not lane.held and not lane.over for lane in self.lanes):
                await self.moved.wait()
                continue
            heads = [lane for lane in self.lanes if lane.held]
            if not heads:
                return handed
            lane = min(heads, key=lambda held: held.held[0][1])
            frame = lane.held.popleft()
            if len(lane.held) <= LANE_HELD // 2:
                lane.room.set()
            if frame[1] <= last:
                continue  # on two lanes' filters
            last = frame[1]
            handed += 1
            then = self.on_message(*frame)
            if then is not None and inspect.isawaitable(then):
                await then
