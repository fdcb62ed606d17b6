"""Composition root of the pool service (`muster pool serve`)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from contextlib import AsyncExitStack
from typing import Any

import click
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError

from contracts import subjects
from contracts.commands import Rejected
from muster.allowfile import ALLOW_FILE_ENV, ALLOW_FILE_HELP, ALLOW_FILE_OPTION, AllowSettings, on_sighup, reload_allowed
from muster.bus.answers import answer_on_inbox, answerable
from muster.bus.consume import consume_routes, transient
from muster.bus.scopedlog import ScopedEventStore
from muster.cli_support import FilePath, WholeNumber
from muster.destinations import ALLOW_ENV, ALLOW_OPTION, POOL, Allowed, AllowError
from muster.runtime.service import SERVICE_URL_HELP, main_for

from .adapters.callbacks import CallbackSender
from .app import PoolService
from .routing import REPLIES, ROUTES

log = structlog.get_logger("muster.pool")


async def start_pool_service(nc: Client, stack: AsyncExitStack, instance: str, ack_wait: float = 30.0,
                             callback_attempts: int = 5, callback_backoff_s: float = 0.5,
                             allowed: Allowed | None = None, settings: AllowSettings | None = None) -> PoolService:
    """`allowed`: where an HTTP callback may go besides public addresses (decision 38);
    `settings`: where it came from, read again on SIGHUP (None: not)."""
    sender = CallbackSender(nc, attempts=callback_attempts, backoff_s=callback_backoff_s, allowed=allowed or Allowed())
    service = PoolService(nc=nc, store=ScopedEventStore(nc), instance=instance, sender=sender)
    stack.push_async_callback(service.close)
    await service.resume()
    log.info("callbacks", allowed_besides_public=str(sender.allowed))

    async def on_command(msg: Msg) -> None:
        try:
            principal, pool, verb = subjects.parse_pool_command(msg.subject)
            reply: Any = await service.handle_command(pool, verb, msg.data, principal)
        except subjects.SubjectError as err:
            reply = Rejected(reason=str(err))
        except Exception as err:  # noqa: BLE001 - a bug must not leave a requester without an answer
            reply = _failed(msg.subject, err)
        await answer_on_inbox(msg, reply.model_dump_json().encode())

    async def on_list(msg: Msg) -> None:
        if answerable(msg.reply):
            await answer_on_inbox(msg, json.dumps(await service.list_pools()).encode())

    answers = {"on_command": on_command, "on_list": on_list}
    subs: list[Any] = [await nc.subscribe(r.subject, queue=r.queue, cb=answers[r.handler]) for r in REPLIES]
    subs += await consume_routes(nc.jetstream(), service, ROUTES, ack_wait=ack_wait)
    for sub in subs:
        stack.push_async_callback(_unsubscribe, sub)
    if settings is not None:
        on_sighup(stack, lambda: reload_allowed(settings, sender.reconfigure, "pool"))
    return service


async def _unsubscribe(sub: Any) -> None:
    with contextlib.suppress(ConnectionClosedError):
        await sub.unsubscribe()


@click.command("serve")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--instance", default=None, help="this pool service's name (default: pool-<host>-<pid>)")
@click.option("--callback-attempts", default=5, show_default=True, type=WholeNumber(1, 100),
              help="tries of an HTTP callback before giving up (recorded either way)")
@click.option(ALLOW_OPTION, "allow", envvar=ALLOW_ENV, multiple=True, metavar="[TENANT=]HOST|CIDR[:PORT]",
              help="an HTTP callback may go to this host name (*.corp.example: the names under it) or address range "
                   "besides public addresses, on every port or on :PORT only ([fd00::1]:8080); TENANT=: that tenant's "
                   f"callbacks only (acme=hooks.acme.internal:443); repeat, or separate with commas (${ALLOW_ENV}; {POOL.doc})")
@click.option(ALLOW_FILE_OPTION, "allow_file", envvar=ALLOW_FILE_ENV, default=None, type=FilePath(), metavar="FILE", help=ALLOW_FILE_HELP)
def serve(nats_url: str | None, instance: str | None, callback_attempts: int, allow: tuple[str, ...],
          allow_file: str | None) -> None:
    """Run the pool service: decide which hosts go to which nodes. SIGHUP reads its allow file again."""
    name = instance or f"pool-{socket.gethostname()}-{os.getpid()}"
    settings = AllowSettings(allow, allow_file)
    try:
        allowed = settings.allowed()
    except AllowError as err:
        raise click.BadParameter(str(err)) from None

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_pool_service(nc, stack, name, callback_attempts=callback_attempts, allowed=allowed, settings=settings)

    main_for("pool", nats_url, setup)


def _failed(subject: str, err: Exception) -> Rejected:
    """The answer to a command that raised. The log not answering (a partition, a leader
    election) is "send it again": what the command wrote may or may not have landed, and the
    pool is read again before it is decided on. Anything else is a bug, logged."""
    if transient(err) or isinstance(err, TimeoutError):
        log.warning("command not decided: the log did not answer", subject=subject, error=str(err) or type(err).__name__)
        return Rejected(reason=f"the event log did not answer in time ({type(err).__name__}); send the command again",
                        retry=True, code="unavailable")
    log.exception("command failed", subject=subject)
    return Rejected(reason="internal error while handling the command; see the pool service's log")
