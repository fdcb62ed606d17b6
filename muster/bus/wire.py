"""The one place that touches nats-py's internals: the read-loop hook and the send buffer.

- **Reading**: for subscriptions made with `raw_subscribe`, the connection hands over the raw
  protocol frame (subject, reply, payload, header block as bytes), synchronously from its read
  loop, instead of building a `Msg` and queueing it for a task: the callback decodes what it
  needs and nothing else. Everything else on the connection is untouched.
- **Screening**: `screen` puts a test in front of a nats-py subscription (a durable
  consumer's): a frame it takes (an event of a type the consumer ignores, acked by its header)
  goes no further, the others reach nats-py as before.
- **Writing**: `Publisher` (one per connection) writes protocol frames of its own into
  nats-py's send buffer, behind whatever nats-py queued, and writes the buffer to the socket
  either at once (a claim sent from the read loop, a chain) or once at the end of the loop's
  turn (everything else: batches, a wave of task messages, acks). Answers to what it publishes come back on one inbox
  subscription, each to the callback (or future) of its publish; a publish nobody answers
  fails after its timeout. `settle` acks, naks, terminates or extends a JetStream delivery.

- **Flow control**: nats-py answers a push subscription's flow-control requests from a task
  that looked 4 times a second whether one was pending, for the life of every ordered consumer
  and KV watch: most of what an idle service spent (docs/benchmarks.md, "Idle"). The task is
  replaced by one that sleeps until a request is pending (`_answer_flow_control`).

- **Re-creating**: `restart_ordered` re-creates an ordered consumer at once, from the message
  after the last it delivered (nats-py does so only once two idle heartbeats did not come), and
  retries its creation a few times (nats-py tries once): the tracker's location mirror calls it
  when its consumer may be lost, so its heartbeat can be rare.

- **Naming**: an ordered consumer made with `ordered_config` has a name, so that nats-py asks
  for it on `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, the one form whose filter the
  server's permissions see (a service's rights name the filters it reads, docs/security.md). Each
  re-creation (nats-py's reset after a gap, `restart_ordered`) gives it a new name: the server
  refuses a second consumer of a name with another start sequence. One without a name keeps none.

- **Flushing**: `flush` is a round trip to the server behind everything sent before it
  (nats-py's own `flush` may overtake the subscriptions just made).

- **Connecting again**: `strict_handshake` makes a (re)connect done only once the server
  answered its CONNECT's PING with PONG (nats-py 2.16 takes any other reply, an EOF among them,
  for done), and `on_closed` tells a listener when the connection is closed for good, however
  it is closed (nats-py can close a reconnecting connection without calling its closed callback).
  docs/testing.md, "A provisioner's connection closed for good, silently".

- **Ending**: `close_push` and `stop_watch` end a JetStream push subscription (an ordered
  consumer, a KV watch) with the tasks nats-py runs for it (heartbeat and flow-control checks),
  awaited: its own `unsubscribe` only cancels them, and not at all once the connection is closed
  or draining (it raises first). Left pending, they outlived their subscription, and a loop
  closed under them logged "Task was destroyed but it is pending!". `close_unconnected` closes
  a client whose first connect failed, whose socket nats-py leaves open.

What is relied on, of nats-py (pinned in requirements.lock): `Client._process_msg(sid, subject,
reply, data, headers)`, called by its parser for every MSG/HMSG; `Subscription._id`; the send
buffer `Client._pending`, `_pending_data_size`, `_max_pending_size`, `_transport.writelines`;
`Client._server_info`; `Client._process_connect_init` and the tasks it starts (`_reading_task`,
`_ping_interval_task`, `_flusher_task`); `JetStreamContext._nc` and `_timeout`; a JetStream subscription's
`PushSubscription._sub` (a KV watch's `KeyWatcher._sub`), `Subscription._jsi` with its tasks
`_hbtask` and `_fctask` (and, for `restart_ordered` and the renaming, its ordered consumer's `_sseq`,
`_ccreq`, `reset_ordered_consumer` and `recreate_consumer`, replaced on the class), and `Subscription._wait_for_msgs_task`; `Client._close` and
`_error_cb`. `INTERNALS` names them and
tests/unit/bus/test_wire_internals.py fails if one changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.errors import BadSubscriptionError, ConnectionClosedError, ConnectionDrainingError, OutboundBufferLimitError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.kv import KeyValue

from ..ports.delivery import Settle
from ..ports.eventlog import StoreError
from .protocol import frame, settle_body

INTERNALS = {
    Client: ("_process_msg", "_pending", "_pending_data_size", "_max_pending_size", "_transport", "_server_info", "_close",
             "_error_cb", "_process_connect_init", "_reading_task", "_ping_interval_task", "_flusher_task"),
    Subscription: ("_id", "_jsi", "_wait_for_msgs_task"),
    JetStreamContext: ("_nc", "_timeout", "_jsm"),
    JetStreamContext.PushSubscription: ("_sub", "_consumer"),
    JetStreamContext._JSI: ("_hbtask", "_fctask", "_hbi", "_conn", "_psub", "_fcr", "_fcd", "_fciseq",
                            "check_flow_control_response", "schedule_flow_control_response", "_ordered", "_sseq",
                            "_js", "_stream", "_ccreq", "reset_ordered_consumer", "recreate_consumer"),
    KeyValue.KeyWatcher: ("_sub",),
}
"""The private attributes of nats-py this module uses (instance attributes are checked on a
connected client)."""

RawHandler = Callable[[bytes, bytes, bytes, bytes], "str | None"]
"""(subject, reply, payload, header block) -> a subject to answer with an empty message, or None."""

Answer = Callable[["bytes | BaseException"], None]
"""Told the answer to a publish: its payload (a JetStream ack as JSON), or why there is none."""

Screen = Callable[[bytes, bytes], bool]
"""(reply, header block) -> True when it took the frame itself (nats-py never sees it)."""

_HOOKS = "_muster_raw_handlers"
_SCREENS = "_muster_screens"
_PUBLISHER = "_muster_publisher"


# -- reading ---------------------------------------------------------------------------------


def _handlers(nc: Client) -> dict[int, RawHandler]:
    handlers: dict[int, RawHandler] | None = getattr(nc, _HOOKS, None)
    if handlers is None:
        handlers = {}
        setattr(nc, _HOOKS, handlers)
        screens: dict[int, Screen] = {}
        setattr(nc, _SCREENS, screens)
        original = nc._process_msg

        async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
            handler = handlers.get(sid)
            if handler is None:
                take = screens.get(sid)
                if take is None or not take(reply, headers or b""):
                    await original(sid, subject, reply, data, headers)
                return
            answer = handler(subject, reply, data, headers or b"")
            if answer:
                await nc.publish(answer, b"")

        nc._process_msg = process_msg  # type: ignore[method-assign]
    return handlers


async def raw_subscribe(nc: Client, subject: str, handler: RawHandler) -> Subscription:
    """A core subscription whose messages go to `handler` as raw bytes. Subscribe before
    anything can be sent to `subject` (an inbox), so that no message reaches nats-py first."""
    handlers = _handlers(nc)
    sub = await nc.subscribe(subject)
    handlers[sub._id] = handler
    return sub


def screen(nc: Client, sub: Subscription, take: Screen) -> None:
    """Frames of `sub` (a subscription nats-py delivers) go to `take` first, in the read loop;
    one it took goes no further. A consumer's events of types it ignores cost an ack there,
    not a `Msg`, a queue and a callback each (docs/benchmarks.md, "Scale"). Left in place when
    the subscription ends: nats-py never gives its id to another, nor the server a frame to it."""
    _handlers(nc)
    getattr(nc, _SCREENS)[sub._id] = take


async def raw_unsubscribe(nc: Client, sub: Subscription) -> None:
    _handlers(nc).pop(sub._id, None)
    try:
        await sub.unsubscribe()
    except Exception:  # noqa: BLE001 - a closed connection has no subscription left to remove
        pass


def auth_required(nc: Client) -> bool:
    """Does the server this connection reached authorize connections?"""
    info = getattr(nc, "_server_info", None) or {}
    return bool(info.get("auth_required"))


# -- flow control ------------------------------------------------------------------------------

FLOW_CONTROL_CHECK_S = 0.25
"""While a flow-control request waits for the messages before it to be delivered, how often
that is looked at (nats-py's pace: no event says a callback took a message)."""

_WAKE = "_muster_flow_control_wake"


def _wake_of(jsi: Any) -> asyncio.Event:
    wake: asyncio.Event | None = getattr(jsi, _WAKE, None)
    if wake is None:
        wake = asyncio.Event()
        setattr(jsi, _WAKE, wake)
    return wake


async def _answer_flow_control(jsi: Any) -> None:
    """nats-py's `check_flow_control_response` without its wake-ups when nothing is pending:
    it waits for `schedule_flow_control_response` (called from the read loop when a request
    comes before the messages it follows were delivered) and then looks as nats-py does until
    the answer is sent. With nothing pending it also wakes at the pace of the subscription's
    heartbeat check (twice the idle heartbeat) to end once the connection is closed, as
    nats-py's loop did (an unsubscribe or `close_push` cancels it at once)."""
    wake = _wake_of(jsi)
    idle_s = 2 * (jsi._hbi or 5.0)
    while not jsi._conn.is_closed:
        if jsi._fcr is None:
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), idle_s)
            continue
        if jsi._fciseq - jsi._psub._pending_queue.qsize() >= jsi._fcd:
            reply, jsi._fcr, jsi._fcd = jsi._fcr, None, 0
            with contextlib.suppress(Exception):  # as nats-py: a lost answer is asked for again
                await jsi._conn.publish(reply)
        else:
            await asyncio.sleep(FLOW_CONTROL_CHECK_S)


