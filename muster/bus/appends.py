"""The log's write side, on the connection's one publisher (`muster.bus.wire.Publisher`).

- `append`: one event is one publish; several for one subject one atomic batch (all land or
  none), the first fenced by the subject's expected last sequence; past `MAX_ATOMIC` events,
  consecutive batches, each fenced on the one before (a prefix is a valid history).
- `chain`: events that would be appended one at a time, sent at once (docs/decisions/0011):
  the first of each subject carries its expected last sequence, every later one
  `Nats-Expected-Last-Msg-Id` = the key of the one before, which the server checks against the
  whole stream's last message. So the log holds a prefix of the chain, never a merge; when
  another writer's message came between two links, the rest goes one at a time, each fenced on
  what its subject got.
- `fenced`: events on several subjects in one atomic batch, fenced on the last sequence of all
  the subjects a filter matches (an apply validated against everything it read).
- `submit`: one event with no expected sequence (its idempotency key makes a repeat harmless),
  from synchronous code, answered into a future. With `group_commit` (docs/decisions/0006 and
  0012) it goes with the others submitted in the same turn of the event loop, or, while a
  group is on its way, with the next one; fewer than `smallest_batch` go as that many single
  appends at once, more as one atomic batch (one disk sync for all). `now` (a claim sent from
  the read loop): alone and at once if nothing else is on its way. An event with a fence
  (`Append.only_if_empty`, a claim) goes to its fence's lane instead: one atomic batch on a
  fence at a time, a busy one sent again whole, a few turns of the loop after one that stored
  segment steps' claims so that their plugins' outcomes, if quick, join the claims that waited
  (docs/decisions/0050). A segment step's outcome (`Append.lane`) goes in its lane beside the
  next step's claim, fenced on that step's end
  (`Append.step_fence`; a refused batch is sorted out, `_sort_refusal`: docs/decisions/0058).
  Without group commit, every other submit goes alone at once.

Every event goes under the trace context it was given, or the current span's
(`muster.tracing`): taken when `submit` is called, since the group goes out from another task.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

from nats.aio.client import Client

from contracts.records import H_EXPECT, H_MSG_ID, H_TYPE, H_WRITER, Append
from contracts.subjects import fence_subject
from muster import tracing

from ..ports.eventlog import ConcurrencyError, StepEnded, StoreError
from .bodies import H_BODY, INLINE_LIMIT, Bodies, stub
from .wire import Publisher

WRONG_LAST_SEQUENCE = (10071, 10164)
FENCE_BUSY = 10164
"""On a replicated stream, a message expecting a subject's last sequence while another such
message on that subject is still being replicated: refused, whatever the subject holds (every
claim of a job names its fence: of 20 at once, 19 got this). Not a closed fence (10071)."""
FENCE_BUSY_S = 5.0
"""How long a claim is sent again while its fence stays busy; then it fails and its task comes
back. A time, not a count of tries: on a loaded host one replication round outlasted 8 short
tries (as it was bounded before), and a claim's message is held for far longer (its ack wait)."""


def _fence_of(item: Append) -> str | None:
    """The subject an event is appended only while empty: a claim's cancel fence, or a segment
    step's outcome's next step's end (`Append.step_fence`)."""
    return item.only_if_empty or item.step_fence


def _busy_pause(tries: int) -> float:
    """A few ms, doubling to at most ~0.16 s: another write on the fence lands within a round."""
    return random.uniform(0.002, 0.01) * 2.0 ** min(tries, 4)
