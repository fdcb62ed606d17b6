"""TASKS kept as this version declares it, whoever declared it (docs/security.md, "Not covered").

TASKS lives in memory: a restarted nats-server loses it, and the first planner or provisioner
back declares it again. Its request's config is in the body, which permissions cannot see, so a
compromised one could declare it capturing `muster.ops.>` (JetStream then acknowledged every
tenant's request, and kept it) or copying what it takes elsewhere; the others find a stream of
another config, which they may not update, and use it as it is. The auth service, which alone
may update it, looks at each creation of TASKS (its advisory) and after each reconnect of its
own (a creation while it was away), and puts back what matters: the subjects, and no copy of
anything (republish, sources, a mirror, a subject transform)."""

from __future__ import annotations

import dataclasses

import structlog
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import APIError, NotFoundError

from contracts import subjects
from muster.bus.streams import tasks_config

log = structlog.get_logger("muster.auth")

CREATED = f"$JS.EVENT.ADVISORY.STREAM.CREATED.{subjects.TASKS_STREAM}"
"""The advisory of TASKS' creation, in the account that holds it."""


def _as_declared(have: StreamConfig, want: StreamConfig) -> bool:
    """What a capture or a copy needs is as this version declares it. Storage and retention
    may differ (a TASKS on file from before decision 0013 works as it is)."""
    return (sorted(have.subjects or []) == sorted(want.subjects or []) and not have.republish and not have.sources
            and not have.mirror and not have.subject_transform)


async def restore_tasks(js: JetStreamContext, replicas: int = 1) -> bool:
    """TASKS' subjects put back, and any copy taken off, if another declared it otherwise; True
    if it did. A TASKS that cannot be updated so (a mirror) is deleted and declared again:
    what was queued there is what a lost queue is to the planners (they ask the provisioners
    what they hold), as after a restart."""
    want = tasks_config(replicas)
    try:
        have = (await js.stream_info(subjects.TASKS_STREAM)).config
    except NotFoundError:
        return False  # gone: whoever declares it next is looked at then
    if _as_declared(have, want):
        return False
    log.warning("TASKS was declared with other subjects or copies; put back", subjects=have.subjects)
    fixed = dataclasses.replace(have, subjects=want.subjects, republish=None, sources=None, subject_transform=None)
    try:
        await js.update_stream(fixed)
    except APIError as err:
        log.warning("TASKS could not be put back by an update: declared again", error=str(err))
        await js.delete_stream(subjects.TASKS_STREAM)
        await js.add_stream(want)
    return True