_schedule_flow_control = JetStreamContext._JSI.schedule_flow_control_response


def _schedule_and_wake(jsi: Any, reply: str) -> None:
    _schedule_flow_control(jsi, reply)
    _wake_of(jsi).set()


# Every push subscription nats-py makes in a muster process (its ordered consumers, KV watches),
# on any connection: the class is patched, once, when the bus layer is imported.
JetStreamContext._JSI.check_flow_control_response = _answer_flow_control  # type: ignore[method-assign]
JetStreamContext._JSI.schedule_flow_control_response = _schedule_and_wake  # type: ignore[method-assign,assignment]


# -- naming ordered consumers ------------------------------------------------------------------


def fresh_name() -> str:
    """A consumer name of its own for one creation of an ordered consumer (never reused)."""
    return uuid.uuid4().hex


def ordered_config(config: ConsumerConfig | None = None) -> ConsumerConfig:
    """`config` (or a new one) with a fresh name, for `js.subscribe(..., ordered_consumer=True)`
    of one filter: nats-py then puts the filter in the request's subject, where the server
    checks the service's rights (see the module's docstring)."""
    config = config or ConsumerConfig()
    config.name = fresh_name()
    return config


def _renamed(jsi: Any) -> None:
    """A new name for the consumer a reset is about to create again (a named one only)."""
    if jsi._ccreq.name:
        jsi._ccreq.name = fresh_name()


