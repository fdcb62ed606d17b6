"""Group commit of independent appends: many writers' events in one atomic batch when it pays.

A provisioner appends a claim and an outcome per task, each to the task's own subject, with an
idempotency key and no expected sequence. Appended one by one, each costs the server a disk
sync (`sync_interval: always`); in one atomic batch, many share one. But on nats-server 2.15 an
atomic batch on a file stream takes ~10 ms to commit whatever its size, a stream commits one
batch at a time, and single appends to that stream wait meanwhile (docs/benchmarks.md,
"Provisioner dispatch"): a batch pays only when many appends wait.

So `GroupedAppends` sends an append alone, at once, while fewer than `window` are on their way
(no added latency on a worker that keeps up); appends made beyond that wait, and go together as
one batch as soon as the batch before them is stored. Groups grow with the load and never wait
on a timer. `window=None` never groups (every append alone); `window=0` always does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from contracts.records import Append

from .eventstore import MAX_ATOMIC, EventStore
from .immediate import ImmediateAppends

SMALLEST_BATCH = 8
"""Fewer waiting appends than this go as that many single appends at once (each its own disk
sync, ~0.5 ms) rather than one atomic batch (~10 ms to commit on file storage, whatever its
size: decision 12)."""


class GroupedAppends:
    def __init__(self, store: EventStore, window: int | None = 0, most: int = MAX_ATOMIC,
                 smallest_batch: int = SMALLEST_BATCH) -> None:
        self.store = store
        self.window = window
        self.most = most
        self.smallest_batch = smallest_batch
        self.sent = 0
        """Appends sent so far (a batch or a single event each); `events / sent` is the mean group."""
        self.events = 0
        self._alone = 0  # single appends on their way
        self._waiting: list[tuple[str, Append, asyncio.Future[int]]] = []
        self._sending: asyncio.Future[Any] | None = None
        self.immediate = ImmediateAppends(store)
        """For `append_now` (after `await immediate.start()`)."""

    def append_now(self, subject: str, item: Append) -> asyncio.Future[int] | None:
        """From synchronous code: when nothing else is on its way (`window=0`), the append is
        written to the connection at once (`muster.bus.immediate`) and its future returned;
        appends made meanwhile wait for it, as for `append`. None otherwise: use `append`."""
        if self.window != 0 or self._waiting or (self._sending is not None and not self._sending.done()):
            return None
        stored = self.immediate.send(subject, item)
        if stored is None:
            return None
        self.sent += 1
        self.events += 1
        self._sending = stored

        def sent(_: asyncio.Future[int]) -> None:
            if self._sending is stored:
                self._sending = None
            self._start()

        stored.add_done_callback(sent)
        return stored

    async def append(self, subject: str, item: Append) -> int:
        """Append one event; returns its stream sequence once it is stored."""
        idle = not self._waiting and (self._sending is None or self._sending.done())
        if self.window is None or (self._alone < self.window and not self._waiting) or (self.window == 0 and idle):
            # Alone and at once; with `window=0` only when nothing else is on its way, and
            # whatever arrives meanwhile waits for it (so that single appends and batches
            # never interleave on the stream).
            self._alone += 1
            self.sent += 1
            self.events += 1
            if self.window == 0:
                self._sending = asyncio.current_task()
            try:
                return (await self.store.append_across([(subject, item)]))[0]
            finally:
                self._alone -= 1
                if self.window == 0:
                    self._sending = None
                self._start()
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((subject, item, stored))
        self._start()
        return await stored

    def submit(self, subject: str, item: Append) -> asyncio.Future[int]:
        """`append` without a coroutine of the caller's: the append joins the waiting ones
        (alone and at once if nothing else is on its way, through the sending task) and the
        returned future gets its stream sequence. For a writer that only needs to be called back
        when it is stored (a provisioner's outcome, then the task's ack): no task of its own
        per append."""
        if self.window != 0:  # (only `window=0` sends what waits as it does here)
            return asyncio.ensure_future(self.append(subject, item))
        stored: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((subject, item, stored))
        self._start()
        return stored

    def _start(self) -> None:
        if self._waiting and (self._sending is None or self._sending.done()):
            self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting[: self.most], self._waiting[self.most :]
            live = [(s, i, f) for s, i, f in group if not f.cancelled()]  # a writer that gave up
            if not live:
                continue
            self.events += len(live)
            if len(live) < self.smallest_batch:
                # A few: each alone, all at once (pipelined on the connection), each writer
                # told as its own is stored.
                self.sent += len(live)
                await asyncio.gather(*(self._alone_for(s, i, f) for s, i, f in live))
                continue
            self.sent += 1
            try:
                seqs = await self.store.append_across([(s, i) for s, i, _ in live])
            except Exception as err:  # noqa: BLE001 - every writer of the group gets the failure
                for _, _, f in live:
                    if not f.done():
                        f.set_exception(err)
                continue
            for (_, _, f), seq in zip(live, seqs, strict=True):
                if not f.done():
                    f.set_result(seq)

    async def _alone_for(self, subject: str, item: Append, stored: asyncio.Future[int]) -> None:
        try:
            [seq] = await self.store.append_across([(subject, item)])
        except Exception as err:  # noqa: BLE001 - its writer gets the failure
            if not stored.done():
                stored.set_exception(err)
            return
        if not stored.done():
            stored.set_result(seq)
