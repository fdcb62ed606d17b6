"""Composition root of the notifier (`muster notifier`): subscriptions followed live, the log's
job and lease events from durable consumers, deliveries on timers, and the requests it answers
(`muster notify test`, the check before a subscription is stored: requests.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import click
import structlog
from nats.aio.client import Client
from nats.errors import ConnectionClosedError
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from contracts import subjects
from contracts.governance import Subscription
from muster.allowfile import ALLOW_FILE_ENV, ALLOW_FILE_OPTION
from muster.bus.connect import auth_required
from muster.bus.consume import consume_routes
from muster.bus.eventstore import EventStore
from muster.bus.scopedlog import ScopedEventStore
from muster.cli_support import CliError, FilePath
from muster.destinations import ALLOW_ENV, ALLOW_OPTION, DOC, Allowed, AllowError
from muster.ports.clock import AsyncioClock
from muster.runtime.service import SERVICE_URL_HELP, main_for
from services.auth.domain.authz import may_govern
from services.auth.domain.state import IdentityState
from services.auth.view import IdentityView
from services.governance.mirror import GovernanceMirror
from services.governance.store import read_entries

from .adapters.delivery import Deliveries
from .app import Notifier
from .domain.secrets import NotifierSecrets, SecretsFileError
from .requests import VERBS, NotifierRequests
from .routing import QUEUE, ROUTES
from .settings import Settings, reload

log = structlog.get_logger("muster.notifier")


def named_secrets(path: str | None) -> NotifierSecrets:
    """The named secrets of a secrets file (docs/secrets.md, the provisioners' format): the shared
    `@secrets` and each tenant's own under `@tenants`."""
    try:
        return Settings(secrets_file=path).secrets()
    except SecretsFileError as err:  # bad input (exit 2), as the provisioner says it of the same file
        raise CliError(str(err)) from None


def allowed_destinations(entries: Iterable[str], allow_file: str | None = None) -> Allowed:
    try:
        return Settings(allow=tuple(entries), allow_file=allow_file).allowed()
    except AllowError as err:
        raise click.BadParameter(str(err)) from None


def subscriptions_of(mirror: GovernanceMirror) -> Any:
    def current(tenant: str) -> list[Subscription]:
        out = []
        for entry in mirror.entries(tenant, "subscription"):
            with contextlib.suppress(ValidationError):  # written by an older contract: skipped, not fatal
                out.append(Subscription.model_validate(entry.entity))
        return out

    return current


def authors_of(mirror: GovernanceMirror, identity: IdentityState | None) -> Any:
    """Why a subscription's author (who last wrote it) may no longer have it sent: disabled, or
    without `read` on the tenant (what making it needs) since. A subscription of a user who left
    went on sending the tenant's events to the webhook it chose. None on a bus without identities,
    and for an author no principal is (written there, by "anonymous", a name no principal may take,
    or by a harness): principals are disabled, never removed."""
    def refusal(tenant: str, name: str) -> str | None:
        entry = next((e for e in mirror.entries(tenant, "subscription") if e.name == name), None)
        author = identity.principals.get(entry.by) if identity is not None and entry is not None else None
        if identity is None or entry is None or author is None:
            return None
        decision = may_govern(author, identity.grants_of(entry.by), tenant, "subscription")
        return None if decision else f"its author {entry.by} may no longer read tenant {tenant} ({decision.reason})"

    return refusal


async def start_notifier(nc: Client, stack: AsyncExitStack, secrets: Mapping[str, Any] | NotifierSecrets,
                         ack_wait: float = 30.0, allowed: Allowed | None = None, settings: Settings | None = None) -> Notifier:
    """`secrets`: a plain mapping is every tenant's (`@secrets`); `allowed`: where webhooks may go
    besides public addresses (none: the safe default); `settings`: where both came from, read
    again on SIGHUP (None: not)."""
    # Scoped reads (decision 0057): jobs, clusters, catalogs, subscriptions by consumers and subject
    # direct gets, each confirmed with a replicated log's leader by a probe on its notifications'
    # subjects, where it publishes (session 25); a job's end and a lease's change read until
    # their delivered sequence.
    store = ScopedEventStore(nc, confirm=(subjects.ALL_NOTIFICATION_EVENTS,), deletes=False)
    mirror = GovernanceMirror(nc.jetstream(), subjects.ALL_SUBSCRIPTION_EVENTS)
    await mirror.start()
    stack.push_async_callback(mirror.stop)
    await mirror.wait_ready()
    clock = AsyncioClock()
    deliveries = Deliveries(nc, secrets, clock, allowed=allowed)
    stack.push_async_callback(deliveries.close)
    identity = None
    if auth_required(nc):
        view = await IdentityView(nc).start()
        stack.push_async_callback(view.stop)
        identity = view.state
    notifier = Notifier(store, deliveries, clock, subscriptions_of(mirror), authors_of(mirror, identity))
    stack.callback(notifier.close)
    await notifier.resume()

    async def put(tenant: str, kind: str, name: str, entry: Any) -> None:
        if kind == "subscription" and entry is not None:  # (watched once the mirror caught up: puts from now on)
            await notifier.leases_before(tenant, Subscription.model_validate(entry.entity))

    mirror.watch(put)

    async def from_log(tenant: str, name: str | None) -> Subscription | None:
        return await _from_log(store, tenant, name)

    requests = NotifierRequests(notifier, deliveries, from_log, lambda: identity)
    for verb in VERBS:
        sub = await nc.subscribe(f"{subjects.GOV}.*.*.{verb}", queue=QUEUE, cb=requests.on_request)
        stack.push_async_callback(_unsubscribe, sub)
    for consumer in await consume_routes(nc.jetstream(), notifier, ROUTES, ack_wait=ack_wait, deliver_policy=DeliverPolicy.NEW):
        stack.push_async_callback(_unsubscribe, consumer)
    if settings is not None:  # (set before it says it started: a SIGHUP before that ends it)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, reload, settings, deliveries)
        stack.callback(loop.remove_signal_handler, signal.SIGHUP)
    log.info("webhooks", allowed_besides_public=str(deliveries.allowed))
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
              help="JSON file whose `@secrets` (every tenant's) and `@tenants` (each tenant's own) hold the webhooks' "
                   "signing secrets and secret URLs; the provisioners' format, one file may serve both (docs/secrets.md)")