_recreate_as_nats_py = JetStreamContext._JSI.recreate_consumer


async def _recreate_renamed(jsi: Any) -> None:
    """nats-py's re-creation after a gap or two missed heartbeats, which sends the config it
    made the consumer with: under the same name the server refused it (that consumer is still
    there, with another start sequence: 10012) and the reader read nothing until the old one
    had expired and a later reset made it again."""
    _renamed(jsi)
    await _recreate_as_nats_py(jsi)


JetStreamContext._JSI.recreate_consumer = _recreate_renamed  # type: ignore[method-assign,assignment]


# -- re-creating an ordered consumer at once -------------------------------------------------

RECREATE_TRIES = 6
"""Tries of re-creating an ordered consumer (0.2 s doubling: ~12 s): a restarted server takes
connections a moment before its JetStream answers."""


async def _recreate_consumer(jsi: Any) -> None:
    """nats-py's `recreate_consumer` with a bounded retry: nats-py tries once and leaves a failure
    to its heartbeat check, two idle heartbeats later. A newer reset (another deliver subject)
    takes over from a retry still waiting."""
    deliver = jsi._ccreq.deliver_subject
    _renamed(jsi)  # (once: a retry of a creation that did land asks for the same consumer again)
    for attempt in range(RECREATE_TRIES + 1):
        try:
            info = await jsi._js._jsm.add_consumer(jsi._stream, config=jsi._ccreq, timeout=jsi._js._timeout)
        except NatsError as err:  # (nats-py's own and JetStream's: a timeout, no responders, a 503)
            if attempt == RECREATE_TRIES or jsi._conn.is_closed:
                await jsi._conn._error_cb(err)
                return
            await asyncio.sleep(0.2 * 2**attempt)  # a bounded retry of one request, not a poll
            if jsi._ccreq.deliver_subject != deliver or jsi._conn.is_closed:
                return
        else:
            jsi._psub._consumer = info.name
            return


