"""The task queue port on JetStream: stream TASKS, one subject per tenant and provisioner class
(`muster.task.<tenant>.<class>`); `Nats-Msg-Id` makes a repeated publish of an attempt harmless.

`publish_many` pipelines on the connection's publisher (`muster.bus.wire.Publisher`), up to
`window` acknowledgements outstanding, each answered in the connection's read loop: through
`js.publish` each message cost a request (a future, a timer, a `Msg` for its answer) and a
coroutine of its own (docs/benchmarks.md, "Planner on a wide DAG"). Several messages go as
atomic batches of up to `MAX_ATOMIC` (TASKS allows them): all stored or none, one answer for
all instead of one each. A batch that is refused (a message of it was published before: a
repeat after a restart) or not answered goes again one message at a time, where each has its
own outcome and a repeat is simply acknowledged.

TASKS lives in memory (docs/decisions/0013): `watch_resets` tells the planner when a restarted
server lost it, so that the attempts the log says are queued go out again.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import structlog
from nats.errors import ConnectionClosedError, Error, MaxPayloadError, OutboundBufferLimitError
from nats.js import JetStreamContext

from contracts import subjects
from contracts.records import H_TRACE
from contracts.tasks import TaskMessage

from ..ports.eventlog import StoreError
from ..ports.taskqueue import task_msg_id
from .connect import on_reconnect
from .streams import ensure_tasks_stream
from .wire import Publisher, Refused, connection_of, timeout_of

log = structlog.get_logger("muster.bus")

LOST_AFTER = 12
"""An answer not come after this many `timeout`s is taken as lost with the connection."""
WINDOW = 1024
"""Acknowledgements awaited at once by `publish_many`: enough to keep the server busy, few
enough that a connection lost midway leaves a bounded number in doubt (they are published again)."""
MAX_ATOMIC = 1000
"""The most messages the server takes in one atomic batch."""
CHECK_TRIES = 8
"""Looks at TASKS after a reconnect, backing off from 0.5 s (~1 min in all): a server just
restarted may not have its JetStream (or a cluster its meta leader) ready at once."""


class _Batch:
    """One `publish_many` call: each message's outcome, and those still unanswered."""

    __slots__ = ("failures", "pending", "done")

    def __init__(self, size: int) -> None:
        self.failures: list[BaseException | None] = [None] * size
        self.pending: set[int] = set()
        self.done: asyncio.Future[None] | None = None


