"""A provisioner: workers, registration and presence, and drain on request.

    prov = Provisioner(nc, registry, WorkerConfig(provisioner_id="p1", tenants=("acme",)))
    await prov.start()     # queues, ProvisionerRegistered, presence record, drain subject, workers
    ...
    await prov.stop()      # SIGTERM: drain, then ProvisionerDeregistered and the record deleted

A drain request on `muster.q.provisioner.<id>.drain` (`request_drain`, or
`muster provisioners drain ID`) is answered at once; the provisioner then stops taking tasks,
finishes the ones in flight, deregisters (reason `drained`) and calls `on_drained` (the process
exits, so that it can be restarted with new plugins). docs/provisioner.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from pydantic import ValidationError

from contracts import subjects
from contracts.tasks import DrainProvisioner, HeldAttempts, ProvisionerInfo
from muster.bus.answers import answer_on_inbox, answerable
from muster.bus.connect import on_reconnect
from muster.bus.eventstore import EventStore
from muster.bus.wire import flush

from .presence import DEFAULT_TTL_S, Presence, Replaced
from .routing import REPLIES, drain_subject
from .stepreads import AskPlanner
from .worker import Executor, WorkerConfig, Workers

log = structlog.get_logger("muster.provisioner")


NO_RESPONDERS_RETRIES = 4


async def request_drain(nc: Client, provisioner_id: str, timeout: float = 5.0) -> dict[str, Any]:
    """Ask a provisioner to drain. Returns its answer (`draining`, `in_flight`, `already`);
    LookupError if no provisioner with that id is listening."""
    # Interest in a subject reaches the other servers of a cluster a moment after a
    # provisioner subscribes, so "no responders" right after its start is retried briefly.
    for attempt in range(NO_RESPONDERS_RETRIES + 1):
        try:
            body = DrainProvisioner(provisioner=provisioner_id).model_dump_json().encode()
            reply = await nc.request(drain_subject(provisioner_id), body, timeout=timeout)
            break
        except NoRespondersError:
            if attempt == NO_RESPONDERS_RETRIES:
                raise LookupError(f"no live provisioner {provisioner_id!r} answers on {drain_subject(provisioner_id)}") from None
            await asyncio.sleep(0.05 * 2**attempt)  # a bounded retry of a request, not a poll
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


class Plugins(Executor, Protocol):
    def describe(self) -> list[dict[str, Any]]: ...


class Provisioner:
    def __init__(
        self,
        nc: Client,
        plugins: Plugins,
        config: WorkerConfig,
        *,
        presence_ttl_s: int = DEFAULT_TTL_S,
        replicas: int = 1,
        host: str | None = None,
        on_drained: Callable[[], None] | None = None,
        grants: Callable[[], Awaitable[tuple[str, ...] | None]] | None = None,
        on_replaced: Callable[[ProvisionerInfo], None] | None = None,
    ) -> None:
        """`on_replaced(other)`: another process took this id over (the process exits: docs/provisioner.md)."""
        self.nc = nc
        self.config = config
        self.on_drained = on_drained
        self.grants = grants
        """The tenants whose queues this provisioner is granted now, asked again after every
        reconnect (the auth service closes its connection when a queue grant changes)."""
        self.info = ProvisionerInfo(
            id=subjects.token(config.provisioner_id, "provisioner id"),
            session=uuid.uuid4().hex[:12],
            host=host or socket.gethostname(),
            pid=os.getpid(),
            capacity=config.capacity,
            provisioner_class=config.provisioner_class,
            tenants=list(config.tenants),
            plugins=plugins.describe(),
            started_at=datetime.now(UTC),
        )
        log = EventStore(nc)  # claims and outcomes in group commits (its default), registrations
        # A segment that came again asks the planner what its steps' outcomes are: its rights
        # name no other provisioner's task events (docs/decisions/0058, item 5).
        self.workers = Workers(nc.jetstream(), log, plugins, config, steps=AskPlanner(nc, config.provisioner_id))
        self.presence = Presence(nc, log, self.info, self._state, ttl_s=presence_ttl_s, replicas=replicas)
        self.presence.on_replaced = on_replaced
        self.workers.keep(self.presence.lease)
        self.finished = asyncio.Event()
        """Set when drained and deregistered."""
        self._runner: asyncio.Task[None] | None = None
        self._control: list[Subscription] = []
        self._drain: asyncio.Task[None] | None = None

    @property
    def id(self) -> str:
        return self.info.id

    def _state(self) -> tuple[int, int, bool]:
        return self.workers.in_flight, self.workers.completed, self.workers.draining.is_set()

    async def start(self) -> None:
        await self.workers.ensure_queues()
        await self.presence.register()
        self._control = [await self.nc.subscribe(r.subject(self.id), cb=getattr(self, r.handler)) for r in REPLIES]
        await flush(self.nc)  # the drain subject answers once start() returns
        self._runner = asyncio.create_task(self.workers.run(), name=f"workers-{self.id}")
        if self.grants is not None:
            on_reconnect(self.nc, self._regrant)

    async def _regrant(self) -> None:
        """Serve the queues granted now: a new tenant's at once, one revoked no more."""
        assert self.grants is not None
        try:
            granted = await self.grants()
            if granted is None or set(granted) == set(self.info.tenants) or self._drain is not None:
                return
            log.info("granted queues changed", provisioner=self.id, tenants=list(granted), were=self.info.tenants)
            self.info = self.info.model_copy(update={"tenants": list(granted)})
            await self.workers.serve(tuple(granted))
            await self.presence.serve(self.info)
        except Exception as err:  # noqa: BLE001 - the next reconnect asks again
            log.warning("granted queues not taken up", provisioner=self.id, error=str(err) or type(err).__name__)

    async def drain(self) -> None:
        """Stop taking tasks, finish those in flight, deregister (reason `drained`)."""
        await self._begin("drained")

    async def stop(self) -> None:
        """The same, on SIGTERM (reason `stopped`; `on_drained` is not called)."""
        await self._begin("stopped")

    async def abort(self) -> None:
        """Die without a word (tests): tasks abandoned, the presence record left to expire."""
        await self.presence.halt()
        await self._unsubscribe()
        await self.workers.abort()
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)

    def _begin(self, reason: Literal["drained", "stopped"]) -> asyncio.Task[None]:
        if self._drain is None:
            self._drain = asyncio.create_task(self._drain_and_leave(reason), name=f"drain-{self.id}")
        return self._drain

    async def on_drain_request(self, msg: Msg) -> None:
        try:
            request = DrainProvisioner.model_validate_json(msg.data)
            if request.provisioner != self.id:
                raise ValueError(f"the request names provisioner {request.provisioner!r}, this is {self.id!r}")
        except (ValidationError, ValueError) as err:
            log.warning("drain request refused", provisioner=self.id, error=str(err)[:300])
            await answer_on_inbox(msg, json.dumps({"provisioner": self.id, "draining": self._drain is not None,
                                          "error": f"not a drain request: {str(err)[:300]}"}).encode())
            return
        already = self._drain is not None
        self._begin("drained")
        log.info("drain requested", provisioner=self.id, in_flight=self.workers.in_flight, already=already)
        said = {"provisioner": self.id, "draining": True, "already": already, "in_flight": self.workers.in_flight}
        await answer_on_inbox(msg, json.dumps(said).encode())

    async def on_held_request(self, msg: Msg) -> None:
        """What this provisioner holds now (a planner asks after the task queue was lost, and
        sends again only what nobody holds): from now on each of these is ours to finish, as the
        queue has them no more (`Workers.promise`, docs/decisions/0013)."""
        if answerable(msg.reply):
            held = HeldAttempts(provisioner=self.id, attempts=sorted(self.workers.promise()))
            await answer_on_inbox(msg, held.model_dump_json().encode())

    async def _drain_and_leave(self, reason: Literal["drained", "stopped"]) -> None:
        self.workers.stop_taking()
        try:
            await self.presence.refresh()  # readers see `draining` at once
        except Replaced:
            pass  # (the record is another process's: said when found)
        except Exception as err:  # noqa: BLE001 - the record expires anyway
            log.warning("presence refresh failed", error=str(err) or type(err).__name__)
        await self.workers.drain()
        if self._runner is not None:
            await self._runner
        await self._unsubscribe()
        try:
            await self.presence.deregister(reason, self.workers.completed)
        except Exception as err:  # noqa: BLE001 - without the bus the record expires on its own
            log.warning("deregistration failed; the presence record will expire", error=str(err) or type(err).__name__)
            await self.presence.halt()
        self.finished.set()
        if reason == "drained" and self.on_drained is not None:
            self.on_drained()

    async def _unsubscribe(self) -> None:
        control, self._control = self._control, []
        for sub in control:
            try:
                await sub.unsubscribe()
            except Exception as err:  # noqa: BLE001 - gone with the connection
                log.debug("unsubscribe failed", error=str(err) or type(err).__name__)
