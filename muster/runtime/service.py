"""What every service process shares: logging, connecting, and running until a signal."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import click
import nats.errors
import structlog
from nats.aio.client import Client

from muster import tracing
from muster.bus.connect import connect, first_refusal, principal_of
from muster.bus.streams import ensure_streams, replicas_from_env
from muster.bus.wire import cancel_and_wait, flush
from muster.runtime.exits import STAY_DOWN_EXIT
from muster.runtime.logs import configure_logging
from muster.tls.context import TlsError

Setup = Callable[[Client, AsyncExitStack], Awaitable[None]]

TASK_QUEUE_SERVICES = ("planner", "provisioner")
"""The services that use TASKS (the planner queues tasks, provisioners take them), and declare
it at start. The others may not create it (docs/security.md, "Services' JetStream rights"): a
memory stream, it is missing after nats-server restarts, and one of them that declared it first
with other subjects would have them acknowledged by JetStream."""


def wrong_identity(name: str, principal: str, refused: str) -> str:
    return (f"{principal} may not run the {name} service: the server refused it ({refused}); a service runs with "
            f"its own identity: MUSTER_CREDENTIALS=<data dir>/auth/{name}.cred, which muster up makes (docs/security.md)")


async def run_service(name: str, url: str | None, setup: Setup) -> None:
    """Connect, declare streams, let `setup` subscribe, then run until SIGINT/SIGTERM and
    drain (finish in-flight callbacks, flush acks) before exiting."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log = structlog.get_logger(f"muster.{name}")
    lost = asyncio.Event()

    async def on_closed() -> None:
        if not stop.is_set():
            lost.set()

    try:
        nc = await _connect_unless_stopped(url, name, stop, on_closed)
    except TlsError as err:  # a setting to fix, in one line of the log, not a traceback
        log.error("cannot connect to NATS", error=str(err))
        raise SystemExit(1) from None
    if nc is None:
        log.info("stopped before NATS answered")
        return
    try:
        async with AsyncExitStack() as stack:
            try:
                await ensure_streams(nc.jetstream(), replicas=replicas_from_env(), tasks=name in TASK_QUEUE_SERVICES)
                await setup(nc, stack)
            except nats.errors.TimeoutError:
                if (refused := first_refusal(nc)) is None:
                    raise
                # Another identity's credentials (a super admin's, from the data dir): each
                # request the server refuses times out, and the traceback named only the timeout.
                log.error("cannot start", error=wrong_identity(name, principal_of(nc), refused))
                raise SystemExit(STAY_DOWN_EXIT) from None
            await flush(nc)  # "started" means subscribed: a request sent on that word finds us
            log.info("started", nats=nc.connected_url.netloc if nc.connected_url else "")
            await first_of(stop.wait(), lost.wait())
            if lost.is_set() and not stop.is_set():
                # nats-py gives a connection up for good on some of the server's errors (an
                # "Authorization Violation" sent while connected, as a config reload of a server
                # whose callout is busy may; one read while reconnecting, where nats-py itself
                # calls no callback: `connect` does, muster.bus.wire.on_closed): exit, and the
                # supervisor starts us again.
                log.error("the connection to NATS was closed for good; exiting to be started again",
                          error=str(nc.last_error) if nc.last_error else "")
                stack.pop_all()  # their clean-ups need the connection that is gone
                raise SystemExit(1)
            log.info("stopping")
    finally:
        if nc.is_connected:
            await nc.drain()
        elif not nc.is_closed:  # NATS is away: nothing can be flushed, and a drain would wait for it
            await nc.close()


async def first_of(*waits: Awaitable[object]) -> None:
    """Returns when the first of `waits` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _connect_unless_stopped(url: str | None, name: str, stop: asyncio.Event,
                                  on_closed: Callable[[], Awaitable[None]]) -> Client | None:
    """The connection, or None when a signal came first: connecting waits for NATS without
    end (reconnects never give up), and a stop must not."""
    connecting = asyncio.ensure_future(connect(url, name=name, closed_cb=on_closed))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if connecting.done():
        return connecting.result()
    await cancel_and_wait(connecting)
    with contextlib.suppress(BaseException):
        connecting.result()  # (its end: cancelled, or an error no longer anyone's news)
    return None


SERVICE_URL_HELP = ("NATS server URL (default: $NATS_URL, else the one `muster up` saved in $MUSTER_DATA_DIR or "
                    "./.muster, else nats://127.0.0.1:4222)")


def main_for(name: str, url: str | None, setup: Setup) -> None:
    configure_logging(name)
    try:
        asyncio.run(run_service(name, url, setup))
    except click.ClickException as err:  # a setting `setup` refuses (a port taken): a JSON line too, not click's "Error:"
        structlog.get_logger(f"muster.{name}").error("cannot start", error=err.format_message())
        raise SystemExit(err.exit_code) from None
    finally:
        tracing.shutdown()  # the spans still waiting go out
