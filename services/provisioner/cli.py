"""`muster provisioners list` and `muster provisioners drain ID`: live provisioners, from the
presence bucket. Errors and exit codes as every `muster` command (docs/client.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_INVALID, EXIT_UNREACHABLE, CliError, command

from .app import request_drain
from .presence import live_provisioners, wait_gone


@click.group("provisioners")
def provisioners() -> None:
    """List and drain live provisioners."""


@provisioners.command("list")
@bus_options(all_tenants=True)
@click.option("--class", "provisioner_class", default=None, help="only those of this provisioner class")
@click.option("--json", "as_json", is_flag=True, help="the presence records as JSON")
@command
async def list_command(bus: Bus, provisioner_class: str | None, as_json: bool) -> None:
    """Live provisioners (of every tenant, or those serving --tenant): id, class, tenants, load, plugins."""
    async with open_nats(bus) as nc:
        records = await live_provisioners(nc, tenant=bus.tenant, provisioner_class=provisioner_class)
    if as_json:
        click.echo(json.dumps([json.loads(r.model_dump_json()) for r in records], indent=2))
        return
    if not records:
        click.echo("no live provisioners")
        return
    now = datetime.now(UTC)
    click.echo(f"{'ID':<28} {'CLASS':<10} {'TENANTS':<20} {'LOAD':>9} {'STATE':<9} {'SEEN':>5}  PLUGINS")
    for r in records:
        plugins = ", ".join(f"{p.get('type', '?')[0]}:{p.get('name')} {p.get('version')}" for p in r.info.plugins)
        seen = f"{(now - r.refreshed_at).total_seconds():.0f}s"
        state = "draining" if r.draining else "ready"
        load = f"{r.in_flight}/{r.info.capacity}"
        click.echo(f"{r.info.id:<28} {r.info.provisioner_class:<10} {','.join(r.info.tenants):<20} "
                   f"{load:>9} {state:<9} {seen:>5}  {plugins}")


@provisioners.command("drain")
@bus_options(tenant=False)
@click.argument("provisioner_id")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until it has left")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1), help="seconds to wait (then exit 3)")
@command
async def drain_command(bus: Bus, provisioner_id: str, wait: bool, timeout: float) -> None:
    """Stop PROVISIONER_ID taking tasks; it finishes those in flight, deregisters and exits."""
    async with open_nats(bus) as nc:
        try:
            answer = await request_drain(nc, provisioner_id)
        except LookupError as err:
            raise CliError(str(err), EXIT_INVALID) from None
        state = "already draining" if answer.get("already") else "draining"
        click.echo(f"{provisioner_id}: {state}, {answer.get('in_flight', 0)} task(s) in flight")
        if wait:
            try:
                how = await wait_gone(nc.jetstream(), provisioner_id, timeout)
            except TimeoutError:
                raise CliError(f"{provisioner_id} is still draining after {timeout:g} s", EXIT_UNREACHABLE) from None
            click.echo(f"{provisioner_id}: {'left' if how == 'left' else 'gone (its presence expired)'}")


if __name__ == "__main__":
    provisioners()
