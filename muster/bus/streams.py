"""Declare the streams and buckets once, idempotently, at every service's start."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from contracts import subjects

from .bodies import bodies_config


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
        storage=StorageType.FILE,
        duplicate_window=120.0,
        num_replicas=replicas,
    )


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> None:
    for config in (events_config(replicas), tasks_config(replicas), bodies_config(replicas)):
        try:
            await js.add_stream(config)
        except BadRequestError as err:
            # 10058: exists with a different config (e.g. created by another version): update.
            if err.err_code != 10058:
                raise
            await js.update_stream(config)


async def ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """Create a KV bucket (idempotent), or bind to it if it exists with other settings
    (10058: declared by another version; it is used as it is)."""
    try:
        return await js.create_key_value(config)
    except BadRequestError as err:
        if err.err_code != 10058:
            raise
        return await js.key_value(config.bucket)