@click.option(ALLOW_OPTION, "allow", envvar=ALLOW_ENV, multiple=True, metavar="[TENANT=]HOST|CIDR[:PORT]",
              help="a webhook may go to this host name (*.corp.example: the names under it) or address range besides "
                   "public addresses, on every port or on :PORT only ([fd00::1]:8080); TENANT=: that tenant's webhooks only "
                   f"(acme=hooks.acme.internal:443); repeat, or separate with commas (${ALLOW_ENV}; {DOC})")
@click.option(ALLOW_FILE_OPTION, "allow_file", envvar=ALLOW_FILE_ENV, default=None, type=FilePath(), metavar="FILE",
              help=f"more {ALLOW_OPTION} entries, one or more a line (# comments); read again, with the secrets file, on "
                   f"SIGHUP (`muster reload`) (${ALLOW_FILE_ENV})")
def main(nats_url: str | None, secrets_file: str | None, allow: tuple[str, ...], allow_file: str | None) -> None:
    """Run the notifier: webhooks and bus messages for subscribers. SIGHUP reads its secrets file
    and its allow file again."""
    secrets = named_secrets(secrets_file)
    allowed = allowed_destinations(allow, allow_file)
    settings = Settings(secrets_file, allow, allow_file)
    name = f"notifier-{socket.gethostname()}-{os.getpid()}"

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_notifier(nc, stack, secrets, allowed=allowed, settings=settings)

    structlog.contextvars.bind_contextvars(instance=name)
    main_for("notifier", nats_url, setup)
