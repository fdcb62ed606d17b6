"""`muster provisioners list` and `muster provisioners drain ID`: live provisioners, from the
presence bucket. Errors and exit codes as every `muster` command (docs/client.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_INVALID, EXIT_UNREACHABLE, CliError, Duration, command, json_flag
from muster.help_group import WholeHelpGroup
from muster.tracker_client import TrackerReads

from .app import request_drain
from .presence import wait_gone


@click.group("provisioners", cls=WholeHelpGroup)
def provisioners() -> None:
    """List and drain live provisioners."""


@provisioners.command("list")
@bus_options
@click.option("--class", "provisioner_class", default=None, help="only those of this provisioner class")
@click.option("--all", "every", is_flag=True, help="every live provisioner, whatever tenant it serves (operators)")
@json_flag("the presence records as JSON")
@command
async def list_command(bus: Bus, provisioner_class: str | None, every: bool, as_json: bool) -> None:
    """Live provisioners serving the tenant (the token's own, or --tenant; --all: every one):
    id, class, tenants, load, plugins. Read through the tracker."""
    async with TrackerReads(bus) as tracker:
        records = (await tracker.get("/v1/provisioners", **{"class": provisioner_class, "all": every or None}))["items"]
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    if not records:
        click.echo("no live provisioners")
        return
    now = datetime.now(UTC)
    click.echo(f"{'ID':<28} {'CLASS':<10} {'TENANTS':<20} {'LOAD':>9} {'STATE':<9} {'SEEN':>5}  PLUGINS")
    for r in records:
        info = r["info"]
        plugins = ", ".join(f"{p.get('type', '?')[0]}:{p.get('name')} {p.get('version')}" for p in info["plugins"])
        seen = f"{(now - datetime.fromisoformat(r['refreshed_at'])).total_seconds():.0f}s"
        state = "draining" if r["draining"] else "ready"
        load = f"{r['in_flight']}/{info['capacity']}"
        tenants = ",".join(info["tenants"]) + (f" +{r['others']}" if r.get("others") else "")
        click.echo(f"{info['id']:<28} {info['provisioner_class']:<10} {tenants:<20} {load:>9} {state:<9} {seen:>5}  {plugins}")


@provisioners.command("drain")
@bus_options(tenant=False)
@click.argument("provisioner_id")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until it has left")
@click.option("--timeout", default=600.0, show_default=True, type=Duration(), help="how long to wait, then exit 3 (seconds, or 90s, 10m)")
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
