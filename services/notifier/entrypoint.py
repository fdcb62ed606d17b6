"""Composition root of the notifier (`muster notifier`): subscriptions followed live, the log's
job and lease events from durable consumers, deliveries on timers, and `muster notify test`."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import click
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from contracts import subjects
from contracts.governance import GovernanceAnswer, GovernanceRequest, Subscription
from contracts.secrets import NAMED
from muster.bus.connect import auth_required
from muster.bus.consume import consume_routes
from muster.bus.eventstore import EventStore
from muster.ports.clock import AsyncioClock
from muster.runtime.service import SERVICE_URL_HELP, main_for
from muster.secretsfile import load_secrets
from services.auth.domain.authz import may_govern
from services.auth.view import IdentityView
from services.governance.mirror import GovernanceMirror
from services.governance.store import read_entries

from .adapters.delivery import Deliveries
from .app import Notifier
from .routing import QUEUE, ROUTES

log = structlog.get_logger("muster.notifier")
TEST_VERB = "notify-test"


def named_secrets(path: str | None) -> dict[str, Any]:
    """The `@secrets` of a secrets file (docs/secrets.md): name -> value."""
    named = load_secrets(path).get(NAMED, {})
    if not isinstance(named, dict):
        raise click.ClickException(f"secrets file {path} must hold an {NAMED!r} object of name -> secret")
    return named


def subscriptions_of(mirror: GovernanceMirror) -> Any:
    def current(tenant: str) -> list[Subscription]:
        out = []
        for entry in mirror.entries(tenant, "subscription"):
            with contextlib.suppress(ValidationError):  # written by an older contract: skipped, not fatal
                out.append(Subscription.model_validate(entry.entity))
        return out

    return current


async def start_notifier(nc: Client, stack: AsyncExitStack, secrets: Mapping[str, Any], ack_wait: float = 30.0) -> Notifier:
    store = EventStore(nc)
    mirror = GovernanceMirror(nc.jetstream(), subjects.ALL_SUBSCRIPTION_EVENTS)
    await mirror.start()
    stack.push_async_callback(mirror.stop)
    await mirror.wait_ready()
    clock = AsyncioClock()
    deliveries = Deliveries(nc, secrets, clock)
    stack.push_async_callback(deliveries.close)
    notifier = Notifier(store, deliveries, clock, subscriptions_of(mirror))
    stack.callback(notifier.close)
    await notifier.resume()
    identity = None
    if auth_required(nc):
        view = await IdentityView(nc).start()
        stack.push_async_callback(view.stop)
        identity = view.state

    async def on_test(msg: Msg) -> None:
        try:
            tenant, principal, _ = subjects.parse_request(msg.subject.replace(subjects.GOV, "muster.ops", 1))
            request = GovernanceRequest.model_validate_json(msg.data)
            allowed = may_govern(identity.principals.get(principal), identity.grants_of(principal), tenant, "subscription") \
                if identity is not None else True
            sub = next((s for s in notifier.subscriptions(tenant) if s.name == request.name), None) or \
                await _from_log(store, tenant, request.name)
            if not allowed:
                reply = GovernanceAnswer(ok=False, reason=getattr(allowed, "reason", "not allowed"), code="forbidden")
            elif sub is None:
                reply = GovernanceAnswer(ok=False, reason=f"no subscription {request.name!r} in tenant {tenant!r}", code="not_found")
            else:
                outcome = await notifier.queue_test(tenant, sub, f"{sub.name}-test-{uuid.uuid4().hex[:12]}")
                reply = GovernanceAnswer(ok=outcome.ok, reason=outcome.error, items=[outcome.model_dump(mode="json")],
                                         code=None if outcome.ok else "unavailable")
        except (subjects.SubjectError, ValidationError) as err:
            reply = GovernanceAnswer(ok=False, reason=str(err)[:500])
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("notification test failed", subject=msg.subject)
            reply = GovernanceAnswer(ok=False, reason="internal error while testing; see the notifier's log")
        if msg.reply:
            await msg.respond(reply.model_dump_json().encode())

    sub = await nc.subscribe(f"{subjects.GOV}.*.*.{TEST_VERB}", queue=QUEUE, cb=on_test)
    stack.push_async_callback(_unsubscribe, sub)
    for consumer in await consume_routes(nc.jetstream(), notifier, ROUTES, ack_wait=ack_wait, deliver_policy=DeliverPolicy.NEW):
        stack.push_async_callback(_unsubscribe, consumer)
    return notifier


async def _from_log(store: EventStore, tenant: str, name: str | None) -> Subscription | None:
    """A subscription just made, which the mirror has not folded yet (`notify add`, then `test`)."""
    entries, _ = await read_entries(store, tenant, "subscription")
    entry = entries.get(("subscription", name or ""))
    return Subscription.model_validate(entry.entity) if entry is not None else None


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(ConnectionClosedError):
        await sub.unsubscribe()


@click.command("notifier")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--secrets", "secrets_file", envvar="MUSTER_NOTIFIER_SECRETS", default=None,
              help="JSON file whose `@secrets` hold the webhooks' signing secrets (docs/secrets.md)")
def main(nats_url: str | None, secrets_file: str | None) -> None:
    """Run the notifier: webhooks and bus messages for subscribers."""
    secrets = named_secrets(secrets_file)
    name = f"notifier-{socket.gethostname()}-{os.getpid()}"

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_notifier(nc, stack, secrets)

    structlog.contextvars.bind_contextvars(instance=name)
    main_for("notifier", nats_url, setup)
