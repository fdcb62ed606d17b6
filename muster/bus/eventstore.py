"""The log on JetStream: the event log port (`muster.ports.eventlog`) on the `EVENTS` stream.

Writes are `muster.bus.appends` (fenced by the subject's expected last sequence, de-duplicated
by idempotency keys, several events for one subject in one atomic batch); reads are here: batch
direct gets and ordered reads, each message decoded once from the wire.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from contracts import subjects
from contracts.events import EVENT_ADAPTER, EVENT_TYPES, parse_event
from contracts.records import (
    H_AGGREGATE,
    H_EXPECT,
    H_MSG_ID,
    H_TIME,
    H_TRACE,
    H_TYPE,
    H_VERSION,
    Append,
    Head,
    Recorded,
    Undecodable,
    recorded,
)

from ..ports.eventlog import ConcurrencyError, StoreError
from .appends import MAX_ATOMIC, LogWriter
from .bodies import H_BODY, Bodies, Offloaded, parse_stub
from .ordered import leader_next, read_in_order
from .protocol import header, parse_headers
from .wire import raw_subscribe, raw_unsubscribe

# The envelope types live in contracts.records, the port's errors in muster.ports.eventlog (no
# NATS import in either); they are re-exported here for the adapters that already name them.
__all__ = [
    "H_AGGREGATE", "H_EXPECT", "H_MSG_ID", "H_TIME", "H_TYPE", "H_VERSION", "MAX_ATOMIC", "Append", "ConcurrencyError",
    "EventStore", "NoDirectGet", "Recorded", "StoreError", "Undecodable", "full_recorded_from_msg", "inflate", "lenient_from_msg",
    "recorded", "recorded_from_msg",
]

READ_BATCH = 1000


class NoDirectGet(StoreError):
    """Nobody answers direct gets (503): a replicated stream's replicas are not serving yet."""


def _decode(subject: str, seq: int, data: bytes, headers: dict[str, str]) -> Recorded:
    """A stored message as a Recorded event; an offloaded body stays an `Offloaded` stub until
    the async readers fetch it (`inflate`)."""
    if H_BODY not in headers:
        return recorded(subject, seq, data, headers)
    time_text = headers.get(H_TIME) or headers.get("Nats-Time-Stamp")
    version = headers.get(H_VERSION)
    return Recorded(
        seq=seq, subject=subject,
        time=datetime.fromisoformat(time_text) if time_text else datetime.fromtimestamp(0, UTC),
        event=parse_stub(data), aggregate_id=headers.get(H_AGGREGATE), version=int(version) if version else None,
        trace=headers.get(H_TRACE),
    )


_TYPE, _MSG_ID = H_TYPE.encode(), H_MSG_ID.encode()


DECODE_ERRORS = (ValidationError, ValueError, KeyError, TypeError)
"""What decoding a stored message raises when the message is not a valid event: the same
every time it is read (pydantic's ValidationError and json's errors are ValueErrors too)."""


def undecodable(subject: str, seq: int, headers: dict[str, str], err: BaseException) -> Recorded:
    """The mark a lenient read puts where a message that is not a valid event is."""
    stamp = headers.get(H_TIME) or headers.get("Nats-Time-Stamp") or ""
    try:
        time = datetime.fromisoformat(stamp) if stamp else datetime.fromtimestamp(0, UTC)
    except ValueError:
        time = datetime.fromtimestamp(0, UTC)
    if isinstance(err, ValidationError):  # (its text lists every event type the union has)
        reason = "; ".join(f"{'.'.join(map(str, e['loc'][-1:])) or 'body'}: {e['msg']}" for e in err.errors()[:3])
    else:
        reason = f"{type(err).__name__}: {err}"
    return Recorded(seq=seq, subject=subject, time=time, event=Undecodable(reason[:300]))


def lenient_from_msg(msg: Msg) -> Recorded:
    """`recorded_from_msg`, with a message that is not a valid event as its `Undecodable` mark."""
    try:
        return recorded_from_msg(msg)
    except DECODE_ERRORS as err:
        return undecodable(msg.subject, msg.metadata.sequence.stream, dict(msg.headers or {}), err)


def recorded_from_msg(msg: Msg) -> Recorded:
    """For consumers: a JetStream message of the EVENTS stream as a Recorded event. Its event
    is an `Offloaded` stub if the body is in BODIES: pass it through `inflate` (or use
    `full_recorded_from_msg`)."""
    return _decode(msg.subject, msg.metadata.sequence.stream, msg.data, dict(msg.headers or {}))


_validate = EVENT_ADAPTER.validate_json
"""One compiled discriminated union over every event type: the body's `type` picks the model
inside pydantic-core, as cheap as a lookup by the type header (docs/benchmarks.md)."""

