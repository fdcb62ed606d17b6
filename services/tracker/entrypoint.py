"""Composition root of the tracker service."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import ssl
from contextlib import AsyncExitStack
from pathlib import Path

import click
import structlog
from aiohttp import web
from nats.aio.client import Client

from muster.bus.eventstore import EventStore
from muster.cli_support import EXIT_INVALID, CliError, Duration, FilePath, WholeNumber
from muster.runtime.service import SERVICE_URL_HELP, main_for
from muster.tls.context import INSECURE_ENV, TlsError, check_listen, server_context

from .http import make_app
from .unreadable import tracker_runner

log = structlog.get_logger("muster.tracker")


class TrackerTls:
    """The HTTPS context; `reload` (on SIGHUP) reads the certificate files again into the same
    context, so new connections get the new certificate and open ones go on."""

    def __init__(self, cert: Path, key: Path) -> None:
        """ValueError naming the file when the pair cannot serve (muster.tls.ca.check_server_pair)."""
        from muster.tls.ca import check_server_pair

        check_server_pair(cert, key)
        self.cert, self.key = cert, key
        self.context = server_context(cert, key)

    def reload(self) -> None:
        from muster.tls.ca import check_server_pair

        try:
            check_server_pair(self.cert, self.key)
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ValueError, ssl.SSLError) as err:  # a half-written, mismatched or ended pair: keep the old one
            log.error("certificate not reloaded; the old one is kept", error=str(err), cert=str(self.cert))
            return
        log.info("certificate reloaded", cert=str(self.cert))


def port_problem(err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return "the port is in use by another program (pick another with --port, or 0 for any free one)"
    return err.strerror or str(err)


@click.command("tracker")
@click.option("--nats-url", envvar="NATS_URL", default=None, help=SERVICE_URL_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (another than loopback needs TLS)")
@click.option("--port", default=8080, show_default=True, type=WholeNumber(0, 65535), help="0 = any free port")
@click.option("--owner-timeout", default=0.25, show_default=True, type=Duration(0.01, 10.0),
              help="seconds to wait for a job's owner before folding its status from the log")
@click.option("--max-age", default=0.05, show_default=True, type=Duration(0.0, 10.0),
              help="seconds a running job's status may be served again while none of its locations changed (0: ask the owner every time)")
@click.option("--tls-cert", type=FilePath(exists=True, dir_okay=False, path_type=Path), envvar="MUSTER_TRACKER_TLS_CERT",
              default=None, help="serve HTTPS with this certificate (PEM; $MUSTER_TRACKER_TLS_CERT); SIGHUP reads it again")
@click.option("--tls-key", type=FilePath(exists=True, dir_okay=False, path_type=Path), envvar="MUSTER_TRACKER_TLS_KEY",
              default=None, help="the certificate's private key ($MUSTER_TRACKER_TLS_KEY)")
@click.option("--insecure-network", is_flag=True, envvar=INSECURE_ENV,
              help="allow plain HTTP on another address than loopback (tokens then cross the network in clear)")
def main(nats_url: str | None, host: str, port: int, owner_timeout: float, max_age: float, tls_cert: Path | None,
         tls_key: Path | None, insecure_network: bool) -> None:
    """Run the tracker HTTP API (docs/tracker.md)."""
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    try:
        check_listen(host, tls_cert is not None, insecure_network, "the tracker", "give it --tls-cert and --tls-key")
    except TlsError as err:
        raise click.UsageError(str(err)) from None
    try:
        tls = TrackerTls(tls_cert, tls_key) if tls_cert and tls_key else None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--tls-cert/--tls-key") from None

    async def setup(nc: Client, stack: AsyncExitStack) -> None:
        app = make_app(EventStore(nc), owner_timeout=owner_timeout, max_age=max_age, replicas=int(os.environ.get("MUSTER_REPLICAS", "1")))
        runner = tracker_runner(app, access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, host, port, ssl_context=tls.context if tls else None)
        try:
            await site.start()
        except OSError as err:  # one sentence (the supervisor shows it), not a traceback; the user's choice refused: exit 2
            raise CliError(f"cannot listen on {host}:{port}: {port_problem(err)}", EXIT_INVALID) from None
        if tls is not None:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, tls.reload)
            stack.callback(loop.remove_signal_handler, signal.SIGHUP)
        bound = runner.addresses[0] if runner.addresses else (host, port)
        log.info("listening", url=f"{'https' if tls else 'http'}://{bound[0]}:{bound[1]}")

    main_for("tracker", nats_url, setup)
