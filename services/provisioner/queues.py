"""A provisioner's task queues: one durable pull consumer per (tenant, class) on TASKS, shared by
every provisioner that serves it, declared (again) by whichever comes."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo
from nats.js.errors import BadRequestError, NotFoundError

from contracts import subjects
from muster.bus.streams import ensure_tasks_stream

from .domain.actions import WorkerConfig

CONSUMER_EXISTS = 10148  # the durable exists with other settings: use it as it is
STREAM_NOT_FOUND = 10059


async def declare_queue(js: JetStreamContext, tenant: str, config: WorkerConfig) -> float:
    """Declare the tenant's queue of this provisioner's class; returns its ack wait in force."""
    durable = subjects.task_consumer(tenant, config.provisioner_class)
    # (named: nats-py then asks on `CONSUMER.CREATE.TASKS.<durable>.<filter>`, the one form whose
    # filter the server's permissions see, docs/security.md)
    consumer = ConsumerConfig(name=durable, durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=config.ack_wait_s,
                              max_deliver=-1, filter_subject=subjects.task_queue(tenant, config.provisioner_class),
                              max_ack_pending=-1)
    try:
        info = await _add_consumer(js, consumer)
    except BadRequestError as err:
        if err.err_code != CONSUMER_EXISTS:
            raise
        info = await js.consumer_info(subjects.TASKS_STREAM, durable)
    return float(info.config.ack_wait or config.ack_wait_s)


async def _add_consumer(js: JetStreamContext, config: ConsumerConfig) -> ConsumerInfo:
    try:
        return await js.add_consumer(subjects.TASKS_STREAM, config)
    except NotFoundError as err:
        if err.err_code != STREAM_NOT_FOUND:
            raise
    # TASKS lives in memory (docs/decisions/0013): a restarted server lost it, queue and all.
    # Declared again here; the planners queue their lost attempts again themselves.
    await ensure_tasks_stream(js)
    return await js.add_consumer(subjects.TASKS_STREAM, config)