_FOLD_HEADERS = re.compile(rf"\r\n{H_AGGREGATE}: *([^\r]+)\r\n{H_VERSION}: *([0-9]+)\r\n{H_TIME}: *([^\r]+)\r\n")


def _from_wire(subject: bytes, seq: int, data: bytes, header_block: bytes) -> Recorded:
    """A message as `wire` hands it over, decoded once. The three headers a fold needs are
    taken with one regular expression in the order `Append.headers()` writes them (a third
    of the cost of parsing every header); any other header block, or an offloaded body (a
    stub, see `inflate`), takes the general path."""
    block = header_block.decode("utf-8", "replace")
    found = _FOLD_HEADERS.search(block)
    if found is None or H_BODY in block:
        return _decode(subject.decode(), seq, data, parse_headers(header_block)[1])
    aggregate, version, time_text = found.groups()
    return Recorded(seq, subject.decode(), datetime.fromisoformat(time_text), _validate(data), aggregate, int(version))


async def inflate(bodies: Bodies, r: Recorded) -> Recorded:
    """The recorded event with its offloaded body put back (unchanged if it was inline)."""
    if not isinstance(r.event, Offloaded):
        return r
    data = await bodies.get(r.subject, r.event)
    model = EVENT_TYPES.get(r.event.type)
    parse = model.model_validate_json if model is not None else parse_event
    return replace(r, event=await asyncio.to_thread(parse, data))  # megabytes: off the loop


async def full_recorded_from_msg(msg: Msg, bodies: Bodies) -> Recorded:
    return await inflate(bodies, recorded_from_msg(msg))


