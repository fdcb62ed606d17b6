"""The log read only in forms nats-server can scope by the request's subject (decision 0057).

`EventStore` reads an aggregate by a batch direct get (`$JS.API.DIRECT.GET.EVENTS` with
`next_by_subj` in the body), confirms a replicated log's end by a message get (the filter in the
body too), and lists subjects by `EVENTS`' info with a subject filter in the body: a service
with those rights reads every tenant's events whatever its permissions say, since permissions
see subjects, never bodies. `ScopedEventStore` is the same port read otherwise, for the
services whose rights name the filters they read (the pool service, the solver, governance,
the notifier):

- events of a filter: a named ordered consumer with its one filter in the request's subject
  (`$JS.API.CONSUMER.CREATE.EVENTS.<name>.<filter>`, `muster.bus.ordered`); for a literal
  subject, first its last sequence (below): nothing at or after the sequence asked from, nothing
  to read (one round trip, what a catch-up finds most often);
- a subject's last event (a refused append's check): the direct get whose subject is in the API
  subject (`$JS.API.DIRECT.GET.EVENTS.<subject>`, an empty body);
- the subjects of a filter: an ordered consumer of each subject's last event;
- whether the log is replicated: the list of streams (`STREAM.LIST`, whose answer names no
  subject of a stream), not `EVENTS`' info.

On a replicated log a consumer or a direct get may be answered by a follower that has not
applied the latest writes yet; the message API, which the leader answers, carries its filter in
the body. The leader answers a publish too: one fenced on a sequence no subject can have
(`Nats-Expected-Last-Subject-Sequence`, with `...-Subject` naming a filter) is refused with the
leader's last sequence of the subject or filter ("wrong last sequence: N") and stores nothing
(`fenced_last`). So a read goes on until it has reached that sequence. That takes the right to
publish on a subject of the log: a service that has it on what it reads (the pool its pools and
requests, the solver the layouts) says so with `confirm=True`; one that has it on some (the
governance service on its own entities, not on the clusters it reads; the notifier on its
notifications, not on the jobs) names those filters, and the probe of any other filter goes on
the first of them, the filter read in `...-Subject` (nats-server fences on that, whatever the
subject). A subject read up to an event the reader was delivered (`read_through`: the
notifier's job ends) needs no leader: the read goes on until it has that sequence.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.errors import NotFoundError

from contracts.records import Recorded

from ..ports.eventlog import StoreError
from ..ports.memory import matches
from .appends import FENCE_BUSY
from .eventstore import EventStore, inflate
from .ordered import OrderedReader, read_in_order

READ_TIMEOUT_S = 600.0
"""A whole read's limit (a pool's history may be long); a consumer that stops answering is
made again long before (`OrderedReader`'s heartbeats)."""

UNREACHABLE = str(2**63 - 1)
"""A subject's last sequence no log reaches: the fence of a probe that must never be stored."""
WRONG_LAST = 10071
PROBE_TOKEN = "_"
"""What a probe of a wildcard filter puts for each wildcard token of the subject it is published
on (one the service may publish on); the filter itself goes in a header."""


def literal(subject_filter: str) -> bool:
    return not any(t in ("*", ">") for t in subject_filter.split("."))


def probe_subject(subject_filter: str) -> str:
    """Where the probe of a filter is published: the filter, a token for each wildcard."""
    return ".".join(PROBE_TOKEN if t in ("*", ">") else t for t in subject_filter.split("."))


async def fenced_last(nc: Client, stream: str, subject_filter: str, timeout: float, on: str | None = None) -> int:
    """The stream leader's last sequence of a subject or filter (0: none), from a publish on it
    fenced on a sequence it cannot have: refused (10071) with the leader's own, nothing stored.
    Busy (another fenced write on that subject being replicated: 10164), or no responder (the
    server the caller is on has not the stream's interest for a moment: a follower just resumed,
    a leader being elected): asked again until `timeout`. `on`: a
    subject of the stream the caller may publish on, to carry the probe of a filter it may not
    publish on (the filter in `...-Subject`: nats-server fences on it, whatever the subject)."""
    headers = {"Nats-Expected-Stream": stream, "Nats-Expected-Last-Subject-Sequence": UNREACHABLE}
    subject = on if on is not None else probe_subject(subject_filter)
    if not literal(subject_filter) or on is not None:
        headers["Nats-Expected-Last-Subject-Sequence-Subject"] = subject_filter
    loop = asyncio.get_running_loop()
    deadline, tries = loop.time() + timeout, 0
    while True:
        try:
            reply = await nc.request(subject, b"", headers=headers, timeout=max(0.1, deadline - loop.time()))
        except NoRespondersError:
            if loop.time() >= deadline:
                raise
            answer: dict[str, Any] = {"error": {"err_code": FENCE_BUSY}}  # (as busy: nothing stored, ask again)
        else:
            answer = json.loads(reply.data)
        error = answer.get("error") or {}
        if error.get("err_code") == WRONG_LAST:
            return int(str(error.get("description", "")).rsplit(":", 1)[1])
        if error.get("err_code") == FENCE_BUSY and loop.time() < deadline:
            tries += 1
            await asyncio.sleep(0.002 * 2 ** min(tries, 6))  # (a replication round, bounded by the deadline)
            continue
        raise StoreError(f"the leader's last sequence of {subject_filter}: unexpected answer {answer}")


class ScopedEventStore(EventStore):
    """`EventStore` with every read in a form whose filter is in the request's subject.
    `confirm`: the service may publish on every subject it reads (True), or on those of these
    filters, so a replicated log's reads of them are confirmed with the leader (`fenced_last`);
    the others are not."""

    def __init__(self, nc: Client, *args: Any, confirm: bool | tuple[str, ...] = True, deletes: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(nc, *args, **kwargs)
        self.confirm = confirm
        self.deletes = deletes
        """Deletes the consumers it read with (a service whose rights delete none leaves them to
        the server, `ordered.NO_DELETE_INACTIVE_S`)."""

    async def _is_replicated(self) -> bool:
        if self._replicated is None:
            for info in await self.js.streams_info():
                if info.config.name == self.stream:
                    self._replicated = info.config.num_replicas is not None and info.config.num_replicas > 1
                    break
            else:
                self._replicated = False  # (no log yet: one is declared before anything reads it)
        return self._replicated

    async def _leader_last(self, subject_filter: str) -> int:
        return await fenced_last(self.nc, self.stream, subject_filter, self.timeout, on=self._probe_on(subject_filter))

    def _probe_on(self, subject_filter: str) -> str | None:
        """Where the probe of a filter goes: on the filter itself if the service may publish
        there, else on the first filter of `confirm` (one of its own: the governance service's
        entities for a cluster, the notifier's notifications for a job, a cluster or a catalog)."""
        if isinstance(self.confirm, bool) or any(matches(allowed, probe_subject(subject_filter)) for allowed in self.confirm):
            return None
        return probe_subject(self.confirm[0])

    async def _confirming(self, filters: Sequence[str]) -> bool:
        return self.confirm is not False and self.confirm != () and await self._is_replicated()

    async def _end_check(self, filters: Sequence[str]) -> dict[str, Any]:
        return {"deletes": self.deletes} | ({"leader_last": self._leader_last} if await self._confirming(filters) else {})

    async def _last(self, subject: str) -> tuple[int, dict[str, str]] | None:
        leader = await self._leader_last(subject) if await self._confirming([subject]) else None
        loop = asyncio.get_running_loop()
        deadline, tries = loop.time() + self.timeout, 0
        while True:
            try:  # (nats-py sends a get of a subject's last message as the subject form, no body)
                msg = await self.js.get_last_msg(self.stream, subject, direct=True)
            except NotFoundError:
                msg = None
            seq = msg.seq if msg is not None and msg.seq is not None else 0
            if leader is None or seq >= leader or loop.time() >= deadline:
                return (seq, dict(msg.headers or {})) if msg is not None and seq else None
            tries += 1  # a follower that has not applied the leader's last write yet answered
            await asyncio.sleep(0.005 * 2 ** min(tries, 6))

    async def read(self, subject_filter: str, start_seq: int = 1, up_to_seq: int | None = None) -> list[Recorded]:
        if literal(subject_filter):
            if await self._confirming([subject_filter]):
                last = await self._leader_last(subject_filter)
            else:
                found = await self._last(subject_filter)
                last = found[0] if found else 0
            if last < start_seq:
                return []
        out: list[Recorded] = []

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
            if up_to_seq is None or seq <= up_to_seq:
                out.append(self._decoded(subject, seq, data, header_block))

        await read_in_order(self.nc, self.stream, [subject_filter], on_message, start_seq=start_seq,
                            api_timeout=self.timeout, timeout=READ_TIMEOUT_S, **await self._end_check([subject_filter]))
        return [await inflate(self.bodies, r) for r in out]

    async def read_through(self, subject: str, seq: int) -> list[Recorded]:
        """The subject's events up to the one at `seq`, which the caller was delivered: a consumer
        of a replica that has not applied it yet is followed, after a short pause, by another,
        until the read has it (`OrderedReader.reach_seq`). A reader that may not probe the leader
        (`confirm`) still reads what it was told of; what the subject got before is in it."""
        out: list[Recorded] = []

        def on_message(subject_: bytes, seq_: int, data: bytes, header_block: bytes) -> None:
            if seq_ <= seq:
                out.append(self._decoded(subject_, seq_, data, header_block))

        # (no last sequence asked first, as `read` does: the subject has the event at `seq`; one
        # server holds what it delivered, so only a replicated log's reader reads on for it)
        # (nor the leader's last: what came after `seq` is not read)
        replicated = await self._is_replicated()
        await OrderedReader(self.nc, self.stream, [subject], on_message, api_timeout=self.timeout,
                            reach_seq=seq if replicated else None, reach_wait=self.timeout,
                            deletes=self.deletes).run(READ_TIMEOUT_S)
        return [await inflate(self.bodies, r) for r in out]

    async def subject_names(self, subject_filter: str) -> set[str]:
        names: set[str] = set()

        def on_message(subject: bytes, seq: int, data: bytes, header_block: bytes) -> None:
            names.add(subject.decode())

        # (each subject's last event: a subject a lagging replica lacks is met at its next read)
        await OrderedReader(self.nc, self.stream, [subject_filter], on_message, last_per_subject=True,
                            api_timeout=self.timeout, deletes=self.deletes).run(READ_TIMEOUT_S)
        return names

    async def subjects(self, subject_filter: str) -> dict[str, int]:
        """Not in a scoped form: how many events each subject holds is in `EVENTS`' info only."""
        raise NotImplementedError("ScopedEventStore names subjects (subject_names), it does not count their events")