WRONG_LAST_MSG_ID = 10070
"""A chain's link whose predecessor is not the stream's last message."""
BATCH_DUPLICATE = 10201
"""An atomic batch holding an idempotency key that was stored before."""
MAX_ATOMIC = 1000
"""The most messages the server takes in one atomic batch (error 10199)."""
SMALLEST_BATCH = 8
"""Fewer waiting submits than this go as single appends at once rather than one atomic batch
(a batch's commit costs as much as several single appends on file storage: decision 12)."""
H_EXPECT_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
LANE_GATHER_TURNS = 4
"""Turns of the event loop a lane lets pass after storing segment steps' claims (`Append.returns`)
before it sends what waits: a plugin that returns at once (a no-op, a simulated cloud) submits
the step's outcome and the next step's claim to the same lane within ~2 turns, and they then go
in the same batch as the claims that waited meanwhile instead of one of their own. Without it,
two groups of claims in one lane stay apart for a whole segment, each step a batch of each (~1
ms of nats-server's CPU a batch): a 100-node create made ~50 outcome batches instead of ~30. A
slower plugin's outcome comes later anyway; the cost is these turns' latency (tens of µs) on
claims that waited. A plain task's outcome goes to the group commit, not the lane: its claims
do not wait (docs/decisions/0050)."""

LastOf = Callable[[str], Awaitable["tuple[int, dict[str, str]] | None"]]
"""A subject -> (sequence, headers) of its last event, None if it has none."""
Part = tuple[str, Sequence[Append], "int | None"]
"""(subject, events, expected last sequence of the subject or None) as for `append`."""


class _FenceBusy(Exception):
    """A write refused because another write expecting its subject (a claim's: its fence
    subject) was in flight (`FENCE_BUSY`): undecided, sent again."""


class _Fenced(Exception):
    """A group refused because an event in it is appended only while its fence subject is empty
    (`Append.only_if_empty`), and one is not."""


class _Refusal(Exception):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("description") or "refused")
        self.code = answer.get("err_code")
        self.description = str(answer.get("description") or "")


def _seq(answer: bytes) -> int:
    """The stream sequence a JetStream ack gives, or `_Refusal` with the server's error."""
    got = json.loads(answer)
    if "error" in got:
        raise _Refusal(got["error"])
    return int(got["seq"])


def _expect(headers: dict[str, str], subject: str, seq: int, subject_filter: str | None = None) -> None:
    """The headers that fence a message on the last sequence of `subject_filter`, or of the
    subject it is fenced on (`fence_subject`: a job's task records on the job's subject)."""
    headers[H_EXPECT] = str(seq)
    on = subject_filter or fence_subject(subject)
    if on != subject:
        headers[H_EXPECT + "-Subject"] = on


