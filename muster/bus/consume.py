"""Durable consumption of the log, with one place that decides ack / nak / term (sent by
`muster.bus.wire.settle`, as every consumer's are); services subscribe their routing tables
(`muster.routing.Route`) with `consume_routes`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import structlog
from nats import errors as nats_errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import errors as js_errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from contracts import subjects

from ..cancels import cancel_asked
from ..ports.delivery import ACK, PROGRESS, TERM, Settle, nak
from ..routing import BatchHandler, Handler, NotYet, Route, router
from .bodies import Bodies
from .eventstore import H_TYPE, ConcurrencyError, NoDirectGet, Recorded, StoreError, inflate, recorded_from_msg
from .protocol import header
from .wire import connection_of, screen, settle

log = structlog.get_logger("muster.bus")

PoisonHandler = Callable[[Recorded, BaseException], Awaitable[None]]

RETRY_DELAY_S = 1.0
MAX_RETRY_DELAY_S = 30.0
MAX_FAILURES = 5
"""Deliveries of one event that fail for a reason that is not the bus's before it is poison."""
CREATE_TRIES = 3
"""Times a consumer's creation is asked for when it times out: on a cluster that has just
started, the stream may still be electing its leader (creating it again is harmless)."""

TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,  # connection errors and nats' TimeoutError
    nats_errors.ConnectionClosedError, nats_errors.ConnectionDrainingError, nats_errors.ConnectionReconnectingError,
    nats_errors.NoRespondersError, nats_errors.NoServersError, nats_errors.StaleConnectionError,
    nats_errors.FlushTimeoutError, nats_errors.OutboundBufferLimitError, nats_errors.SlowConsumerError,
    js_errors.ServiceUnavailableError, js_errors.ServerError, js_errors.NoStreamResponseError,
    ConcurrencyError, NoDirectGet, NotYet,
)
_UNAVAILABLE = ("unavailable", "no leader", "code 10008", "code 503")


def transient(err: BaseException) -> bool:
    """An error of the bus or the log that goes away on its own (a server restarting, a
    leader election, a stale view reloaded): retried for as long as it takes. Anything else
    (a message too large, a body that cannot be found, a bug) fails the same way every time."""
    if isinstance(err, TRANSIENT):
        return True
    return isinstance(err, StoreError) and any(s in str(err).lower() for s in _UNAVAILABLE)


