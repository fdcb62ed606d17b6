"""Composition root of the tracker service."""

from __future__ import annotations

import errno
import os
from contextlib import AsyncExitStack

import click
import structlog
from aiohttp import web
from nats.aio.client import Client

from muster.bus.eventstore import EventStore
from muster.runtime.service import main_for

from .http import PARSER_LIMIT, make_app

log = structlog.get_logger("muster.tracker")


def port_problem(err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return "the port is taken by another program (pick another with --port, or 0 for any free one)"
    return err.strerror or str(err)


@click.command("tracker")
@click.option("--nats-url", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL or nats://127.0.0.1:4222)")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--owner-timeout", default=0.25, show_default=True, type=click.FloatRange(0.01, 10.0),
              help="seconds to wait for a job's owner before folding its status from the log")
@click.option("--max-age", default=0.05, show_default=True, type=click.FloatRange(0.0, 10.0),
              help="seconds a running job's status may be served again while none of its locations changed (0: ask the owner every time)")
def main(nats_url: str | None, host: str, port: int, owner_timeout: float, max_age: float) -> None:
    """Run the tracker HTTP API (docs/tracker.md)."""

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        app = make_app(EventStore(nc), owner_timeout=owner_timeout, max_age=max_age, replicas=int(os.environ.get("MUSTER_REPLICAS", "1")))
        runner = web.AppRunner(app, access_log=None, max_line_size=PARSER_LIMIT, max_field_size=PARSER_LIMIT)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as err:  # one sentence (the supervisor shows it), not a traceback
            raise click.ClickException(f"cannot listen on {host}:{port}: {port_problem(err)}") from None
        bound = runner.addresses[0] if runner.addresses else (host, port)
        log.info("listening", url=f"http://{bound[0]}:{bound[1]}")

    main_for("tracker", nats_url, setup)
