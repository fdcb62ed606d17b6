"""The planner's routing tables: everything it listens to, in one place.

`ROUTES`: which durable consumer feeds which handler, per event type. `grep` an event's name
here to see what the planner does with it. Events on a consumer's subjects that the table does
not name (the planner's own `LayoutRequested`) are acknowledged and ignored. docs/bus.md lists
every event's producer and consumers.

`REPLIES`: the request/reply subjects it answers (operations, job queries, metrics), and how a
subject's tokens become a request's context.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from contracts import subjects
from contracts.commands import Rejected
from muster.routing import Route

from .app import Planner, RequestContext

log = structlog.get_logger("muster.planner")

ROUTES = (
    Route("planner-layouts", subjects.ALL_LAYOUT_EVENTS, {
        "LayoutSolved": "on_layout_answer",
        "LayoutUnsolvable": "on_layout_answer",
    }),
    Route("planner-tasks", subjects.ALL_TASK_EVENTS, {
        "TaskClaimed": "on_task_claimed",
        "TaskSucceeded": "on_task_outcome",
        "TaskFailed": "on_task_outcome",
    }, batch="on_task_events"),
)


# -- request/reply ----------------------------------------------------------------------------

Answer = Callable[[Planner, str, bytes], Awaitable[bytes | None]]


async def operation(planner: Planner, subject: str, data: bytes) -> bytes | None:
    """`muster.ops.<tenant>.<principal>.<verb>`: every request gets one answer. With auth on,
    the server lets only <principal> send on that subject (docs/decisions/0009), so it is the
    request's `by`."""
    try:
        tenant, principal, rest = subjects.parse_request(subject)
    except subjects.SubjectError as err:
        return Rejected(reason=str(err)).model_dump_json().encode()
    try:
        reply = await planner.handle(RequestContext(tenant=tenant, verb=rest[0] if len(rest) == 1 else "", body=data,
                                                    principal=principal))
    except Exception:  # a bug must not leave a requester without an answer
        log.exception("request failed", subject=subject)
        reply = Rejected(reason="internal error while handling the request; see the planner's log")
    return reply.model_dump_json().encode()


async def job_query(planner: Planner, subject: str, data: bytes) -> bytes | None:
    """`muster.q.<tenant>.<principal>.job.<id>`: answered only by the planner that has the job;
    the tracker falls back to the log when nobody answers."""
    parts = subject.split(".")
    view = planner.job_view(parts[2], parts[5]) if len(parts) == 6 else None
    return json.dumps(view).encode() if view is not None else None


async def metrics(planner: Planner, subject: str, data: bytes) -> bytes | None:
    queues = planner.metrics.snapshot(planner.timers.clock.now())
    return json.dumps({"planner": planner.config.instance, "queues": queues, "limits": planner.limits.snapshot()}).encode()


@dataclass(frozen=True)
class Reply:
    subject: str
    answer: Answer
    queue: str = ""
    """A queue group: one planner of the group answers each request."""


REPLIES = (
    Reply(subjects.PLANNER_METRICS, metrics),
    Reply(f"{subjects.OPS}.*.*.*", operation, queue="planners"),
    Reply(subjects.ALL_JOB_QUERIES, job_query),
)