class EventStore:
    """The event log port (`muster.ports.eventlog.EventLog`) on the `EVENTS` stream. With
    `group_commit` (the default), `submit`s made while one is on its way go together
    (`muster.bus.appends`); without it, each goes alone at once. `writer_name`: named on every
    event this store appends (`Muster-Writer`: the log then shows which planner acted for a
    cluster when, so fencing is checked from it, tests/fault). `linked_chains`: whether a
    chain's links name the one before (`Nats-Expected-Last-Msg-Id`); None: only on a stream of
    one replica (see `append_chain`)."""

    def __init__(self, nc: Client, stream: str = subjects.EVENTS_STREAM, timeout: float = 10.0, *,
                 group_commit: bool = True, writer_name: str | None = None, linked_chains: bool | None = None,
                 lenient: bool = False) -> None:
        self.nc = nc
        self.lenient = lenient
        """Reads put an `Undecodable` mark where a stored message is not a valid event, and go
        on; otherwise the read fails (StoreError). For readers that show the log to people
        (the tracker), not for a service that folds it to act on it."""
        self.linked_chains = linked_chains
        self.writer_name = writer_name
        self.js = nc.jetstream(timeout=timeout)
        self.stream = stream
        self.timeout = timeout
        self._replicated: bool | None = None
        self._asking: asyncio.Future[Any] | None = None
        self.bodies = Bodies(self.js)
        self.writer = LogWriter(nc, self.bodies, self._last, timeout, group_commit=group_commit, name=writer_name)

    # -- writing ------------------------------------------------------------------------

    async def append(self, subject: str, items: Sequence[Append], expect_last_seq: int | None = None) -> list[int]:
        """Append `items` to `subject`; returns their stream sequences (the port's contract;
        past `MAX_ATOMIC` items, consecutive atomic parts, each a prefix of the whole)."""
        return await self.writer.append(subject, items, expect_last_seq)

    async def append_chain(self, parts: Sequence[tuple[str, Sequence[Append], int | None]]) -> list[list[int]]:
        """Each event as if appended alone right after the one before: in one round trip on a
        stream of one replica; on a replicated one, one at a time, each fenced on what its
        subject got. nats-server 2.15.1 checks `Nats-Expected-Last-Msg-Id` again when a replica
        applies the message, against a last message id a replica that was cut off and caught up
        does not hold, and stops the stream with a critical write error ("last msgid mismatch",
        then no quorum: the whole log unavailable; tests/fault/test_partitions_long.py found it
        once chains were common: docs/decisions/0036)."""
        linked = self.linked_chains if self.linked_chains is not None else not await self._is_replicated()
        return await self.writer.chain(parts, linked=linked)

    async def append_fenced(self, entries: Sequence[tuple[str, Append]], expect_last_seq: int,
                            subject_filter: str, more: Sequence[tuple[int, int, str]] = ()) -> list[int]:
        """Events on several subjects, all or none, fenced on the subjects a filter matches
        (and each of `more` from its entry on)."""
        return await self.writer.fenced(entries, expect_last_seq, subject_filter, more)

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]:
        """One event with no expected sequence, from synchronous code; the future gets its
        sequence (`muster.bus.appends`: with the group waiting, or at once with `now`)."""
        return self.writer.submit(subject, item, now=now)

    # -- reading ------------------------------------------------------------------------

    async def last_seq(self, subject: str) -> int:
        """The sequence of the subject's last event, 0 if it has none."""
        last = await self._last(subject)
        return last[0] if last else 0

    async def _last(self, subject: str) -> tuple[int, dict[str, str]] | None:
        if await self._is_replicated():
            try:  # the leader: it has every acknowledged write (see `_from_leader`)
                msg = await self.js.get_last_msg(self.stream, subject)
            except NotFoundError:
                return None
            return (msg.seq, dict(msg.headers or {})) if msg.seq is not None else None
        raw: list[tuple[int, dict[str, str]]] = []
        await self._direct_batch({"multi_last": [subject], "batch": 1}, raw=raw)
        return raw[-1] if raw else None

    async def subjects(self, subject_filter: str) -> dict[str, int]:
        """Every subject matching the filter that holds events, with how many."""
        out: dict[str, int] = {}
        while True:
            request = json.dumps({"subjects_filter": subject_filter, "offset": len(out)}).encode()
            reply = await self.nc.request(f"$JS.API.STREAM.INFO.{self.stream}", request, timeout=self.timeout)
            answer = json.loads(reply.data)
            if "error" in answer:
                raise StoreError(f"subjects of {subject_filter}: {answer['error'].get('description')}")
            page = answer.get("state", {}).get("subjects") or {}
            out.update(page)
            if not page or len(out) >= int(answer.get("total", 0)):
                return out

    async def subject_names(self, subject_filter: str) -> set[str]:
        """Every subject matching the filter that holds events."""
        return set(await self.subjects(subject_filter))

    async def _end_check(self, filters: Sequence[str]) -> dict[str, Any]:
        """How an ordered read's end of `filters` is confirmed (`ordered.read_in_order`'s
        options): on a replicated stream, with the leader's message API (`ordered.leader_next`)."""
        return {"leader_check": await self._is_replicated()}

    async def _is_replicated(self) -> bool:
        if self._replicated is None:
            if self._asking is None:  # one question, however many readers ask at once
                self._asking = asyncio.ensure_future(self.js.stream_info(self.stream))
            try:
                info = await asyncio.shield(self._asking)
            except Exception:
                self._asking = None
                raise
            self._replicated = info.config.num_replicas is not None and info.config.num_replicas > 1
        return self._replicated

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        """Every event on subjects matching the filter, in log order, including every event
        acknowledged to anyone before the call."""
        out: list[Recorded] = []
        seq = start_seq
        while True:
            # `up_to_seq` is applied here: nats-server 2.15 ignores it in a batch direct get.
            try:
                batch = await self._direct_batch({"seq": seq, "batch": READ_BATCH, "next_by_subj": subject_filter})
            except NoDirectGet:
                if not await self._is_replicated():
                    raise
                break  # a stream just created or electing: the leader answers the rest
            if up_to_seq is not None and batch and batch[-1].seq > up_to_seq:
                return [await inflate(self.bodies, r) for r in out + [r for r in batch if r.seq <= up_to_seq]]
            out.extend(batch)
            seq = batch[-1].seq + 1 if batch else seq
            if len(batch) < READ_BATCH:
                break
        if await self._is_replicated():
            out.extend(await self._from_leader(subject_filter, seq, up_to_seq))
        return [await inflate(self.bodies, r) for r in out]

    async def read_through(self, subject: str, seq: int) -> list[Recorded]:
        """The subject's events up to the one at `seq`, which the caller was delivered (`read`
        has it: on a replicated stream its end is the leader's)."""
        return await self.read(subject, up_to_seq=seq)

    async def read_heads(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None,
                         timeout: float = 600.0) -> list[Head]:
        """`read`'s events as their heads: an ordered read of the filter (`replay`'s), two
        headers of each message looked up, its body neither decoded nor fetched if offloaded.
        A batch direct get on a wildcard filter costs the server more than the decoding saves
        (docs/benchmarks.md "A cancel's close": 120,000 records of a job in 4.5 s read, 1.3 s
        so). Complete as `read` is (the leader checked on a replicated stream)."""
        out: list[Head] = []

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
            if up_to_seq is None or seq <= up_to_seq:
                out.append(Head(seq, subject.decode(), header(header_block, _TYPE) or "", header(header_block, _MSG_ID)))

        try:
            await read_in_order(self.nc, self.stream, [subject_filter], on_message, start_seq=start_seq,
                                api_timeout=self.timeout, timeout=timeout, **await self._end_check([subject_filter]))
        except TimeoutError:
            raise
        except Exception as err:
            raise StoreError(f"read of {subject_filter} stopped: {err}") from err
        return out

    async def _from_leader(self, subject_filter: str, seq: int, up_to_seq: int | None) -> list[Recorded]:
        """Direct gets may be answered by any replica, and a follower may not have applied
        the latest writes yet (server 2.15 ignores ADR-53's `min_last_seq`). A replica holding
        sequence N holds everything before it, so only what follows can be missing: ask the
        leader for the next match (`ordered.leader_next`), and read on from it while it has
        more. Usually this finds nothing: one round trip."""
        out: list[Recorded] = []
        while up_to_seq is None or seq <= up_to_seq:
            frame = await leader_next(self.nc, self.stream, subject_filter, seq, self.timeout)
            if frame is None or (up_to_seq is not None and frame[1] > up_to_seq):
                break
            out.append(self._decoded(*frame))
            seq = frame[1] + 1
        return out

    def _decoded(self, subject: bytes, seq: int, data: bytes, header_block: bytes) -> Recorded:
        if not self.lenient:
            return _from_wire(subject, seq, data, header_block)
        try:
            return _from_wire(subject, seq, data, header_block)
        except DECODE_ERRORS as err:
            return undecodable(subject.decode(), seq, parse_headers(header_block)[1], err)

    async def replay(
        self, subject_filter: str | Sequence[str], on_event: Callable[[Recorded], None], timeout: float = 600.0,
        *, start_seq: int = 1, bodies: bool = True,
    ) -> int:
        """Feed every event matching the filter (or any of several filters), from `start_seq`
        on, in log order, to `on_event`; returns how many. For bulk reads (a service rebuilding
        its state): ordered push consumers read from the wire (`ordered.read_in_order`: one for
        the literal subjects, one a wildcard filter, merged by sequence), each message decoded
        once. An offloaded body is fetched
        before its event is handed over, the read paused meanwhile (nothing after it is
        taken in until then); with `bodies=False` its stub is handed over as it is. On a
        replicated stream its end is confirmed with the leader, as `read`'s is: it includes
        every event acknowledged to anyone before the call."""
        filters = [subject_filter] if isinstance(subject_filter, str) else list(subject_filter)

        async def hand_over(r: Recorded) -> None:
            on_event(await inflate(self.bodies, r))

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> Awaitable[None] | None:
            r = self._decoded(subject, seq, data, header_block)
            if bodies and isinstance(r.event, Offloaded):
                return hand_over(r)
            on_event(r)
            return None

        try:
            return await read_in_order(self.nc, self.stream, filters, on_message, start_seq=start_seq, api_timeout=self.timeout,
                                       timeout=timeout, **await self._end_check(filters))
        except TimeoutError:
            raise
        except Exception as err:
            raise StoreError(f"replay of {subject_filter} stopped: {err}") from err

    async def read_many(self, subject_filters: Sequence[str], up_to_seq: int | None = None) -> list[Recorded]:
        merged: dict[int, Recorded] = {}
        for f in subject_filters:
            for r in await self.read(f, up_to_seq=up_to_seq):
                merged[r.seq] = r
        return [merged[s] for s in sorted(merged)]

    async def _direct_batch(
        self, request: dict[str, Any], raw: list[tuple[int, dict[str, str]]] | None = None
    ) -> list[Recorded]:
        """Batch direct get: the server streams the messages, then a 204 EOB (or 404). Read
        from the wire (`wire.raw_subscribe`): one header parse per message."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got: list[Recorded] = []
        failure: list[BaseException] = []

        def on_raw(subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
            if done.done():
                return
            status, headers = parse_headers(header_block)
            if status:
                if status == "503":
                    failure.append(NoDirectGet(f"no replica answers direct gets of {self.stream} yet"))
                elif status not in ("204", "404"):
                    failure.append(StoreError(f"direct get failed: {status} {headers.get('Description', '')}"))
                done.set_result(None)
                return
            if raw is not None:
                raw.append((int(headers["Nats-Sequence"]), headers))
                return
            try:
                got.append(_decode(headers["Nats-Subject"], int(headers["Nats-Sequence"]), data, headers))
            except DECODE_ERRORS as err:
                if self.lenient and "Nats-Subject" in headers and "Nats-Sequence" in headers:
                    got.append(undecodable(headers["Nats-Subject"], int(headers["Nats-Sequence"]), headers, err))
                else:
                    failure.append(StoreError(f"unreadable event at seq {headers.get('Nats-Sequence')}: {err}"))
            except Exception as err:  # noqa: BLE001 - a message that is not a valid event must not hang the read
                failure.append(StoreError(f"unreadable event at seq {headers.get('Nats-Sequence')}: {err}"))

        inbox = self.nc.new_inbox()
        sub = await raw_subscribe(self.nc, inbox, on_raw)
        try:
            await self.nc.publish(f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(request).encode(), reply=inbox)
            await asyncio.wait_for(done, self.timeout)
        finally:
            await raw_unsubscribe(self.nc, sub)
        if failure:
            raise failure[0]
        return got
