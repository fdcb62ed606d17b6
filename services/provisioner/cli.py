"""`provisioners list` and `provisioners drain ID`: live provisioners, from the presence bucket.

    python -m services.provisioner.cli list [--tenant T] [--json]
    python -m services.provisioner.cli drain ID [--no-wait] [--timeout 600]
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from muster.cli_support import open_client, resolve_nats_url

from .app import request_drain
from .presence import live_provisioners, wait_gone



def nats_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--nats-url and --data-dir: found as every other command finds the deployment."""
    f = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".muster"),
                     show_default=True, envvar="MUSTER_DATA_DIR",
                     help="where `muster up` saved the NATS URL (used when NATS_URL is not set; $MUSTER_DATA_DIR)")(f)
    return click.option("--nats-url", envvar="NATS_URL", default=None,
                        help="NATS server URL (default: $NATS_URL, else the one `muster up` saved, else nats://127.0.0.1:4222)")(f)


@click.group("provisioners")
def provisioners() -> None:
    """List and drain live provisioners."""


@provisioners.command("list")
@nats_option
@click.option("--tenant", default=None, help="only those serving this tenant")
@click.option("--class", "provisioner_class", default=None, help="only those of this provisioner class")
@click.option("--json", "as_json", is_flag=True, help="the presence records as JSON")
def list_command(nats_url: str | None, data_dir: Path, tenant: str | None, provisioner_class: str | None, as_json: bool) -> None:
    """Live provisioners: id, class, tenants, load, plugins."""

    async def run() -> None:
        async with await open_client(resolve_nats_url(nats_url, data_dir), "default") as client:
            records = await live_provisioners(client.nc, tenant=tenant, provisioner_class=provisioner_class)
        if as_json:
            click.echo(json.dumps([json.loads(r.model_dump_json()) for r in records], indent=2))
            return
        if not records:
            click.echo("no live provisioners")
            return
        now = datetime.now(timezone.utc)
        click.echo(f"{'ID':<28} {'CLASS':<10} {'TENANTS':<20} {'LOAD':>9} {'STATE':<9} {'SEEN':>5}  PLUGINS")
        for r in records:
            plugins = ", ".join(f"{p.get('type', '?')[0]}:{p.get('name')} {p.get('version')}" for p in r.info.plugins)
            seen = f"{(now - r.refreshed_at).total_seconds():.0f}s"
            state = "draining" if r.draining else "ready"
            load = f"{r.in_flight}/{r.info.capacity}"
            click.echo(f"{r.info.id:<28} {r.info.provisioner_class:<10} {','.join(r.info.tenants):<20} "
                       f"{load:>9} {state:<9} {seen:>5}  {plugins}")

    asyncio.run(run())


@provisioners.command("drain")
@nats_option
@click.argument("provisioner_id")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until it has left")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1), help="seconds to wait")
def drain_command(nats_url: str | None, data_dir: Path, provisioner_id: str, wait: bool, timeout: float) -> None:
    """Stop PROVISIONER_ID taking tasks; it finishes those in flight, deregisters and exits."""

    async def run() -> None:
        async with await open_client(resolve_nats_url(nats_url, data_dir), "default") as client:
            try:
                answer = await request_drain(client.nc, provisioner_id)
            except LookupError as err:
                raise click.ClickException(str(err)) from None
            state = "already draining" if answer.get("already") else "draining"
            click.echo(f"{provisioner_id}: {state}, {answer.get('in_flight', 0)} task(s) in flight")
            if wait:
                try:
                    how = await wait_gone(client.nc.jetstream(), provisioner_id, timeout)
                except TimeoutError:
                    raise click.ClickException(f"{provisioner_id} is still draining after {timeout:g} s") from None
                click.echo(f"{provisioner_id}: {'left' if how == 'left' else 'gone (its presence expired)'}")

    asyncio.run(run())


if __name__ == "__main__":
    provisioners()