async def restart_ordered(sub: JetStreamContext.PushSubscription) -> bool:
    """Re-create an ordered consumer now, from the message after the last it delivered (nats-py
    does that only once two idle heartbeats did not come): called when the consumer may be lost
    (the connection came back, perhaps to a restarted server; a write of ours not delivered back).
    Nothing is missed or delivered twice past what was delivered. False: not an ordered consumer
    on an open connection."""
    jsi = sub._sub._jsi
    if jsi is None or not jsi._ordered or jsi._conn.is_closed or jsi._conn.is_draining:
        return False
    jsi.recreate_consumer = functools.partial(_recreate_consumer, jsi)  # type: ignore[method-assign]  # this one's resets, the heartbeat's too
    return bool(await jsi.reset_ordered_consumer(jsi._sseq + 1))


# -- ending push subscriptions ---------------------------------------------------------------

_GONE = (ConnectionClosedError, ConnectionDrainingError, BadSubscriptionError)
"""What nats-py's `unsubscribe` raises when there is nothing left to unsubscribe from: the
connection closed or draining (which ends its subscriptions itself), or unsubscribed already."""


async def close_push(sub: JetStreamContext.PushSubscription) -> None:
    """Unsubscribe a JetStream push subscription (an ordered consumer) and wait until nats-py's
    tasks for it have ended; safe on a closed or draining connection, and twice."""
    with contextlib.suppress(*_GONE):
        await sub.unsubscribe()
    await _end_tasks(sub._sub)


async def stop_watch(watcher: KeyValue.KeyWatcher) -> None:
    """`close_push` for a KV watch (whose own `stop` also ends its iterator)."""
    if watcher._sub is None:
        return
    with contextlib.suppress(*_GONE):
        await watcher.stop()  # type: ignore[no-untyped-call]  # (nats-py leaves it unannotated)
    await _end_tasks(watcher._sub._sub)


