"""The planner's answers on its request/reply subjects (`routing.REPLIES`), and how a message
on one is answered: each answer takes the subject and the body and returns the reply's body
(None: no reply), and a requester always hears back, whatever goes wrong inside."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from contracts import subjects
from contracts.catalog_requests import CATALOG_VERBS
from contracts.commands import Rejected
from muster import tracing
from muster.bus.answers import answer_on_inbox
from services.auth.domain.state import IdentityState

from .app import Planner
from .messages import RequestContext
from .stepreads import StepReads

log = structlog.get_logger("muster.planner")

Answer = Callable[[str, bytes], Awaitable[bytes | None]]
IN_FLIGHT = 256
"""Requests answered at once by one planner; more wait in the subscription's queue."""


class CatalogAnswers(Protocol):
    async def answer(self, tenant: str, principal: str, verb: str, data: bytes) -> bytes: ...


class ShardAnswers(Protocol):
    async def operation(self, tenant: str, principal: str, verb: str, data: bytes) -> bytes: ...

    async def forwarded(self, subject: str, data: bytes) -> bytes | None: ...


class Replies:
    """`catalog`: catalog changes are answered here (any planner: the catalog is not sharded),
    one at a time; `sharding`: a cluster's operations are answered by the planner holding its
    shard (None: this planner answers every one); `identities`: who may know a segment's steps
    (None: a bus without authorization)."""

    def __init__(self, planner: Planner, catalog: CatalogAnswers | None = None, sharding: ShardAnswers | None = None,
                 identities: IdentityState | None = None) -> None:
        self.planner, self.catalog, self.sharding = planner, catalog, sharding
        self.steps = StepReads(planner, identities)
        self.identities = identities
        self._catalog_writes = asyncio.Lock()

    async def operation(self, subject: str, data: bytes) -> bytes | None:
        """`muster.ops.<tenant>.<principal>.<verb>`: every request gets one answer. With auth on,
        the server lets only <principal> send on that subject (docs/decisions/0009), so it is the
        request's `by`."""
        try:
            tenant, principal, rest = subjects.parse_request(subject)
        except subjects.SubjectError as err:
            return Rejected(reason=str(err)).model_dump_json().encode()
        verb = rest[0] if len(rest) == 1 else ""
        if self.catalog is not None and rest and rest[-1] in CATALOG_VERBS:
            async with self._catalog_writes:
                return await self.catalog.answer(tenant, principal, rest[-1], data)
        if self.sharding is not None:
            return await self.sharding.operation(tenant, principal, verb, data)
        reply = await self.planner.answer(RequestContext(tenant=tenant, verb=verb, body=data, principal=principal))
        return reply.model_dump_json().encode()

    async def forwarded(self, subject: str, data: bytes) -> bytes | None:
        """`muster.shard.<n>.ops.<tenant>.<principal>.<verb>`: a request another planner sent on
        to the holder of its cluster's shard (only planners may send there)."""
        return await self.sharding.forwarded(subject, data) if self.sharding is not None else None

    async def job_query(self, subject: str, data: bytes) -> bytes | None:
        """`muster.q.<tenant>.<principal>.job.<id>`: answered only by the planner that has the
        job; the tracker falls back to the log when nobody answers. The view is the job whole (its
        cost's prices too): the tracker's, which answers people with what their grants show."""
        parts = subject.split(".")
        refused = self._not_the_tracker(parts[3]) if len(parts) == 6 else ""
        if refused:  # (every planner says it: none answers a job's view to it)
            return json.dumps({"refused": refused}).encode()
        view = await self.planner.job_answer(parts[2], parts[5]) if len(parts) == 6 else None
        return json.dumps(view).encode() if view is not None else None

    def _not_the_tracker(self, principal: str) -> str:
        """Auth on: a tenant's user may send on its own `muster.q.<tenant>.<principal>.>` (its
        requests' subjects), and was answered any job of its tenant whole, with every price in its
        cost, whatever its grants (session 34); it reads jobs through the tracker."""
        if self.identities is None:
            return ""
        who = self.identities.principals.get(principal)
        if who is not None and not who.disabled and (who.role == "super_admin" or who.service in ("tracker", "system")):
            return ""
        return (f"{principal} may not ask a planner for a job's view: a job is read through the tracker "
                "(`muster status JOB`, GET /v1/jobs/{id}), which shows what its reader's grants show")

    async def step_outcomes(self, subject: str, data: bytes) -> bytes | None:
        """`muster.q.<tenant>.<provisioner>.steps`: a segment's steps' outcomes, for the provisioner
        it came to again (`stepreads.StepReads`); answered only by the planner acting for the job."""
        parts = subject.split(".")
        answer = await self.steps.answer(parts[2], parts[3], data) if len(parts) == 5 else None
        return answer.model_dump_json().encode() if answer is not None else None

    async def metrics(self, subject: str, data: bytes) -> bytes | None:
        planner = self.planner
        queues = planner.metrics.snapshot(planner.timers.clock.now())
        return json.dumps({"planner": planner.config.instance, "queues": queues, "limits": planner.limits.snapshot()}).encode()


class Responders:
    """Messages to answers: a subscription's callback for each. Concurrent ones answer each
    message in a task of its own, so that one request waiting (for a shard's owner) holds up
    no other (nats-py runs a subscription's callbacks one at a time); at most `IN_FLIGHT` at
    once, then the subscription's queue waits."""

    def __init__(self, in_flight: int = IN_FLIGHT) -> None:
        self._in_flight = asyncio.Semaphore(in_flight)
        self._answering: set[asyncio.Task[None]] = set()

    def responder(self, answer: Answer, concurrent: bool = False) -> Callable[[Any], Awaitable[None]]:
        async def respond(msg: Any) -> None:
            with tracing.within((msg.headers or {}).get(tracing.HEADER)):  # the requester's trace, if it sent one
                reply = await answer(msg.subject, msg.data)
            if reply is not None:
                await answer_on_inbox(msg, reply)

        async def run(msg: Any) -> None:
            try:
                await respond(msg)
            except Exception as err:  # noqa: BLE001 - the connection closed under it; the client sends again
                log.warning("request not answered", subject=msg.subject, error=str(err) or type(err).__name__)
            finally:
                self._in_flight.release()

        async def concurrently(msg: Any) -> None:
            await self._in_flight.acquire()
            task = asyncio.create_task(run(msg))
            self._answering.add(task)  # a reference until it ran
            task.add_done_callback(self._answering.discard)

        return concurrently if concurrent else respond

    async def close(self) -> None:
        """Stop answering: requests still in hand are dropped (their clients send them again)."""
        for task in list(self._answering):
            task.cancel()
        await asyncio.gather(*self._answering, return_exceptions=True)
