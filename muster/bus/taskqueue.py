"""The task queue port on JetStream: stream TASKS, one subject per tenant and provisioner class
(`muster.task.<tenant>.<class>`); `Nats-Msg-Id` makes a repeated publish of an attempt harmless."""

from __future__ import annotations

from nats.js import JetStreamContext

from contracts import subjects
from contracts.tasks import TaskMessage

from ..ports.taskqueue import task_msg_id


class NatsTaskQueue:
    def __init__(self, js: JetStreamContext) -> None:
        self.js = js

    async def publish(self, message: TaskMessage) -> None:
        await self.js.publish(
            subjects.task_queue(message.tenant, message.provisioner_class),
            message.model_dump_json().encode(),
            headers={"Nats-Msg-Id": task_msg_id(message)},
        )