async def _end_tasks(core: Subscription) -> None:
    jsi = core._jsi
    found: list[Any] = [jsi._hbtask, jsi._fctask] if jsi is not None else []
    delivering: Any = core._wait_for_msgs_task  # cancelled by an unsubscribe or a close: its end awaited
    if delivering is not None and delivering.cancelling():
        found.append(delivering)
    # (a callback closing its own subscription runs in the delivering task: it cannot wait for itself)
    tasks: list[asyncio.Task[Any]] = [t for t in found if t is not None and not t.done() and t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait for its end. Python 3.11's `asyncio.wait_for` can swallow a cancel
    that arrives as the future it awaits completes (python/cpython#86296), and nats-py's first
    connect awaits in it and retries without end: a service stopped while NATS refused its
    connections carried on connecting, its stop waiting on it for ever (2 runs in 36 of a
    SIGTERM just after the provisioner's first line). The cancel is sent again until it takes:
    one a second, a reconnect's wait being half of one."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_S)


CANCEL_AGAIN_S = 1.0


async def close_unconnected(nc: Client) -> None:
    """Close a client whose first connect raised. nats-py raises a refusal (a bad token) before
    it closes the socket when it may not reconnect: a tracker acting for a revoked token kept
    one open per request. Its callbacks are not told: it never was connected."""

    async def quiet(err: Exception) -> None:  # (the reset of the socket the server closed already)
        return None

    nc._error_cb = quiet
    with contextlib.suppress(Exception):
        await nc._close(Client.CLOSED, do_cbs=False)


async def flush(nc: Client, timeout: int = 10) -> None:
    """A round trip that covers everything sent so far on `nc`: when it returns, the server has
    read every subscription, unsubscription and publish made before the call. nats-py's own
    `flush` (2.16) writes its PING straight to the socket, ahead of the commands its flusher
    task has not written yet: its PONG can come back before the server has read the SUB made
    just before, and another connection's publish then reaches the subscription unsubscribed
    before it, or none (a tenant's bus callback was lost that way in
    tests/integration/auth/test_isolation.py). The send buffer goes out first here, then the
    PING behind it."""
    transport = nc._transport
    if nc._pending and nc.is_connected and transport is not None:
        transport.writelines(nc._pending)
        nc._pending = []
        nc._pending_data_size = 0
    await nc.flush(timeout)


# -- connecting again, and closing for good ---------------------------------------------------


class HandshakeError(NatsError):
    """A (re)connect whose CONNECT was not answered with PONG: the attempt failed, and nats-py
    tries again (the first connect: `connect` raises it, after its retries)."""

    def __str__(self) -> str:
        return "nats: the server did not answer the connect with PONG (it closed the connection or sent something else first)"


def strict_handshake(nc: Client) -> None:
    """A connect or reconnect of `nc` is done only once the server answered the PING behind its
    CONNECT with PONG. Call before `nc.connect`.

    nats-py's `_process_connect_init` (2.16) reads one line after its PING: PONG makes the
    connection CONNECTED, -ERR raises, and anything else (an EOF, a PING or INFO of the
    server's ahead of its answer) is taken for done, with the status left CONNECTING: the read
    loop starts on a connection the server may be refusing, and the reconnect goes on as if it
    had made it. When the server's "-ERR 'Authorization Violation'" then reaches that read loop
    while the status still says CONNECTING (the resubscriptions written to the closed socket
    fail, and the reconnect yields before it sets CONNECTED), `_process_err` takes it for the
    refusal of a first connect and closes the connection for good without a callback: a service
    lived on with a connection closed, neither reconnecting nor exiting (docs/testing.md).
    Here such a handshake fails like one answered with -ERR: the tasks it started are
    cancelled before they run, its socket closed, and nats-py's reconnect loop tries again."""
    original = nc._process_connect_init

    async def process_connect_init() -> None:
        await original()
        if nc.is_connected:
            return
        for task in (nc._reading_task, nc._ping_interval_task, nc._flusher_task):
            if task is not None and not task.done():
                task.cancel()
        if nc._transport is not None:
            nc._transport.close()  # type: ignore[no-untyped-call]  # (nats-py leaves it unannotated)
        raise HandshakeError()

    nc._process_connect_init = process_connect_init  # type: ignore[method-assign]


_CLOSED_LISTENERS = "_muster_closed_listeners"


def on_closed(nc: Client, listener: Callable[[], None]) -> None:
    """`listener` is called once, when `nc` starts closing for good, whoever closes it and
    whether or not nats-py then calls its closed callback (its `_close` sets the status CLOSED
    first and calls the callback last: an -ERR read while reconnecting closes without it, and an
    error on the way, a reset socket's `drain`, would end `_close` before it). Called at once if
    `nc` is closed already. A closed connection never comes back: a service exits on it, and its
    supervisor starts it again."""
    if nc.is_closed:
        listener()
        return
    listeners: list[Callable[[], None]] | None = getattr(nc, _CLOSED_LISTENERS, None)
    if listeners is None:
        listeners = []
        setattr(nc, _CLOSED_LISTENERS, listeners)
        original = nc._close

        async def close(status: int, do_cbs: bool = True) -> None:
            # (a first connect's failed attempt closes with DISCONNECTED, and tries again)
            if status == Client.CLOSED and not nc.is_closed and listeners:
                told = list(listeners)
                listeners.clear()
                for each in told:
                    each()
            await original(status, do_cbs)

        nc._close = close  # type: ignore[method-assign]
    listeners.append(listener)


def connection_of(js: JetStreamContext) -> Client:
    return js._nc


def timeout_of(js: JetStreamContext) -> float:
    return float(js._timeout)


# -- writing ---------------------------------------------------------------------------------


class Refused(StoreError):
    """A publish answered with a status and no body (503: no stream takes the subject)."""

    def __init__(self, subject: str, status: str) -> None:
        super().__init__(f"{subject}: refused with status {status} (code {status})")
        self.status = status


class Publisher:
    """The connection's writer: publishes with answers (`request`, `future`), publishes without
    (`send`), and settles deliveries (`settle`). See the module's docstring."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self._waiting: dict[bytes, tuple[str, Answer]] = {}
        self._deadlines: dict[float, deque[tuple[float, bytes]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._tokens = itertools.count()
        self._write_due = False
        self._subscribed: asyncio.Future[Subscription] = asyncio.ensure_future(
            raw_subscribe(nc, f"{self.prefix}.*", self._on_answer))
        # Read here, so that a connection closed or drained before the subscription was made (a
        # service that could not start) is not reported as "Task exception was never retrieved"
        # after the service's own last words: `of` and `start` see the failure all the same.
        self._subscribed.add_done_callback(lambda f: None if f.cancelled() else f.exception())

    @classmethod
    def of(cls, nc: Client) -> Publisher:
        """The connection's publisher (made on first use; its inbox subscription is on its way)."""
        publisher: Publisher | None = getattr(nc, _PUBLISHER, None)
        if publisher is None or (publisher._subscribed.done() and publisher._subscribed.exception() is not None):
            publisher = cls(nc)
            setattr(nc, _PUBLISHER, publisher)
        return publisher

    @property
    def ready(self) -> bool:
        """Its inbox is subscribed: `request` may be called."""
        return self._subscribed.done() and not self._subscribed.cancelled() and self._subscribed.exception() is None

    async def start(self) -> None:
        """Wait until the inbox is subscribed (no answer can come before it)."""
        await asyncio.shield(self._subscribed)  # one caller cancelled must not undo it for the others

    @property
    def waiting(self) -> int:
        """Publishes whose answer has not come yet."""
        return len(self._waiting)

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None, on_answer: Answer, timeout: float,
                *, now: bool = False) -> None:
        """Publish with a reply: `on_answer` gets the answer's payload (from the read loop), or
        `Refused`, or nats' TimeoutError after `timeout`. Raises at once if the connection
        cannot take it (closed; reconnecting with a full buffer). Call after `start()`."""
        token = str(next(self._tokens)).encode()
        self._enqueue(frame(subject, f"{self.prefix}.{token.decode()}", headers, data))
        self._waiting[token] = (subject, on_answer)
        deadline = asyncio.get_running_loop().time() + timeout
        line = self._deadlines.get(timeout)
        if line is None:
            line = self._deadlines[timeout] = deque()
        line.append((deadline, token))
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)
        self._write(now)

    def future(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float,
               *, now: bool = False) -> asyncio.Future[bytes]:
        """`request`, answered into a future."""
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.request(subject, data, headers, lambda got: _resolve(answer, got), timeout, now=now)
        return answer

    def send(self, subject: str, data: bytes, headers: dict[str, str] | None = None, *, now: bool = False) -> None:
        """Publish with no reply (the messages of an atomic batch before its commit)."""
        self._enqueue(frame(subject, "", headers, data))
        self._write(now)

    def settle(self, reply: str, settle: Settle) -> bool:
        """Tell JetStream what became of the delivery whose reply subject this is; written with
        the others of this turn of the loop. False if the connection cannot take it (closed, or
        reconnecting with a full buffer): it is lost, and the server redelivers, as after any
        lost ack."""
        try:
            self._enqueue(frame(reply, "", None, settle_body(settle)))
        except (ConnectionClosedError, OutboundBufferLimitError):
            return False
        self._write(False)
        return True

    def flush(self) -> None:
        """Write what is queued now."""
        self._write(True)

    def _enqueue(self, command: bytes) -> None:
        nc = self.nc
        if nc.is_closed:
            raise ConnectionClosedError()
        if not nc.is_connected and (nc._max_pending_size <= 0
                                    or len(command) + nc._pending_data_size > nc._max_pending_size):
            raise OutboundBufferLimitError()  # as nats-py's publish while reconnecting
        nc._pending.append(command)
        nc._pending_data_size += len(command)

    def _write(self, now: bool) -> None:
        if now:
            self._write_pending()
        elif not self._write_due:
            self._write_due = True
            asyncio.get_running_loop().call_soon(self._write_pending)

    def _write_pending(self) -> None:
        """nats-py's buffer to the socket (it does not block); while reconnecting it waits, as
        nats-py's own commands do, for the reconnect's flush."""
        self._write_due = False
        nc = self.nc
        transport = nc._transport
        if nc._pending and nc.is_connected and transport is not None:
            transport.writelines(nc._pending)
            nc._pending = []
            nc._pending_data_size = 0

    def _on_answer(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes) -> None:
        entry = self._waiting.pop(subject.rsplit(b".", 1)[-1], None)
        if entry is None:
            return None  # expired, or answered twice
        published, on_answer = entry
        if data:
            on_answer(data)
        else:  # a status only: 503, no stream takes the subject
            status = header_block[9:12].decode("ascii", "replace") if header_block.startswith(b"NATS/1.0 ") else "?"
            on_answer(Refused(published, status))
        return None

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = asyncio.get_running_loop().call_at(at, self._expire), at

    def _expire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        first: float | None = None
        for line in self._deadlines.values():
            while line and (line[0][1] not in self._waiting or line[0][0] <= now):
                _, token = line.popleft()
                entry = self._waiting.pop(token, None)
                if entry is not None:
                    entry[1](NatsTimeout())  # as `js.publish`: whether it landed is unknown
            if line and (first is None or line[0][0] < first):
                first = line[0][0]
        if first is not None:
            self._arm(first)


def _resolve(future: asyncio.Future[bytes], got: bytes | BaseException) -> None:
    if future.done():
        return  # a caller that gave up
    if isinstance(got, BaseException):
        future.set_exception(got)
    else:
        future.set_result(got)


def settle(nc: Client, reply: str, verdict: Settle) -> bool:
    """The one way a delivery of any consumer is acked, naked, terminated or kept in progress
    (`Publisher.settle`)."""
    return Publisher.of(nc).settle(reply, verdict)