async def consume_events(
    js: JetStreamContext,
    filter_subject: str,
    durable: str,
    handler: Handler,
    queue: str | None = None,
    ack_wait: float = 30.0,
    on_poison: PoisonHandler | None = None,
    max_failures: int | None = None,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
    inactive_threshold: float | None = None,
    also: Sequence[str] = (),
    stubs: Collection[str] = (),
    types: Collection[str] | None = None,
    deliver: str | None = None,
) -> JetStreamContext.PushSubscription:
    """Deliver every event matching the filter (and the filters `also` names) to `handler`, at
    least once, resuming where the durable consumer left off.

    A handler error is logged and the event redelivered after a delay that doubles (up to
    `MAX_RETRY_DELAY_S`). An error of the bus (`transient`) is retried for as long as it
    lasts; any other error makes the event poison after `max_failures` deliveries:
    `on_poison` records what it means (the planner fails the job with the reason) and the
    event is terminated, so it cannot jam the consumer forever. An event that cannot be
    decoded is terminated at once.

    A new durable starts at `deliver_policy` (`NEW` for a consumer of one process that
    catches up from the log by itself); with `inactive_threshold` the server deletes it that
    long after its last subscriber went away (a planner that died does not leave it behind).
    An event of a type in `stubs` whose body is stored apart reaches `handler` as its stub
    (`Route.stubs`). With `types`, an event whose type header names another type is
    acknowledged unread (`_unwanted`). `deliver`: the durable's delivery subject
    (`Route.deliver`), put back if a durable made before delivers elsewhere."""

    bodies = Bodies(js)
    nc = connection_of(js)

    def _settle(msg: Msg, verdict: Settle) -> None:
        _settle_on(nc, msg, verdict)

    async def on_msg(msg: Msg) -> None:
        if _unwanted(msg, types):
            _settle(msg, ACK)
            return
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(subject=msg.subject, seq=msg.metadata.sequence.stream, durable=durable)
        try:
            recorded = recorded_from_msg(msg)
        except (ValidationError, ValueError, KeyError) as err:
            log.error("undecodable event terminated", error=str(err))
            _settle(msg, TERM)
            return
        delivery = msg.metadata.num_delivered
        try:
            if recorded.type not in stubs:
                recorded = await inflate(bodies, recorded)
            await _keeping_claim(msg, handler(recorded), ack_wait / 3)
        except Exception as err:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Stopped mid-event (the subscription is going away), and the cancel turned
                # into another error on the way out: stop now; the event is redelivered.
                raise asyncio.CancelledError() from None
            if not transient(err) and delivery >= (max_failures or MAX_FAILURES):
                await _poison(msg, recorded, err)
                return
            delay = min(RETRY_DELAY_S * 2 ** (delivery - 1), MAX_RETRY_DELAY_S)
            if isinstance(err, NotYet):
                log.info("not decided yet; will redeliver", type=recorded.type, reason=str(err), retry_in_s=delay)
            else:
                log.exception("handler failed; will redeliver", type=recorded.type, delivery=delivery, retry_in_s=delay)
            _settle(msg, nak(delay))
            return
        _settle(msg, ACK)

    async def _keeping_claim(msg: Msg, work: Awaitable[None], interval: float) -> None:
        """A long handler (planning 10,000 nodes) tells the server it still holds the event,
        so it is not redelivered to another planner meanwhile."""
        task = _owned(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            _settle(msg, PROGRESS)  # (lost with the connection: a redelivery is harmless)

    async def _poison(msg: Msg, recorded: Recorded, err: BaseException) -> None:
        _settle(msg, TERM if await _poisoned(recorded, err, on_poison) else nak(MAX_RETRY_DELAY_S))

    config = _config(durable, [filter_subject, *also], ack_wait, deliver_policy, inactive_threshold)
    if deliver is not None:
        config.deliver_subject = deliver
        await _deliver_on(js, durable, deliver)
    return _screened(nc, await _subscribe(js, filter_subject, durable, queue, config, on_msg), types)


async def _deliver_on(js: JetStreamContext, durable: str, deliver: str) -> None:
    """A durable an earlier version made delivers to its maker's inbox: moved to `deliver`
    (nats-server takes a push consumer's new delivery subject as an update)."""
    try:
        info = await js.consumer_info(subjects.EVENTS_STREAM, durable)
    except js_errors.NotFoundError:
        return
    if info.config.deliver_subject != deliver:
        log.info("the durable's delivery moved to a subject every instance may take", durable=durable, deliver=deliver)
        await js.add_consumer(subjects.EVENTS_STREAM, dataclasses.replace(info.config, deliver_subject=deliver))


def _config(durable: str, filters: Sequence[str], ack_wait: float, deliver_policy: DeliverPolicy,
            inactive_threshold: float | None) -> ConsumerConfig:
    """With its name, nats-py asks for a consumer of one filter on
    `$JS.API.CONSUMER.CREATE.EVENTS.<durable>.<filter>`, where the server's permissions see the
    filter (a service's rights list the filters it reads, docs/security.md); without it, the
    legacy `CONSUMER.DURABLE.CREATE.EVENTS.<durable>`, the filter in the body, unseen."""
    return ConsumerConfig(
        name=durable,
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=-1,
        deliver_policy=deliver_policy,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=list(filters) if len(filters) > 1 else None,
        inactive_threshold=inactive_threshold,
    )


async def _subscribe(js: JetStreamContext, filter_subject: str, durable: str, queue: str | None, config: ConsumerConfig,
                     on_msg: Callable[[Msg], Awaitable[None]]) -> JetStreamContext.PushSubscription:
    for attempt in range(1, CREATE_TRIES + 1):
        try:
            return await js.subscribe(filter_subject, queue=queue, durable=durable, stream=subjects.EVENTS_STREAM,
                                      cb=on_msg, manual_ack=True, config=config)
        except nats_errors.TimeoutError:
            if attempt == CREATE_TRIES:
                raise
            log.warning("creating a consumer timed out; asking again", durable=durable, attempt=attempt)
    raise AssertionError("unreachable")


async def consume_routes(js: JetStreamContext, service: Any, routes: Sequence[Route],
                         **options: Any) -> list[JetStreamContext.PushSubscription]:
    """Subscribe `service` to every route of its table (options as `consume_events`)."""
    return [await consume_events(js, r.filter, r.durable, router(service, r), queue=r.queue, also=r.also, stubs=r.stubs,
                                 types=frozenset(r.handlers), deliver=r.deliver, **options)
            for r in routes]


def _screened(nc: Any, sub: JetStreamContext.PushSubscription,
              types: Collection[str] | None) -> JetStreamContext.PushSubscription:
    """With `types`, the events of other types are acked from the read loop by their type
    header (`wire.screen`), before nats-py makes a `Msg` of them: a job's fence markers, one
    a wave of outcomes (docs/decisions/0033), reach the notifier and the tracker's index,
    which take none (docs/benchmarks.md, "Scale"). Those delivered before the screen is in
    place are acked by `_unwanted`."""
    if types is not None:
        wanted = frozenset(types)

        def take(reply: bytes, headers: bytes) -> bool:
            kind = header(headers, _TYPE)
            if kind is None or kind in wanted or not reply:
                return False
            if not settle(nc, reply.decode(), ACK):
                log.warning("ack lost with the connection; the event is redelivered", verdict=ACK.verdict.value)
            return True

        screen(nc, sub._sub, take)
    return sub


_TYPE = H_TYPE.encode()


def _unwanted(msg: Msg, types: Collection[str] | None) -> bool:
    """An event of a type the consumer's handler ignores, told by its type header alone: the
    filters select by subject, and a job's subject carries its plan (a 10,000-node create's
    is megabytes, its body stored apart) and its task records as well as the job's end, all
    a notifier acts on; a cluster's its layout, a layout's the solver's answer. Decoding
    them, or fetching their bodies, only to drop them is a cost that grows with the job
    (docs/benchmarks.md, "Scale"). An event without the header is decoded and routed as
    before."""
    if types is None:
        return False
    kind = (msg.headers or {}).get(H_TYPE)
    return kind is not None and kind not in types


MOST = 500
"""The most deliveries handed to a batch handler at once."""


async def consume_batches(
    js: JetStreamContext,
    filter_subject: str,
    durable: str,
    handler: BatchHandler,
    ack_wait: float = 30.0,
    on_poison: PoisonHandler | None = None,
    max_failures: int | None = None,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
    inactive_threshold: float | None = None,
    most: int = MOST,
    types: Collection[str] | None = None,
) -> JetStreamContext.PushSubscription:
    """`consume_events` for a handler that takes a list: every delivery waiting when the
    handler is free goes to it at once, in order (a wave of events is one call, and one save
    for the planner, instead of one per event). Each event is acked when its call returns.

    When the handler fails, the batch is taken again one event at a time, in order, to find
    which failed: the others are acked, the failed one is delivered again after a delay (or
    made poison, as in `consume_events`). Acks stay explicit, one per event: with
    `AckPolicy.ALL` an ack would settle a failed event before it (nats-server 2.15 also
    redelivers, in a tight loop, an unacked event older than an acked redelivery)."""
    bodies = Bodies(js)
    nc = connection_of(js)
    waiting: list[Msg] = []
    drains: list[asyncio.Task[None]] = []

    async def on_msg(msg: Msg) -> None:  # nats-py's callback: hand over, return at once
        if _unwanted(msg, types):
            _settle_on(nc, msg, ACK)
            return
        waiting.append(msg)
        if not drains or drains[-1].done():
            drains[:] = [asyncio.ensure_future(drain())]

    async def drain() -> None:
        while waiting:
            batch = waiting[:most]
            del waiting[:most]
            await take(batch)

    async def take(batch: list[Msg]) -> None:
        taken: list[tuple[Msg, Recorded]] = []
        for msg in batch:
            try:
                taken.append((msg, await inflate(bodies, recorded_from_msg(msg))))
            except (ValidationError, ValueError, KeyError) as err:
                log.error("undecodable event terminated", subject=msg.subject, durable=durable, error=str(err))
                _settle_on(nc, msg, TERM)
        if not taken:
            return
        try:
            await _keeping_claims([m for m, _ in taken], handler([r for _, r in taken]), ack_wait / 3, nc)
        except Exception:  # noqa: BLE001 - one at a time, to find which
            if cancel_asked():
                raise asyncio.CancelledError() from None
            for msg, recorded in taken:
                await one(msg, recorded)
            return
        for msg, _ in taken:
            _settle_on(nc, msg, ACK)

    async def one(msg: Msg, recorded: Recorded) -> None:
        try:
            await handler([recorded])
        except Exception as err:  # noqa: BLE001 - told to the log, delivered again
            if cancel_asked():
                raise asyncio.CancelledError() from None
            delivery = msg.metadata.num_delivered
            if not transient(err) and delivery >= (max_failures or MAX_FAILURES):
                _settle_on(nc, msg, TERM if await _poisoned(recorded, err, on_poison) else nak(MAX_RETRY_DELAY_S))
                return
            delay = min(RETRY_DELAY_S * 2 ** (delivery - 1), MAX_RETRY_DELAY_S)
            log.warning("handler failed; will redeliver", type=recorded.type, delivery=delivery, retry_in_s=delay,
                        error=f"{type(err).__name__}: {err}"[:300], durable=durable)
            _settle_on(nc, msg, nak(delay))
            return
        _settle_on(nc, msg, ACK)

    config = _config(durable, [filter_subject], ack_wait, deliver_policy, inactive_threshold)
    return _screened(nc, await _subscribe(js, filter_subject, durable, None, config, on_msg), types)


def _settle_on(nc: Any, msg: Msg, verdict: Settle) -> None:
    if not settle(nc, msg.reply, verdict):
        log.warning("ack lost with the connection; the event is redelivered", verdict=verdict.verdict.value)


def _owned(work: Awaitable[None]) -> asyncio.Future[None]:
    """The handler's run as a task of its own. If the consumer stops waiting for it (cancelled
    with its subscription) it runs on, as before; how it then ends is logged here rather than
    left unretrieved ("Task exception was never retrieved")."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_ended_alone)
    return task


def _ended_alone(task: asyncio.Future[None]) -> None:
    if task.cancelled():
        return
    err = task.exception()  # retrieved: the consumer's own wait re-raises it when it still waits
    if err is not None:
        log.debug("handler ended with an error", error=f"{type(err).__name__}: {err}"[:500])


async def _keeping_claims(msgs: list[Msg], work: Awaitable[None], interval: float, nc: Any) -> None:
    """A long handler tells the server it still holds its events (see `consume_events`)."""
    task = _owned(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=interval)
        if done:
            return task.result()
        for msg in msgs:
            _settle_on(nc, msg, PROGRESS)


async def _poisoned(recorded: Recorded, err: BaseException, on_poison: PoisonHandler | None) -> bool:
    """Record what a poison event means (`on_poison`); False if that failed too (it is then
    delivered again later)."""
    if on_poison is not None:
        try:
            await on_poison(recorded, err)
        except Exception:
            log.exception("recording a poison event failed; will redeliver", type=recorded.type)
            return False
    log.error("poison event terminated", type=recorded.type, error=f"{type(err).__name__}: {err}"[:500])
    return True
