"""Durable consumption of the log, with one place that decides ack / nak / term; services
subscribe their routing tables (`muster.routing.Route`) with `consume_routes`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import ValidationError

from contracts import subjects

from ..routing import Handler, Route, router
from .eventstore import recorded_from_msg

log = structlog.get_logger("muster.bus")

RETRY_DELAY_S = 1.0


async def consume_events(
    js: JetStreamContext,
    filter_subject: str,
    durable: str,
    handler: Handler,
    queue: str | None = None,
    ack_wait: float = 30.0,
) -> JetStreamContext.PushSubscription:
    """Deliver every event matching the filter to `handler`, at least once, resuming where the
    durable consumer left off. A handler error is logged and the event redelivered after a
    delay; an event that cannot be decoded is terminated (it can never succeed) and logged."""

    async def on_msg(msg: Msg) -> None:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(subject=msg.subject, seq=msg.metadata.sequence.stream, durable=durable)
        try:
            recorded = recorded_from_msg(msg)
        except (ValidationError, ValueError, KeyError) as err:
            log.error("undecodable event terminated", error=str(err))
            await msg.term()
            return
        try:
            await handler(recorded)
        except Exception:
            log.exception("handler failed; will redeliver", type=recorded.type)
            await msg.nak(delay=RETRY_DELAY_S)
            return
        await msg.ack()

    config = ConsumerConfig(
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=-1,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=filter_subject,
    )
    return await js.subscribe(
        filter_subject,
        queue=queue,
        durable=durable,
        stream=subjects.EVENTS_STREAM,
        cb=on_msg,
        manual_ack=True,
        config=config,
    )


async def consume_routes(js: JetStreamContext, service: Any, routes: Sequence[Route],
                         **options: Any) -> list[JetStreamContext.PushSubscription]:
    """Subscribe `service` to every route of its table."""
    return [await consume_events(js, r.filter, r.durable, router(service, r), queue=r.queue, **options) for r in routes]
