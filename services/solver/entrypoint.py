"""Composition root of the solver service."""

from __future__ import annotations

import os
import socket
from contextlib import AsyncExitStack

import click
from nats.aio.client import Client

from contracts import subjects
from muster.bus.consume import consume_events
from muster.bus.eventstore import EventStore
from muster.runtime.service import main_for

from .service import SolverService


@click.command("solver")
@click.option("--nats-url", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL or nats://127.0.0.1:4222)")
@click.option("--name", default=None, help="this solver's name (default: solver-<host>-<pid>)")
def main(nats_url: str | None, name: str | None) -> None:
    """Run the solver service."""
    name = name or f"solver-{socket.gethostname()}-{os.getpid()}"

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        service = SolverService(EventStore(nc), name)
        sub = await consume_events(nc.jetstream(), subjects.ALL_LAYOUT_EVENTS, "solvers", service.on_event, queue="solvers",
                                   on_poison=service.on_poison)
        stack.push_async_callback(sub.unsubscribe)
        dry = await nc.subscribe(subjects.ALL_SOLVE_REQUESTS, queue="solvers", cb=service.on_solve_request)
        stack.push_async_callback(dry.unsubscribe)

    main_for("solver", nats_url, setup)