class NatsTaskQueue:
    def __init__(self, js: JetStreamContext, window: int = WINDOW, timeout: float | None = None) -> None:
        self.js = js
        self.nc = connection_of(js)
        self.window = max(1, window)
        self.timeout = timeout if timeout is not None else timeout_of(js)
        self.in_flight = 0
        """Messages published and not answered yet, of every call."""
        self._space: asyncio.Future[None] | None = None
        self._answered = 0
        """Acknowledgements taken so far: a wait that saw none for `timeout` gives up."""
        self._last_ack = b""
        """The latest acknowledgement, read only after a reconnect (its stream sequence)."""
        self._seen: tuple[Any, int] | None = None
        self._checking = asyncio.Lock()

    async def watch_resets(self, on_reset: Callable[[], Awaitable[None]]) -> None:
        """Call `on_reset` when, after a reconnect, TASKS turns out to be new: declared again
        (one server restarted: a memory stream is gone, definition and all), or emptied (a
        whole cluster restarted: the definition lives on in the meta group, the messages do
        not, and the sequence starts again below what this queue saw acknowledged)."""
        self._seen = await self._generation()
        on_reconnect(self.nc, partial(self._check, on_reset))

    async def _generation(self) -> tuple[Any, int]:
        info = await ensure_tasks_stream(self.js)
        return info.created, info.state.last_seq

    async def _check(self, on_reset: Callable[[], Awaitable[None]]) -> None:
        async with self._checking:  # two reconnects in a row: one look after the other
            for attempt in range(CHECK_TRIES):
                try:
                    created, last = await self._generation()
                    break
                except (Error, TimeoutError) as err:
                    log.warning("TASKS not checked after a reconnect yet", error=str(err) or type(err).__name__)
                    await asyncio.sleep(0.5 * 2 ** attempt)
            else:
                log.error("TASKS not checked after a reconnect; lost tasks wait for their timeouts")
                return
            acked = int(json.loads(self._last_ack).get("seq", 0)) if self._last_ack else 0
            before = self._seen
            self._seen = (created, last)
            if before is not None and (created != before[0] or last < acked):
                log.warning("TASKS came back empty after a reconnect: queued tasks go out again", created=str(created))
                await on_reset()

    async def publish(self, message: TaskMessage) -> None:
        [failure] = await self.publish_many([message])
        if failure is not None:
            raise failure

    async def publish_many(self, messages: Sequence[TaskMessage], *,
                           traces: Sequence[str | None] | None = None) -> list[BaseException | None]:
        """Queue every message, pipelined on the connection's publisher; for each, None once
        the stream acknowledged it (a de-duplicated repeat included), or why it may not have
        been taken. The window is the queue's, shared by concurrent calls: the server answers
        in order, so a call behind another waits its turn. `traces`: each message's trace
        context, sent in its `traceparent` header."""
        traced = list(traces) if traces is not None else [None] * len(messages)
        if len(messages) > 1 and all(subjects.task_queue(m.tenant, m.provisioner_class).startswith(f"{subjects.TASK}.")
                                     for m in messages):
            return await self._in_batches(messages, traced)
        return await self._one_by_one(messages, traced)

    async def _in_batches(self, messages: Sequence[TaskMessage], traces: Sequence[str | None]) -> list[BaseException | None]:
        """Atomic batches of up to `MAX_ATOMIC`; what a batch did not store goes one by one."""
        failures: list[BaseException | None] = [None] * len(messages)
        again: list[int] = []
        for start in range(0, len(messages), MAX_ATOMIC):
            part = list(range(start, min(start + MAX_ATOMIC, len(messages))))
            if not await self._batch([messages[i] for i in part], [traces[i] for i in part]):
                again += part
        if again:
            retried = await self._one_by_one([messages[i] for i in again], [traces[i] for i in again])
            for i, failure in zip(again, retried, strict=True):
                failures[i] = failure
        return failures

    async def _batch(self, messages: Sequence[TaskMessage], traces: Sequence[str | None]) -> bool:
        """One atomic batch; True once stored (every message of it)."""
        encoded = [(subjects.task_queue(m.tenant, m.provisioner_class), m.model_dump_json().encode(), _headers(m, t))
                   for m, t in zip(messages, traces, strict=True)]
        if any(len(data) > self.nc.max_payload for _, data, _ in encoded):
            return False  # one by one, where the too large one fails alone
        try:
            while self.in_flight >= self.window:
                await self._wait_for_space()
        except TimeoutError:
            return False
        publisher = Publisher.of(self.nc)
        await publisher.start()
        batch_id = uuid.uuid4().hex
        self.in_flight += 1
        try:
            for i, (subject, data, headers) in enumerate(encoded[:-1], start=1):
                publisher.send(subject, data, {**headers, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)})
            subject, data, headers = encoded[-1]
            answer = await publisher.future(subject, data, {**headers, "Nats-Batch-Id": batch_id,
                                                            "Nats-Batch-Sequence": str(len(encoded)), "Nats-Batch-Commit": "1"},
                                            LOST_AFTER * self.timeout)
        except (ConnectionClosedError, OutboundBufferLimitError, TimeoutError, StoreError):
            return False  # whether it was stored is unknown: one by one (the stream drops repeats)
        finally:
            self.in_flight -= 1
            self._wake_senders()
        self._answered += 1
        if b'"error"' in answer:
            return False
        self._last_ack = answer
        return True

    async def _one_by_one(self, messages: Sequence[TaskMessage], traces: Sequence[str | None]) -> list[BaseException | None]:
        batch = _Batch(len(messages))
        if not messages:
            return batch.failures
        publisher = Publisher.of(self.nc)
        await publisher.start()
        max_payload = self.nc.max_payload
        sent = 0
        try:
            for index, message in enumerate(messages):
                while self.in_flight >= self.window:
                    await self._wait_for_space()
                data = message.model_dump_json().encode()
                if len(data) > max_payload:
                    batch.failures[index] = MaxPayloadError()
                    sent += 1
                    continue
                headers = _headers(message, traces[index])
                # Slow is not stuck: a wave of thousands waits as long as answers come (`_wait`);
                # the publisher's own timeout only frees an answer lost with the connection.
                publisher.request(subjects.task_queue(message.tenant, message.provisioner_class), data,
                                  headers, partial(self._answer, batch, index), LOST_AFTER * self.timeout)
                batch.pending.add(index)
                self.in_flight += 1
                sent += 1
            if batch.pending:
                batch.done = asyncio.get_running_loop().create_future()
                await self._wait(batch.done)
        except (TimeoutError, ConnectionClosedError, OutboundBufferLimitError) as err:
            # Whatever is not acknowledged by now may or may not be stored: the caller
            # publishes it again (the stream de-duplicates by `Nats-Msg-Id`).
            self._give_up(batch, err)
            for index in range(sent, len(messages)):
                batch.failures[index] = err
        finally:
            if batch.pending:  # cancelled midway: its answers must not hold the window
                self._give_up(batch, ConnectionClosedError())
        return batch.failures

    async def _wait_for_space(self) -> None:
        if self._space is None or self._space.done():
            self._space = asyncio.get_running_loop().create_future()
        await self._wait(self._space)

    async def _wait(self, until: asyncio.Future[None]) -> None:
        """Until `until`; TimeoutError when no acknowledgement at all came for `timeout` (a
        wave of thousands takes longer than that, and is not stuck while answers come)."""
        while not until.done():
            seen = self._answered
            try:
                await asyncio.wait_for(asyncio.shield(until), self.timeout)
            except TimeoutError:
                if self._answered == seen:
                    raise

    def _give_up(self, batch: _Batch, err: BaseException) -> None:
        for index in batch.pending:
            batch.failures[index] = err
        self.in_flight -= len(batch.pending)
        batch.pending.clear()
        self._wake_senders()

    def _wake_senders(self) -> None:
        if self._space is not None and not self._space.done() and self.in_flight <= self.window // 2:
            self._space.set_result(None)

    def _answer(self, batch: _Batch, index: int, got: bytes | BaseException) -> None:
        if index not in batch.pending:
            return  # a batch given up on
        batch.pending.discard(index)
        self.in_flight -= 1
        self._answered += 1
        if isinstance(got, Refused):
            batch.failures[index] = StoreError(f"task publish refused: status {got.status}")
        elif isinstance(got, BaseException):
            batch.failures[index] = got  # nats' TimeoutError: whether it was stored is unknown
        elif b'"error"' in got:
            try:
                err = json.loads(got)["error"]
                batch.failures[index] = StoreError(
                    f"task publish refused: {err.get('description')} (code {err.get('err_code')})")
            except (ValueError, KeyError, AttributeError):
                batch.failures[index] = StoreError(f"task publish: unreadable answer {got[:100]!r}")
        else:
            self._last_ack = got
        if not batch.pending and batch.done is not None and not batch.done.done():
            batch.done.set_result(None)
        self._wake_senders()


def _headers(message: TaskMessage, trace: str | None) -> dict[str, str]:
    """The de-duplication id and, when the task is traced, its trace context."""
    headers = {"Nats-Msg-Id": task_msg_id(message)}
    if trace is not None:
        headers[H_TRACE] = trace
    return headers
