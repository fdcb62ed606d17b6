"""The task queue port on JetStream: stream TASKS, one subject per tenant and provisioner class
(`muster.task.<tenant>.<class>`); `Nats-Msg-Id` makes a repeated publish of an attempt harmless.

`publish_many` pipelines: the messages go out as frames of our own into nats-py's send buffer
(`muster.bus.immediate.frame`), up to `window` acknowledgements outstanding, and the
acknowledgements come back on one raw inbox subscription of the queue (`muster.bus.wire`), each
settled in the connection's read loop. Through `js.publish` each message cost a request (a
future, a timer, a `Msg` for its answer) and, under a window, a coroutine of its own: the
planner's queueing of a 10,000-task wave was bound by that CPU (docs/benchmarks.md, "Planner on
a wide DAG").

TASKS lives in memory (docs/decisions/0013): `watch_resets` tells the planner when a restarted
server lost it, so that the attempts the log says are queued go out again.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import structlog
from nats.errors import ConnectionClosedError, Error, MaxPayloadError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from contracts import subjects
from contracts.tasks import TaskMessage

from ..ports.eventlog import StoreError
from ..ports.taskqueue import task_msg_id
from .connect import on_reconnect
from .immediate import frame, queue
from .streams import ensure_tasks_stream
from .wire import raw_subscribe

log = structlog.get_logger("muster.bus")

WINDOW = 1024
"""Acknowledgements awaited at once by `publish_many`: enough to keep the server busy, few
enough that a connection lost midway leaves a bounded number in doubt (they are published again)."""
CHECK_TRIES = 8
"""Looks at TASKS after a reconnect, backing off from 0.5 s (~1 min in all): a server just
restarted may not have its JetStream (or a cluster its meta leader) ready at once."""


class _Batch:
    """One `publish_many` call: each message's outcome, and whether any is still unanswered."""

    __slots__ = ("failures", "outstanding", "done")

    def __init__(self, size: int) -> None:
        self.failures: list[BaseException | None] = [None] * size
        self.outstanding = 0
        self.done: asyncio.Future[None] | None = None


class NatsTaskQueue:
    def __init__(self, js: JetStreamContext, window: int = WINDOW, timeout: float | None = None) -> None:
        self.js = js
        self.nc: Any = js._nc
        self.window = max(1, window)
        self.timeout = timeout if timeout is not None else js._timeout
        self._inbox = ""
        self._starting: asyncio.Future[Any] | None = None
        self._waiting: dict[bytes, tuple[_Batch, int]] = {}
        self._tokens = itertools.count()
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
        await self.js.publish(
            subjects.task_queue(message.tenant, message.provisioner_class),
            message.model_dump_json().encode(),
            headers={"Nats-Msg-Id": task_msg_id(message)},
        )

    async def publish_many(self, messages: Sequence[TaskMessage]) -> list[BaseException | None]:
        """Queue every message, pipelined; for each, None once the stream acknowledged it (a
        de-duplicated repeat included), or why it may not have been taken. The window is the
        queue's, shared by concurrent calls: the server answers in order, so a call behind
        another waits its turn rather than timing out."""
        batch = _Batch(len(messages))
        if not messages:
            return batch.failures
        await self._start()
        max_payload = self.nc.max_payload
        sent = 0
        try:
            for index, message in enumerate(messages):
                while len(self._waiting) >= self.window:
                    await self._wait_for_space()
                data = message.model_dump_json().encode()
                if len(data) > max_payload:
                    batch.failures[index] = MaxPayloadError()
                    sent += 1
                    continue
                key = str(next(self._tokens)).encode()
                command = frame(subjects.task_queue(message.tenant, message.provisioner_class),
                                f"{self._inbox}.{key.decode()}", {"Nats-Msg-Id": task_msg_id(message)}, data)
                if not queue(self.nc, command):
                    raise ConnectionClosedError()
                self._waiting[key] = (batch, index)
                batch.outstanding += 1
                sent += 1
            if batch.outstanding:
                batch.done = asyncio.get_running_loop().create_future()
                await self._wait(batch.done)
        except (TimeoutError, NatsTimeout, ConnectionClosedError) as err:
            # Whatever is not acknowledged by now may or may not be stored: the caller
            # publishes it again (the stream de-duplicates by `Nats-Msg-Id`).
            self._give_up(batch, err)
            for index in range(sent, len(messages)):
                batch.failures[index] = err
        finally:
            if batch.outstanding:  # cancelled midway: its answers must not hold the window
                self._give_up(batch, ConnectionClosedError())
        return batch.failures

    async def _wait_for_space(self) -> None:
        if self._space is None or self._space.done():
            self._space = asyncio.get_running_loop().create_future()
        await self._wait(self._space)

    async def _wait(self, until: asyncio.Future[None]) -> None:
        """Send what is queued, then wait for `until`; TimeoutError when no acknowledgement at
        all came for `timeout` (slow is not stuck: a wave of thousands takes longer)."""
        await self.nc._flush_pending()
        while not until.done():
            seen = self._answered
            try:
                await asyncio.wait_for(asyncio.shield(until), self.timeout)
            except TimeoutError:
                if self._answered == seen:
                    raise

    def _give_up(self, batch: _Batch, err: BaseException) -> None:
        for key in [k for k, (b, _) in self._waiting.items() if b is batch]:
            _, index = self._waiting.pop(key)
            batch.failures[index] = err
        batch.outstanding = 0
        self._wake_senders()

    def _wake_senders(self) -> None:
        if self._space is not None and not self._space.done() and len(self._waiting) <= self.window // 2:
            self._space.set_result(None)

    async def _start(self) -> None:
        """Subscribe the inbox the acknowledgements come to (once, before anything is sent)."""
        if self._inbox:
            return
        if self._starting is None:
            inbox = self.nc.new_inbox()

            async def subscribe() -> None:
                await raw_subscribe(self.nc, f"{inbox}.*", self._answer)
                self._inbox = inbox

            self._starting = asyncio.ensure_future(subscribe())
        try:
            await asyncio.shield(self._starting)
        except Exception:
            self._starting = None
            raise

    def _answer(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        entry = self._waiting.pop(subject.rsplit(b".", 1)[-1], None)
        if entry is None:
            return None  # a batch given up on
        self._answered += 1
        batch, index = entry
        if not data:  # a status only: 503, no stream for the subject
            status = header_block[9:12].decode("ascii", "replace") if header_block.startswith(b"NATS/1.0 ") else "?"
            batch.failures[index] = StoreError(f"task publish refused: status {status}")
        elif b'"error"' in data:
            try:
                err = json.loads(data)["error"]
                batch.failures[index] = StoreError(
                    f"task publish refused: {err.get('description')} (code {err.get('err_code')})")
            except (ValueError, KeyError, AttributeError):
                batch.failures[index] = StoreError(f"task publish: unreadable answer {data[:100]!r}")
        else:
            self._last_ack = data
        batch.outstanding -= 1
        if batch.outstanding == 0 and batch.done is not None and not batch.done.done():
            batch.done.set_result(None)
        self._wake_senders()
        return None
