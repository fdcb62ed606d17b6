"""An append put on the wire at once, from synchronous code: the provisioner's claim of a task
that has just arrived, without waiting for the event loop to come round.

Dispatch latency (#16: a task queued -> its claim in the log, within 1.5x a raw pull) is mostly
the two disk syncs, but on the Python side a claim written with `js.publish` from the task's
coroutine waits for the loop twice before it leaves: once for the coroutine started for the
task, once for nats-py's flusher task, which writes what `publish` queued. Here the claim is
encoded and written to the connection's transport in the same callback that received the task
(`wire.raw_subscribe` hands deliveries over synchronously from the read loop), and its
acknowledgement comes back on a raw inbox of our own as a future.

Relies on nats-py 2.16's private send buffer (`Client._pending`, `_pending_data_size`,
`_transport`), as `muster.bus.wire` relies on `_process_msg`: whatever nats-py has queued is
written first, so the order of the connection's commands is kept. Anything unusual (not
connected, no inbox yet, a body that would go to the BODIES stream) returns None, and the
caller appends the ordinary way.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import TYPE_CHECKING, Any

from nats.errors import TimeoutError as NatsTimeout
from nats.protocol.command import hpub_cmd

from contracts.records import Append

from ..ports.eventlog import StoreError
from .bodies import INLINE_LIMIT
from .wire import raw_subscribe, raw_unsubscribe

if TYPE_CHECKING:
    from .eventstore import EventStore


def frame(subject: str, reply: str, headers: dict[str, str], data: bytes) -> bytes:
    """The HPUB command of one message. Our header names and values are plain tokens (event
    types, idempotency keys, times, batch ids): nats-py's per-header checks are not repeated."""
    header = bytearray(b"NATS/1.0\r\n")
    for name, value in headers.items():
        header += f"{name}: {value}\r\n".encode()
    header += b"\r\n"
    return hpub_cmd(subject, reply, bytes(header), data)


def queue(nc: Any, command: bytes) -> bool:
    """Put a command in nats-py's send buffer, as `publish` would, without sending it yet (the
    next flush sends it, in order). False when the connection is not up: publish instead."""
    if not nc.is_connected:
        return False
    nc._pending.append(command)
    nc._pending_data_size += len(command)
    return True


class ImmediateAppends:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._inbox = ""
        self._sub: Any = None
        self._waiting: dict[bytes, tuple[asyncio.Future[int], asyncio.TimerHandle]] = {}
        self._tokens = itertools.count()

    async def start(self) -> None:
        """Subscribe the inbox the acknowledgements come to (before anything is sent)."""
        if self._sub is None:
            self._inbox = self.store.nc.new_inbox()
            self._sub = await raw_subscribe(self.store.nc, f"{self._inbox}.*", self._answer)

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await raw_unsubscribe(self.store.nc, sub)
        for future, timer in self._waiting.values():
            timer.cancel()
            if not future.done():
                future.set_exception(StoreError("connection closed before the append was acknowledged"))
        self._waiting.clear()

    def send(self, subject: str, item: Append) -> asyncio.Future[int] | None:
        """Append one event with no expected sequence (its idempotency key makes a repeat
        harmless), written to the connection now; the future gets its stream sequence. None if
        it cannot go this way: append it with `EventStore.append_across` instead."""
        nc = self.store.nc
        transport = getattr(nc, "_transport", None)
        if self._sub is None or not nc.is_connected or transport is None:
            return None
        data = item.event.model_dump_json().encode()
        if len(data) > INLINE_LIMIT:
            return None  # its body goes to BODIES first, which takes a round trip
        token = str(next(self._tokens))
        command = frame(subject, f"{self._inbox}.{token}", item.headers(), data)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        key = token.encode()
        self._waiting[key] = (future, loop.call_later(self.store.timeout, self._expire, key))
        # What nats-py queued goes first; then the transport sends it all (it does not block).
        nc._pending.append(command)
        transport.writelines(nc._pending)
        nc._pending = []
        nc._pending_data_size = 0
        return future

    def _expire(self, key: bytes) -> None:
        future, _ = self._waiting.pop(key, (None, None))
        if future is not None and not future.done():
            future.set_exception(NatsTimeout())  # as `js.publish`: whether it landed is unknown

    def _answer(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        future, timer = self._waiting.pop(subject.rsplit(b".", 1)[-1], (None, None))
        if future is None or timer is None:
            return None
        timer.cancel()
        if future.done():
            return None
        if not data:  # a status only: 503, no stream for the subject
            status = header_block[9:12].decode("ascii", "replace") if header_block.startswith(b"NATS/1.0 ") else "?"
            future.set_exception(StoreError(f"append refused: status {status}"))
            return None
        try:
            answer = json.loads(data)
        except ValueError:
            future.set_exception(StoreError(f"append: unreadable answer {data[:100]!r}"))
            return None
        if "error" in answer:
            err = answer["error"]
            future.set_exception(StoreError(f"{err.get('description')} (code {err.get('err_code')})"))
        else:
            future.set_result(int(answer["seq"]))
        return None


class Acks:
    """JetStream acks written to the connection together: queued as `Msg.ack` would queue them,
    less its per-message work (header checks, a coroutine and a flusher wake-up each), and
    written once per turn of the event loop. A provisioner's outcomes are stored in groups
    (`GroupedAppends`): the tasks of a group are acked in one write."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._due = False

    def ack(self, reply: str) -> bool:
        """Queue the ack of the delivery whose reply subject this is; False when the connection
        is not up (ack through nats-py then, which keeps it for the reconnect)."""
        if not reply or not queue(self.store.nc, b"PUB " + reply.encode() + b" 0\r\n\r\n"):
            return False
        if not self._due:
            self._due = True
            asyncio.get_running_loop().call_soon(self._write)
        return True

    def _write(self) -> None:
        self._due = False
        nc = self.store.nc
        transport = getattr(nc, "_transport", None)
        if nc._pending and nc.is_connected and transport is not None:
            transport.writelines(nc._pending)
            nc._pending = []
            nc._pending_data_size = 0
