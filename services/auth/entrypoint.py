"""`muster auth`: run the auth service (docs/security.md)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import click
import structlog

from muster.cli_support import FilePath
from muster.runtime.logs import configure_logging
from muster.runtime.service import first_of

from .bootstrap import Bootstrap
from .keys import AuthKeys, env_lines
from .service import AuthService


async def _run(service: AuthService) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log = structlog.get_logger("muster.auth")
    await service.start()
    try:
        log.info("started", principals=len(service.view.state.principals) if service.view else 0)
        await first_of(stop.wait(), service.lost.wait())
        if not stop.is_set():
            raise SystemExit(1)  # a connection closed for good (logged): the supervisor starts us again
        log.info("stopping")
    finally:
        await service.stop()


@click.command("auth")
@click.option("--nats-url", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL or nats://127.0.0.1:4222)")
@click.option("--keys-dir", type=FilePath(file_okay=False, path_type=Path), default=None,
              help="folder of issuer.seed and bus.secret (default: $MUSTER_AUTH_ISSUER_SEED and $MUSTER_BUS_SECRET)")
@click.option("--bootstrap", "bootstrap_file", type=FilePath(exists=True, dir_okay=False, path_type=Path), default=None,
              help="JSON of the tenants and principals to make on first start (muster up writes it)")
@click.option("--idp", "idp_file", envvar="MUSTER_IDP", type=FilePath(exists=True, dir_okay=False, path_type=Path), default=None,
              help="JSON config of an identity provider whose JWTs are accepted too (docs/security.md)")
@click.option("--print-env", is_flag=True, help="print the keys as a compose .env (made in --keys-dir if missing) and exit")
def main(nats_url: str | None, keys_dir: Path | None, bootstrap_file: Path | None, idp_file: Path | None, print_env: bool) -> None:
    """Run the auth service: nats-server's auth callout, identity requests, revocations."""
    keys = AuthKeys.load_or_create(keys_dir) if keys_dir is not None else AuthKeys.from_env()
    if print_env:
        if keys is None:
            raise click.UsageError("--print-env needs --keys-dir")
        click.echo(env_lines(keys), nl=False)
        return
    configure_logging("auth")
    if keys is None:
        raise click.UsageError("give --keys-dir, or set MUSTER_AUTH_ISSUER_SEED and MUSTER_BUS_SECRET")
    service = AuthService(
        nats_url or os.environ.get("NATS_URL") or "nats://127.0.0.1:4222", keys, idp=str(idp_file) if idp_file else None,
        bootstrap=Bootstrap.from_file(bootstrap_file) if bootstrap_file else None,
        replicas=int(os.environ.get("MUSTER_REPLICAS", "1")),
    )
    asyncio.run(_run(service))
