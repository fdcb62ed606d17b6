"""A small typed async client: send operations, follow a job through its events.

    async with await MusterClient.connect("nats://127.0.0.1:4222") as client:
        reply = await client.create_cluster("default", CreateCluster(name="c1", template="t", nodes=5))
        final = await client.wait(reply.job_id, tenant="default", timeout=300)

Waiting never polls: it reads the job's subject from the start with an ordered consumer and
returns on the final event, so it cannot miss an outcome that happened before it subscribed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from contracts import subjects
from contracts.commands import REPLY_ADAPTER, VERB_OF, Accepted, Command, Rejected
from contracts.events import JobFailed, JobSucceeded

from .bus.connect import connect
from .bus.eventstore import Recorded, recorded_from_msg

FINAL_EVENTS = (JobSucceeded, JobFailed)


class MusterClient:
    def __init__(self, nc: Client, owns_connection: bool = False) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self._owns = owns_connection

    @classmethod
    async def connect(cls, url: str | None = None) -> "MusterClient":
        return cls(await connect(url, name="muster-client"), owns_connection=True)

    async def __aenter__(self) -> "MusterClient":
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._owns:
            await self.nc.drain()

    async def send(self, tenant: str, command: Command, timeout: float = 10.0) -> Accepted | Rejected:
        verb = VERB_OF[command.type]  # type: ignore[attr-defined]
        reply = await self.nc.request(subjects.operation(tenant, verb), command.model_dump_json().encode(), timeout=timeout)
        return REPLY_ADAPTER.validate_json(reply.data)  # type: ignore[no-any-return]

    async def send_raw(self, tenant: str, verb: str, body: bytes, timeout: float = 10.0) -> Accepted | Rejected:
        reply = await self.nc.request(subjects.operation(tenant, verb), body, timeout=timeout)
        return REPLY_ADAPTER.validate_json(reply.data)  # type: ignore[no-any-return]

    async def events(self, job_id: str, tenant: str = "default") -> AsyncIterator[Recorded]:
        """The job's events (its own subject), from the first, until its final event."""
        queue: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_msg(msg: Msg) -> None:
            await queue.put(msg)

        sub = await self.js.subscribe(
            subjects.job_events(tenant, job_id), ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
            cb=on_msg, idle_heartbeat=2.0,
        )
        try:
            while True:
                recorded = recorded_from_msg(await queue.get())
                yield recorded
                if isinstance(recorded.event, FINAL_EVENTS):
                    return
        finally:
            await sub.unsubscribe()

    async def wait(self, job_id: str, tenant: str = "default", timeout: float = 600.0) -> Any:
        """The job's final event (JobSucceeded or JobFailed); TimeoutError past the deadline."""
        async with asyncio.timeout(timeout):
            async for recorded in self.events(job_id, tenant):
                if isinstance(recorded.event, FINAL_EVENTS):
                    return recorded.event
        raise RuntimeError("job events ended without a final event")
