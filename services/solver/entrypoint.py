"""Composition root of the solver service."""

from __future__ import annotations

import os
import socket
from contextlib import AsyncExitStack

import click
from nats.aio.client import Client

from muster.bus.consume import consume_routes
from muster.bus.scopedlog import ScopedEventStore
from muster.runtime.service import SERVICE_URL_HELP, main_for

from .routing import REPLIES, ROUTES
from .service import SolverService


@click.command("solver")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--name", default=None, help="this solver's name (default: solver-<host>-<pid>)")
def main(nats_url: str | None, name: str | None) -> None:
    """Run the solver service."""
    name = name or f"solver-{socket.gethostname()}-{os.getpid()}"

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        await start_solver(nc, stack, name)

    main_for("solver", nats_url, setup)


async def start_solver(nc: Client, stack: AsyncExitStack, name: str) -> SolverService:
    """A solver on `nc`, subscribed to what its routing tables (routing.py) name; stopped
    with `stack`."""
    service = SolverService(ScopedEventStore(nc, deletes=False), name)
    for sub in await consume_routes(nc.jetstream(), service, ROUTES, on_poison=service.on_poison):
        stack.push_async_callback(sub.unsubscribe)
    for reply in REPLIES:
        dry = await nc.subscribe(reply.subject, queue=reply.queue, cb=getattr(service, reply.handler))
        stack.push_async_callback(dry.unsubscribe)
    return service
