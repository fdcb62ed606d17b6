"""The task queue port: where the planner puts task attempts for provisioners to take.

A queue de-duplicates by `task_msg_id`: publishing an attempt again (a restart, a repaired
lost publish) delivers it once. The JetStream adapter is `muster.bus.tasks.NatsTaskQueue`
(stream TASKS, one subject per tenant and provisioner class); the fake is
`muster.ports.memory.MemoryTaskQueue`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from contracts.tasks import TaskMessage


def task_msg_id(message: TaskMessage) -> str:
    """One id per attempt (a segment's: its first head's, however late a step it is sent again
    from, docs/decisions/0058): the queue's de-duplication key."""
    if message.segment is not None:
        return f"{message.job_id}.{message.segment}"
    return f"{message.job_id}.{message.task_id}.{message.attempt}"


class TaskQueue(Protocol):
    async def publish(self, message: TaskMessage) -> None:
        """Queue one attempt; raises if the queue did not take it (the caller retries)."""
        ...

    async def publish_many(self, messages: Sequence[TaskMessage], *,
                           traces: Sequence[str | None] | None = None) -> list[BaseException | None]:
        """Queue many attempts at once; for each, None if the queue took it, or the error (that
        one is published again by the caller). Never raises for one message's failure.
        `traces`: each message's trace context (a `traceparent`, `muster.tracing`), carried
        beside it (a header on the bus)."""
        ...
