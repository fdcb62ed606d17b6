"""Declare the streams and buckets once, idempotently, at every service's start.

TASKS is kept in memory (docs/decisions/0013): a task message is delivery, not a fact (the
planner's `TaskQueued` in EVENTS is), and a memory queue takes one disk sync per task off the
pipeline. A restart that loses it is repaired: services declare it again when they find it
gone (`ensure_tasks_stream`), and each planner queues its attempts again when it finds the
stream new (`NatsTaskQueue.watch_resets`). A TASKS made on file by an older version stays so:
nats-server refuses to change a stream's storage (10052).
"""

from __future__ import annotations

import os

import structlog
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, RetentionPolicy, StorageType, StreamConfig, StreamInfo
from nats.js.errors import APIError, BadRequestError
from nats.js.kv import KeyValue

from contracts import subjects

from .bodies import bodies_config
from .replicas import ensure_replicas, kv_stream

log = structlog.get_logger("muster.bus")
STORAGE_UNCHANGEABLE = 10052
EXISTS_OTHERWISE = 10058


def replicas_from_env() -> int:
    """Replicas of every stream: 1 on one server, 3 on a cluster (set by `muster up`/compose)."""
    return int(os.environ.get("MUSTER_REPLICAS", "1"))


def events_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=subjects.EVENTS_STREAM,
        subjects=[subjects.ALL_EVENTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=0,  # never expires
        max_msgs=-1,
        max_bytes=-1,
        discard=DiscardPolicy.NEW,  # if a limit is ever set, refuse new facts rather than drop old ones
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        duplicate_window=120.0,
        num_replicas=replicas,
    )


def tasks_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=subjects.TASKS_STREAM,
        subjects=[f"{subjects.TASK}.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.MEMORY,
        allow_atomic=True,  # the planner's waves of task messages (muster.bus.taskqueue)
        duplicate_window=120.0,
        num_replicas=replicas,
    )


async def ensure_streams(js: JetStreamContext, replicas: int = 1, tasks: bool = True) -> None:
    """`tasks`: TASKS too (the services that use it: `muster.runtime.service.TASK_QUEUE_SERVICES`)."""
    for config in (events_config(replicas), *([tasks_config(replicas)] if tasks else []), bodies_config(replicas)):
        await _declare(js, config)


async def ensure_tasks_stream(js: JetStreamContext, replicas: int | None = None) -> StreamInfo:
    """TASKS as it is, declared first if it is gone (a restarted server loses a memory stream)."""
    info = await _declare(js, tasks_config(replicas_from_env() if replicas is None else replicas))
    return info if info is not None else await js.stream_info(subjects.TASKS_STREAM)


async def _declare(js: JetStreamContext, config: StreamConfig) -> StreamInfo | None:
    try:
        return await js.add_stream(config)
    except BadRequestError as err:
        # Exists with a different config (e.g. created by another version): update.
        if err.err_code != EXISTS_OTHERWISE:
            raise
    try:
        return await js.update_stream(config)
    except NatsTimeout:
        # A connection that may not update streams (every service's but the auth service's:
        # docs/security.md, "Services' JetStream rights") finds one another version declared:
        # the server drops the request. It is used as it is; the auth service updates it at its start.
        log.warning("a stream has another config than this version's and this connection may not update it: used as it is",
                    stream=config.name)
        return None
    except APIError as err:  # (10052 comes as a server error, code 500)
        if err.err_code != STORAGE_UNCHANGEABLE or config.name != subjects.TASKS_STREAM:
            raise
        # A TASKS on file from before 0013: it works as it is (each task costs a sync more).
        log.info("TASKS stays on file storage (made by an older version); docs/bus.md tells how to move it")
        return await js.stream_info(config.name)


async def ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """Create a KV bucket (idempotent), or bind to it if it exists with other settings
    (10058: declared by another version; it is used as it is, but for fewer replicas than
    `config`'s, which it is given: `muster.bus.replicas`)."""
    try:
        return await js.create_key_value(config)
    except BadRequestError as err:
        if err.err_code != EXISTS_OTHERWISE:
            raise
        await ensure_replicas(js, kv_stream(config.bucket), config.replicas)
        return await js.key_value(config.bucket)