class LogWriter:
    def __init__(self, nc: Client, bodies: Bodies, last: LastOf, timeout: float, *, group_commit: bool = False,
                 smallest_batch: int = SMALLEST_BATCH, most: int = MAX_ATOMIC, name: str | None = None) -> None:
        self.nc, self.bodies, self.last, self.timeout, self.name = nc, bodies, last, timeout, name
        self.group_commit, self.smallest_batch, self.most = group_commit, smallest_batch, most
        self.sent = 0
        """Submits sent so far, a batch or a single event each (`events / sent`: the mean group)."""
        self.events = 0
        self._waiting: list[tuple[str, Append, asyncio.Future[int]]] = []
        self._sending: asyncio.Future[Any] | None = None
        self._retrying: set[asyncio.Task[None]] = set()
        """Claims sent again alone after their fence was busy (`_stored`, without group commit)."""
        self._lanes: dict[str, _Lane] = {}
        """Claims waiting or on their way, by fence subject (`_send_lane`)."""
        self.busy = 0
        """Writes (claims, batches of them) refused because their subject or fence was busy (`FENCE_BUSY`)."""

    @property
    def publisher(self) -> Publisher:
        return Publisher.of(self.nc)

    # -- encoding ------------------------------------------------------------------------------

    def _headers(self, item: Append) -> dict[str, str]:
        headers = item.headers()
        if self.name is not None and item.writer is None:  # who wrote it, for fencing checks (tests/fault)
            headers[H_WRITER] = self.name
        if item.trace is None and tracing.enabled():
            tracing.headers(headers)
        return headers

    def _inline(self, item: Append) -> tuple[bytes, dict[str, str]] | None:
        data = item.event.model_dump_json().encode()
        return (data, self._headers(item)) if len(data) <= INLINE_LIMIT else None

    async def _encode(self, subject: str, item: Append) -> tuple[bytes, dict[str, str]]:
        """The message for one event: its JSON, or, past `INLINE_LIMIT`, a reference to the
        JSON stored in BODIES (`muster.bus.bodies`)."""
        headers = self._headers(item)
        data = item.event.model_dump_json().encode()
        if len(data) > INLINE_LIMIT:
            ref, parts = await self.bodies.put(subject, data)
            headers[H_BODY] = ref
            data = stub(headers[H_TYPE], getattr(item.event, "v", None), ref, len(data), parts)
        return data, headers

    # -- appends -------------------------------------------------------------------------------

    async def append(self, subject: str, items: Sequence[Append], expect_last_seq: int | None) -> list[int]:
        seqs: list[int] = []
        for start in range(0, len(items), MAX_ATOMIC):
            part = items[start : start + MAX_ATOMIC]
            seqs += await self._append(subject, part, expect_last_seq if start == 0 else seqs[-1])
        return seqs

    async def _append(self, subject: str, items: Sequence[Append], expect_last_seq: int | None) -> list[int]:
        loop = asyncio.get_running_loop()
        until, attempt = loop.time() + FENCE_BUSY_S, 0
        while True:
            try:
                return await self._append_once(subject, items, expect_last_seq)
            except _FenceBusy:
                self.busy += 1
                if loop.time() >= until:
                    fence = _fence_of(items[-1])
                    if fence is not None:
                        raise StoreError(f"{subject}: {fence} stayed busy ({FENCE_BUSY_S:g} s); the task comes back") from None
                    raise StoreError(f"{subject}: another write to it stayed in flight ({FENCE_BUSY_S:g} s); "
                                     "nothing known stored: try again") from None
                # A bounded retry of one write, not a poll: another write expecting the subject
                # (a claim on the fence) is being replicated; a few ms later it lands, then ours.
                await asyncio.sleep(_busy_pause(attempt))
                attempt += 1

    async def _append_once(self, subject: str, items: Sequence[Append], expect_last_seq: int | None) -> list[int]:
        try:
            if len(items) == 1:
                data, headers = await self._encode(subject, items[0])
                if expect_last_seq is not None:
                    _expect(headers, subject, expect_last_seq)
                await self.publisher.start()
                return [_seq(await self.publisher.future(subject, data, headers, self.timeout))]
            last = await self._batch([(subject, item) for item in items], expect_last_seq)
            return list(range(last - len(items) + 1, last + 1))
        except _Refusal as err:
            if err.code not in WRONG_LAST_SEQUENCE + (BATCH_DUPLICATE,):
                raise StoreError(f"{subject}: {err.description} (code {err.code})") from None
            if err.code == FENCE_BUSY and _fence_of(items[-1]) is not None:
                raise _FenceBusy from None
            if err.code in WRONG_LAST_SEQUENCE and items[-1].step_fence is not None:
                raise StepEnded(f"{subject}: {items[-1].step_fence} is closed ({err.description})") from None
            if err.code in WRONG_LAST_SEQUENCE and items[-1].only_if_empty is not None:
                # Its fence is closed. Not a retry that landed: a claim's key names its delivery,
                # and its writer may not read the log's last message anyway (a provisioner).
                raise ConcurrencyError(f"{subject}: {items[-1].only_if_empty} is closed ({err.description})") from None
            # The server checks the expected sequence before de-duplicating, so a retry of
            # an append that did land looks like a stale write. It is a duplicate if the
            # subject's last event carries the retried append's last idempotency key.
            last_event = await self.last(subject)
            if last_event is not None and last_event[1].get(H_MSG_ID) == items[-1].msg_id:
                return list(range(last_event[0] - len(items) + 1, last_event[0] + 1))
            if err.code == FENCE_BUSY:
                # Busy decides nothing: the write in flight may be another writer's that will
                # win, or ours, sent before, whose fate the leader does not know yet (it can be
                # lost with the leader's term). Taken for a conflict, a solver acked a request
                # as "already answered" that nobody answered: the job waited for good (the
                # soak, session 37). Asked again until it is decided.
                raise _FenceBusy from None
            raise ConcurrencyError(f"{subject}: {err.description}") from None

    async def fenced(self, entries: Sequence[tuple[str, Append]], expect_last_seq: int, subject_filter: str,
                     more: Sequence[tuple[int, int, str]] = ()) -> list[int]:
        """Events on several subjects in one atomic batch, refused if any subject matching the
        filter moved past `expect_last_seq` (`Nats-Expected-Last-Subject-Sequence-Subject`), or,
        for each `(index, seq, filter)` of `more`, any subject matching that filter moved past
        `seq` (the server checks each message's expectation against the stream as the batch's
        earlier messages left it)."""
        try:
            last = await self._batch(entries, expect_last_seq, subject_filter, more)
        except _Refusal as err:
            if err.code in WRONG_LAST_SEQUENCE:
                raise ConcurrencyError(f"{subject_filter}: {err.description}") from None
            raise StoreError(f"{subject_filter}: {err.description} (code {err.code})") from None
        return list(range(last - len(entries) + 1, last + 1))

    async def _batch(self, entries: Sequence[tuple[str, Append]], expect_last_seq: int | None,
                     expect_filter: str | None = None, more: Sequence[tuple[int, int, str]] = ()) -> int:
        """One atomic batch (the headers are the protocol); returns the last one's sequence."""
        batch_id = f"{entries[0][1].msg_id}~{len(entries)}"[:64]
        encoded = [(subject, *await self._encode(subject, item)) for subject, item in entries]  # bodies first
        await self.publisher.start()
        for i, (_, _, headers) in enumerate(encoded, start=1):
            headers.update({"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)})
        if expect_last_seq is not None:
            _expect(encoded[0][2], encoded[0][0], expect_last_seq, expect_filter)
        for at, seq, on in more:
            _expect(encoded[at][2], encoded[at][0], seq, on)
        for subject, data, headers in encoded[:-1]:
            self.publisher.send(subject, data, headers)
        subject, data, headers = encoded[-1]
        headers["Nats-Batch-Commit"] = "1"
        return _seq(await self.publisher.future(subject, data, headers, self.timeout))

    async def across(self, entries: Sequence[tuple[str, Append]]) -> list[int]:
        """Events for several subjects with no expected sequence, in one atomic batch; a batch
        refused because a key in it was stored before (a retry) goes one event at a time,
        where a repeat is simply known. One refused because a fence in it is closed
        (`Append.only_if_empty`) raises `_Fenced`."""
        try:
            last = await self._batch(entries, None)
        except _Refusal as err:
            if err.code == FENCE_BUSY and any(_fence_of(item) is not None for _, item in entries):
                raise _FenceBusy from None  # not decided: the group goes again
            if err.code in WRONG_LAST_SEQUENCE and any(_fence_of(item) is not None for _, item in entries):
                raise _Fenced from None  # one claim's fence is closed: the others must land all the same
            if err.code != BATCH_DUPLICATE:
                raise StoreError(f"{len(entries)} events: {err.description} (code {err.code})") from None
            return [(await self._append(subject, [item], None))[0] for subject, item in entries]
        return list(range(last - len(entries) + 1, last + 1))

    # -- chains --------------------------------------------------------------------------------

    async def chain(self, parts: Sequence[Part], *, linked: bool = True) -> list[list[int]]:
        """`linked=False`: no link names the one before; each goes alone, fenced on what its
        subject got (as after a refusal below)."""
        # A job's task records are fenced on the job's subject (`fence_subject`): a part of them
        # after a fenced part of the job is fenced too, on what the job's subject last got.
        initial = {fence_subject(subject): expect for subject, _, expect in reversed(parts) if expect is not None}
        links = [(subject, item, expect if i == 0 else None, fence_subject(subject) in initial)
                 for subject, items, expect in parts for i, item in enumerate(items)]
        if not links:
            return [[] for _ in parts]
        if not linked:
            return _split(parts, await self._one_by_one(links, initial, {}))
        encoded = [await self._encode(subject, item) for subject, item, _, _ in links]  # bodies first
        await self.publisher.start()
        answers = []
        for k, ((subject, _, fence, _), (data, headers)) in enumerate(zip(links, encoded, strict=True)):
            if fence is not None:
                _expect(headers, subject, fence)
            if k > 0:
                headers[H_EXPECT_LAST_MSG_ID] = links[k - 1][1].msg_id
            answers.append(self.publisher.future(subject, data, headers, self.timeout, now=k == len(links) - 1))
        try:
            got = await asyncio.gather(*answers)
        finally:
            for waiting in answers:
                waiting.cancel()  # (a chain given up on: its late answers are dropped)
        seqs: list[int] = []
        last: dict[str, int] = {}  # fence subject -> its sequence so far in this chain
        for k, answer in enumerate(got):
            try:
                seqs.append(_seq(answer))
                if links[k][0] == fence_subject(links[k][0]):
                    last[links[k][0]] = seqs[-1]
                continue
            except _Refusal:
                pass
            # The first refusal: from here on one at a time, each fenced on what its fence
            # subject got (a link refused only because another writer came between lands now;
            # a real refusal is raised as a single append raises it).
            seqs += await self._one_by_one(links[k:], initial, last)
            break
        return _split(parts, seqs)

    async def _one_by_one(self, links: Sequence[tuple[str, Append, int | None, bool]], initial: dict[str, int],
                          last: dict[str, int]) -> list[int]:
        """Links appended one at a time, each fenced on what its fence subject got (`last`, else
        its own or its part's first expected sequence)."""
        seqs: list[int] = []
        for subject, item, fence, fenced in links:
            on = fence_subject(subject)
            [seq] = await self._append(subject, [item], last.get(on, fence or initial.get(on)) if fenced else None)
            seqs.append(seq)
            if subject == on:
                last[on] = seq
        return seqs

    # -- group commit --------------------------------------------------------------------------

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]:
        if item.trace is None and tracing.enabled():
            item = replace(item, trace=tracing.current())
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        fence = item.only_if_empty or item.lane
        if fence is not None and (self.group_commit or item.lane is not None or item.follows is not None):
            # (a segment's step always goes with the next claim, so its fence refuses both)
            self._lane(fence).waiting.append((subject, item, stored, 0.0))
            return stored
        busy = self._sending is not None and not self._sending.done()
        if self.group_commit and (busy or self._waiting or not now):
            # With the others of this turn of the loop, or of the next group.
            self._waiting.append((subject, item, stored))
            self._start()
            return stored
        inline = self._inline(item)
        publisher = self.publisher
        if inline is None or not publisher.ready:
            # A body for BODIES first, or an inbox not subscribed yet: the sending task does it.
            self._waiting.append((subject, item, stored))
            self._start()
            return stored
        self.sent += 1
        self.events += 1
        try:
            publisher.request(subject, *inline, lambda got: self._stored(stored, subject, item, got), self.timeout,
                              now=True)
        except Exception as err:  # noqa: BLE001 - the connection cannot take it: its writer is told
            stored.set_exception(err)
            return stored
        if self.group_commit:
            self._sending = stored
            stored.add_done_callback(self._sent)
        return stored

    def _stored(self, stored: asyncio.Future[int], subject: str, item: Append, got: bytes | BaseException) -> None:
        if stored.done():
            return
        if isinstance(got, BaseException):
            stored.set_exception(got)
            return
        try:
            stored.set_result(_seq(got))
        except _Refusal as err:
            if err.code == FENCE_BUSY and item.only_if_empty is not None:  # not decided: again, alone
                self._later(self._alone(subject, item, stored))
                return
            if err.code in WRONG_LAST_SEQUENCE and item.only_if_empty is not None:  # its fence is closed
                stored.set_exception(ConcurrencyError(f"{subject}: {item.only_if_empty} is closed ({err.description})"))
                return
            stored.set_exception(StoreError(f"{subject}: {err.description} (code {err.code})"))

    def _sent(self, done: asyncio.Future[Any]) -> None:
        if self._sending is done:
            self._sending = None
        self._start()

    def _start(self) -> None:
        if self._waiting and (self._sending is None or self._sending.done()):
            self._sending = asyncio.get_running_loop().create_task(self._send_waiting())

    async def _send_waiting(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting[: self.most], self._waiting[self.most :]
            live = [(s, i, f) for s, i, f in group if not f.cancelled()]  # a writer that gave up
            if not live:
                continue
            self.events += len(live)
            if len(live) < self.smallest_batch or not self.group_commit:
                # A few: each alone, all at once (pipelined), each writer told as its own is stored.
                self.sent += len(live)
                await asyncio.gather(*(self._alone(s, i, f) for s, i, f in live))
                continue
            self.sent += 1
            try:
                seqs = await self.across([(s, i) for s, i, _ in live])
            except _Fenced:  # each alone: only the one whose fence is closed is refused
                await asyncio.gather(*(self._alone(s, i, f) for s, i, f in live))
                continue
            except Exception as err:  # noqa: BLE001 - every writer of the group gets the failure
                for _, _, f in live:
                    if not f.done():
                        f.set_exception(err)
                continue
            for (_, _, f), seq in zip(live, seqs, strict=True):
                if not f.done():
                    f.set_result(seq)

    # -- claims, a lane per fence -----------------------------------------------------------------

    def _lane(self, fence: str) -> _Lane:
        lane = self._lanes.get(fence)
        if lane is None:
            lane = self._lanes[fence] = _Lane()
            lane.task = asyncio.get_running_loop().create_task(self._send_lane(fence, lane))
        return lane

    async def _send_lane(self, fence: str, lane: _Lane) -> None:
        """The claims on one fence (docs/decisions/0050): what waits goes as one atomic batch,
        the fence checked once for all, and nothing else of this writer expects that fence
        meanwhile: a replicated stream refuses an expectation on a subject while another is being
        replicated (`FENCE_BUSY`), so claims sent side by side refused each other. Refused busy
        (another provisioner's claims on it were in flight), the batch goes again a few ms later
        with whatever joined it meanwhile; a claim still refused busy `FENCE_BUSY_S` after its
        first busy answer fails (its task comes back). Closed (10071): every claim of the batch is refused, it is one
        fence."""
        try:
            pause, tries = 0.0, 0
            while lane.waiting:
                if pause:
                    await asyncio.sleep(pause)  # a bounded retry of one write (the tries), not a poll
                cut = _cut(lane.waiting, self.most)
                group, lane.waiting = lane.waiting[:cut], lane.waiting[cut:]
                live = [w for w in group if not w[2].cancelled()]  # a writer that gave up
                if not live:
                    continue
                self.sent += 1
                self.events += sum(1 for *_, n in live if not n)  # (a claim sent again is counted once)
                try:
                    if len(live) == 1:
                        seqs = await self._append_once(live[0][0], [live[0][1]], None)
                    else:
                        seqs = await self.across([(subject, item) for subject, item, _, _ in live])
                except _FenceBusy:
                    self.busy += 1
                    now = asyncio.get_running_loop().time()
                    again = [(s, i, f, n or now) for s, i, f, n in live if now - (n or now) < FENCE_BUSY_S]
                    for _, _, f, n in live:
                        if n and now - n >= FENCE_BUSY_S and not f.done():
                            f.set_exception(StoreError(f"{fence} stayed busy ({FENCE_BUSY_S:g} s); the task comes back"))
                    lane.waiting[:0] = again
                    tries += 1
                    pause = _busy_pause(tries - 1)
                    continue
                except (_Fenced, ConcurrencyError) as err:
                    if any(i.step_fence is not None for _, i, _, _ in live):
                        await self._sort_refusal(lane, live)
                        pause = 0.0
                        continue
                    refused = err if isinstance(err, ConcurrencyError) else ConcurrencyError(f"{fence} is closed")
                    for subject, item, f, _ in live:
                        if f.done():
                            continue
                        if item.only_if_empty is None:
                            # A segment step's outcome (`Append.lane`), refused only with the
                            # claims beside it: it expects nothing, so it goes alone (decision 58).
                            self._later(self._alone(subject, replace(item, lane=None), f))
                        else:
                            f.set_exception(refused)
                    pause = 0.0
                    continue
                except Exception as err:  # noqa: BLE001 - every writer of the group gets the failure
                    for _, _, f, _ in live:
                        if not f.done():
                            f.set_exception(err)
                    pause = 0.0
                    continue
                for (_, _, f, _), seq in zip(live, seqs, strict=True):
                    if not f.done():
                        f.set_result(seq)
                pause, tries = 0.0, 0
                if any(item.returns for _, item, _, _ in live):
                    await _turns(LANE_GATHER_TURNS)
        finally:
            if self._lanes.get(fence) is lane:
                del self._lanes[fence]

    async def _sort_refusal(self, lane: _Lane, live: list[tuple[str, Append, asyncio.Future[int], float]]) -> None:
        """A lane's batch refused as stale (10071) that holds segment steps' outcomes, each fenced
        on its next step's end (`Append.step_fence`): the job's cancel fence, a step's end, or
        another step's in the batch; the answer does not say which. Each such outcome goes again
        with the claim that follows it, the two one batch (`_step_again`), so that claim is never
        stored without the outcome's step fence checked with it; the claims left go again in the
        lane, where a refusal is now the cancel fence's alone (decision 50). Only after a
        refusal: a batch that lands costs nothing more."""
        waiting = [w for w in live if not w[2].done()]
        follower = {w[1].follows: w for w in waiting if w[1].follows is not None}
        steps = [(w, follower.pop(w[1].msg_id, None)) for w in waiting if w[1].step_fence is not None]
        busy = await asyncio.gather(*(self._step_again(step, claim) for step, claim in steps))
        again = [w for pair, sent in zip(steps, busy, strict=True) if not sent for w in pair if w is not None]
        rest = [w for w in waiting if w[1].step_fence is None and w[1].follows is None]
        for w in follower.values():  # (a claim whose outcome went before it: its step is read again)
            if not w[2].done():
                w[2].set_exception(StepEnded(f"{w[0]}: sent without the outcome it follows"))
        lane.waiting[:0] = [*again, *rest]

    async def _step_again(self, step: tuple[str, Append, asyncio.Future[int], float],
                          claim: tuple[str, Append, asyncio.Future[int], float] | None) -> bool:
        """One step's outcome and the next step's claim after their batch was refused: the two
        again as one batch. Refused (10071), the outcome alone with its step fence tells which
        fence it was: refused, the planner ended the next step: the outcome is stored without
        the check (a late result the planner hears of) and the claim fails `StepEnded`; stored,
        the step's end was open then and so when the pair was refused: the claim's cancel fence
        is closed, and it fails as cancelled. False: the fence was busy (a replicated stream),
        the two go again in the lane."""
        subject, item, f, _ = step
        if claim is None:  # (no claim beside it: the last step of its segment)
            try:
                f.set_result((await self._append(subject, [item], None))[0])
            except StepEnded as ended:
                self._unfenced(step, ended)
            except Exception as err:  # noqa: BLE001 - its writer gets the failure
                f.set_exception(err)
            return True
        try:
            seqs = await self.across([(subject, item), (claim[0], claim[1])])
        except _FenceBusy:
            return False
        except _Fenced:
            pass
        except Exception as err:  # noqa: BLE001 - both writers get the failure
            return _failed(err, step, claim)
        else:
            for w, seq in zip((step, claim), seqs, strict=True):
                if not w[2].done():
                    w[2].set_result(seq)
            return True
        try:
            [seq] = await self._append(subject, [item], None)
        except StepEnded as ended:
            if not claim[2].done():
                claim[2].set_exception(ended)
            self._unfenced(step, ended)
            return True
        except Exception as err:  # noqa: BLE001 - both writers get the failure
            return _failed(err, step, claim)
        if not f.done():
            f.set_result(seq)
        if not claim[2].done():
            claim[2].set_exception(ConcurrencyError(f"{claim[0]}: {claim[1].only_if_empty} is closed"))
        return True

    def _unfenced(self, step: tuple[str, Append, asyncio.Future[int], float], ended: StepEnded) -> None:
        """A step-fenced message refused by its step's end: an outcome is stored without the
        check (a late result the planner hears of); a claim's marker is not stored at all
        (decision 59: it exists only to carry the check for its claim)."""
        subject, item, f, _ = step
        if item.marker:
            if not f.done():
                f.set_exception(ended)
            return
        self._later(self._alone(subject, replace(item, lane=None, step_fence=None), f))

    def _later(self, sending: Coroutine[Any, Any, None]) -> None:
        """Sent from a task of its own (the lane goes on meanwhile)."""
        task = asyncio.get_running_loop().create_task(sending)
        self._retrying.add(task)
        task.add_done_callback(self._retrying.discard)

    async def _alone(self, subject: str, item: Append, stored: asyncio.Future[int]) -> None:
        try:
            [seq] = await self._append(subject, [item], None)
        except Exception as err:  # noqa: BLE001 - its writer gets the failure
            if not stored.done():
                stored.set_exception(err)
            return
        if not stored.done():
            stored.set_result(seq)


class _Lane:
    """The claims on one fence (`LogWriter._send_lane`): (subject, event, its writer's future,
    busy answers so far) waiting, and the task sending them."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, Append, asyncio.Future[int], float]] = []
        self.task: asyncio.Task[None] | None = None


def _failed(err: BaseException, *waiting: tuple[str, Append, asyncio.Future[int], float]) -> bool:
    """Each of `waiting` not answered yet gets `err`; True (decided: nothing goes again)."""
    for _, _, f, _ in waiting:
        if not f.done():
            f.set_exception(err)
    return True


def _cut(waiting: Sequence[tuple[str, Append, asyncio.Future[int], float]], most: int) -> int:
    """How many of a lane's waiting events go in one batch: at most `most`, and never a step's
    outcome without the claim that follows it (the outcome's step fence guards that claim)."""
    if len(waiting) <= most:
        return len(waiting)
    if most > 1 and waiting[most - 1][1].step_fence is not None and waiting[most][1].follows == waiting[most - 1][1].msg_id:
        return most - 1
    return most


async def _turns(n: int) -> None:
    """Let `n` turns of the event loop pass (what was made ready in them runs first)."""
    for _ in range(n):
        await asyncio.sleep(0)


def _split(parts: Sequence[Part], seqs: Sequence[int]) -> list[list[int]]:
    """A chain's sequences, part by part."""
    out, at = [], 0
    for _, items, _ in parts:
        out.append(list(seqs[at : at + len(items)]))
        at += len(items)
    return out
