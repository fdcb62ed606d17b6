"""Composition root of the governance service (`muster governance`): the governance requests on
the bus, and the scheduler on the schedules' mirror (docs/governance.md)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from contextlib import AsyncExitStack
from typing import Any

import click
import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError

from contracts import subjects
from contracts.commands import REPLY_ADAPTER, Accepted, LeaseExtended, Rejected
from contracts.governance import GOV_VERBS, GovernanceAnswer
from muster import tracing
from muster.bus.answers import answer_on_inbox
from muster.bus.connect import auth_required
from muster.bus.scopedlog import ScopedEventStore
from muster.ports.clock import AsyncioClock
from muster.runtime.service import SERVICE_URL_HELP, main_for
from muster.times import shown_time
from services.auth.view import IdentityView

from .mirror import GovernanceMirror
from .scheduler import Answer, Scheduler
from .writes import GovernanceWrites

log = structlog.get_logger("muster.governance")
tracer = tracing.Tracer("muster.governance")
QUEUE = "governance"
SEND_TIMEOUT_S = 30.0
VERBS = tuple(v for v in GOV_VERBS if not v.startswith("notify-"))
"""The governance verbs this service answers, each subscribed on its own subject: the notifier's
(`notify-test`, `notify-check`, which this service asks before it stores a webhook) are not taken
here, so with no notifier running nats-server answers "no responders" at once (a wildcard over
every verb left them unanswered: the requester waited its timeout, session 36)."""
CHECK_TIMEOUT_S = 10.0


class NatsSender:
    """A tick's request, sent on the bus as its owner (`muster.ops.<tenant>.<owner>.<verb>`)."""

    def __init__(self, nc: Client, timeout: float = SEND_TIMEOUT_S) -> None:
        self.nc, self.timeout = nc, timeout

    async def __call__(self, tenant: str, principal: str, verb: str, body: dict[str, Any]) -> Answer:
        # A span of the tick's request (its traceparent in the request): the job it makes is in
        # the trace the scheduler started, as one a `muster` command starts (docs/tracing.md).
        with tracer.span(f"schedule {verb}", kind="client", tenant=tenant, verb=verb, request_id=body.get("request_id"),
                         owner=principal) as span:
            answer = await self._send(tenant, principal, verb, body)
            tracing.set_attributes(span, job=answer.job_id, answer="again" if answer.again else "refused" if answer.rejected else "done")
            if answer.rejected:
                tracing.set_error(span, answer.rejected)
            return answer

    async def _send(self, tenant: str, principal: str, verb: str, body: dict[str, Any]) -> Answer:
        try:
            msg = await self.nc.request(subjects.operation(tenant, principal, verb), json.dumps(body).encode(), timeout=self.timeout,
                                        headers=tracing.headers())
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as err:
            return Answer(None, f"no planner answered ({type(err).__name__})", again=True)
        reply = REPLY_ADAPTER.validate_json(msg.data)
        if isinstance(reply, Accepted):
            return Answer(reply.job_id)
        if isinstance(reply, Rejected):
            return Answer(None, reply.reason, again=reply.retry)
        if isinstance(reply, LeaseExtended):  # done at once, no job
            return Answer(None, done=f"lease extended: expires at {shown_time(reply.expires_at)}")
        return Answer(None, f"unexpected answer {reply.type}")


class NatsVet:
    """The notifier's check of webhook subscriptions, asked in the requester's name."""

    def __init__(self, nc: Client, timeout: float = CHECK_TIMEOUT_S) -> None:
        self.nc, self.timeout = nc, timeout

    async def __call__(self, tenant: str, principal: str, entities: list[dict[str, Any]]) -> GovernanceAnswer | str:
        body = json.dumps({"kind": "subscription", "entities": entities}).encode()
        try:
            msg = await self.nc.request(subjects.governance_request(tenant, principal, "notify-check"), body, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            return "no notifier is running"
        except nats.errors.TimeoutError:
            return f"no notifier answered within {self.timeout:g} s"
        return GovernanceAnswer.model_validate_json(msg.data)


async def start_governance(nc: Client, stack: AsyncExitStack, instance: str) -> tuple[GovernanceWrites, Scheduler]:
    # Its reads name their filter in the request's subject, where its rights scope them (its
    # entities', the clusters'); each confirmed with a replicated log's leader by a probe on its
    # entities' subjects, where it may publish (a cluster's too: decision 0057, session 25).
    store = ScopedEventStore(nc, confirm=(subjects.ALL_GOVERNANCE_EVENTS,), deletes=False)
    writes = GovernanceWrites(store, vet=NatsVet(nc))
    if auth_required(nc):
        view = await IdentityView(nc).start()
        stack.push_async_callback(view.stop)
        writes.identity = view.state

    async def on_request(msg: Msg) -> None:
        try:
            tenant, principal, rest = subjects.parse_request(msg.subject.replace(subjects.GOV, "muster.ops", 1))
            reply = await writes.answer(tenant, principal, rest[-1], msg.data)
        except subjects.SubjectError as err:
            reply = GovernanceAnswer(ok=False, reason=str(err))
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("governance request failed", subject=msg.subject)
            reply = GovernanceAnswer(ok=False, reason="internal error while handling the request; see the governance service's log")
        await answer_on_inbox(msg, reply.model_dump_json().encode())

    for verb in VERBS:
        sub = await nc.subscribe(f"{subjects.GOV}.*.*.{verb}", queue=QUEUE, cb=on_request)
        stack.push_async_callback(_unsubscribe, sub)

    scheduler = Scheduler(store, NatsSender(nc), AsyncioClock(), instance)
    stack.callback(scheduler.close)
    mirror = GovernanceMirror(nc.jetstream(), subjects.ALL_SCHEDULE_EVENTS)
    await mirror.start()
    stack.push_async_callback(mirror.stop)
    await mirror.wait_ready()
    scheduler.start(mirror.tenants)  # no await between: no event can slip between the two
    mirror.watch(scheduler.on_change)
    return writes, scheduler


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(ConnectionClosedError):
        await sub.unsubscribe()


@click.command("governance")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--instance", default=None, help="this service's name (default: governance-<host>-<pid>)")
def main(nats_url: str | None, instance: str | None) -> None:
    """Run the governance service: approval rules, policies, subscriptions and schedules; fires schedules."""
    name = instance or f"governance-{socket.gethostname()}-{os.getpid()}"

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_governance(nc, stack, name)

    main_for("governance", nats_url, setup)
