"""`muster tenant|user|token|grant|revoke|whoami`: identities, as requests to the auth service
(`muster.auth.<principal>.<verb>`; docs/security.md). Who asks is the principal of the token in
use ($MUSTER_TOKEN or a credentials file); the auth service decides what it may do.

A new token is printed once and never again: nothing keeps it in clear. `--save FILE` writes it
to a credentials file only its owner can read instead of printing it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import click
import nats.errors

from contracts import subjects
from contracts.identity import PERMISSIONS, SERVICE_KINDS, AuthReply, Scope
from muster.help_group import WholeHelpGroup

from .bus.connect import CredentialsError, credentials, principal_of, write_credentials_file
from .cli_bus import Bus, bus_options, connect_bus
from .cli_support import (
    EXIT_DENIED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    FilePath,
    command,
    credentials_failed,
    echo_json,
    json_option,
)
from .tables import out as console
from .tables import print_rows
from .times import shown_time

DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}




def parse_duration(text: str | None) -> float | None:
    """`90s`, `30m`, `12h`, `30d` -> seconds."""
    if not text:
        return None
    unit = text[-1]
    if unit not in DURATION_UNITS or not text[:-1].isdigit() or int(text[:-1]) <= 0:
        raise CliError(f"--expires {text!r}: use a positive number with s, m, h or d (e.g. 30d)")
    return float(int(text[:-1]) * DURATION_UNITS[unit])




async def ask(bus: Bus, verb: str, **body: Any) -> Any:
    """One auth request as the token's principal; the reply's data, or CliError with its reason."""
    try:
        creds = credentials()
    except CredentialsError as err:
        raise credentials_failed(err) from None
    if creds.token is None:
        raise CliError("no token: set MUSTER_TOKEN or MUSTER_CREDENTIALS, or run in the folder where `muster up` wrote .muster/credentials")
    nc = await connect_bus(bus)
    try:
        data = json.dumps({k: v for k, v in body.items() if v not in (None, "")}).encode()
        msg = await nc.request(subjects.auth_request(principal_of(nc), verb), data, timeout=10)
    except nats.errors.NoRespondersError:
        raise CliError("no auth service answers: is auth on here (`muster up` runs one)?", EXIT_UNREACHABLE) from None
    finally:
        await nc.close()
    reply = AuthReply.model_validate_json(msg.data)
    if not reply.ok:
        raise CliError(reply.reason, EXIT_DENIED if reply.code == "forbidden" else EXIT_INVALID)
    return reply.data


def _time(stamp: float | None) -> str:
    return "never" if stamp is None else shown_time(dt.datetime.fromtimestamp(stamp, dt.UTC))


def _show_token(data: dict[str, Any], save: Path | None, as_json: bool) -> None:
    token = data.pop("token")
    if save is not None:
        write_credentials_file(save, token, principal=data["principal"])
        data["saved_to"] = str(save)
    if as_json:
        echo_json({**data, **({} if save else {"token": token})})
        return
    if save is not None:
        console.print(f"token {data['token_id']} of {data['principal']} saved to {save} (mode 0600)")
        return
    click.echo(f"token {data['token_id']} of {data['principal']} (shown once; nothing keeps it in clear):", err=True)
    click.echo(token)


def _table(rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    # Headers and yes/no as every other table says them (`TOKEN ID`, not `TOKEN_ID`; `no`, not `False`).
    print_rows(title, [c.replace("_", " ") for c in columns],
               [[", ".join(f"{g['permission']} on {g['scope']}" for g in r[c]) if c == "grants" else
                 _time(r[c]) if c == "expires_at" else _cell(r.get(c)) for c in columns] for r in rows])


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


# -- tenant -------------------------------------------------------------------------------------


@click.group("tenant", cls=WholeHelpGroup)
def tenant() -> None:
    """Tenants (super admins)."""


@tenant.command("create")
@click.argument("name")
@click.option("--description", default="", help="what the tenant is for (`tenant list` shows it)")
@bus_options(tenant=False)
@json_option
@command
async def tenant_create(name: str, description: str, bus: Bus, as_json: bool) -> None:
    """Create tenant NAME."""
    data = await ask(bus, "tenant-create", tenant=name, description=description)
    if as_json:
        echo_json(data)
        return
    # Its work runs only on provisioners granted its queues: a create before that waits.
    provisioners = [p["principal"] for p in await ask(bus, "user-list")
                    if p.get("service") == "provisioner" and not p.get("disabled")]
    console.print(tenant_next_steps(data["tenant"], provisioners), soft_wrap=True)


def tenant_next_steps(tenant: str, provisioners: list[str]) -> str:
    """The grants that let the provisioners there serve a new tenant, as commands to paste: a
    `<provisioner>` placeholder sent the reader to find the name (`muster up`'s is `provisioner`)."""
    said = f"tenant {tenant} created; its tasks run on a provisioner granted its queue"
    if not provisioners:
        return (f"{said}, and no provisioner has an identity yet: once one has (`muster user list` shows it, "
                f"service provisioner), muster grant PROVISIONER execute --tenant {tenant} --scope queue:default")
    return f"{said}:" + "".join(f"\n  muster grant {p} execute --tenant {tenant} --scope queue:default" for p in provisioners)


@tenant.command("list")
@bus_options(tenant=False)
@json_option
@command
async def tenant_list(bus: Bus, as_json: bool) -> None:
    """Tenants you can see (all, for a super admin)."""
    data = await ask(bus, "tenant-list")
    echo_json(data) if as_json else _table(data, ["tenant", "description"], "tenants")


# -- user ---------------------------------------------------------------------------------------


@click.group("user", cls=WholeHelpGroup)
def user() -> None:
    """Users and admins (tenant admins for their tenant, super admins for all)."""


@user.command("create")
@click.argument("principal")
@click.option("--tenant", "for_tenant", envvar="MUSTER_TENANT", default=None, help="the user's tenant (default: yours)")
@click.option("--role", type=click.Choice(["user", "tenant_admin", "super_admin", "service"]), default="user", show_default=True,
              help="what it may do (docs/security.md, \"Principals and what each may do\")")
@click.option("--service", type=click.Choice(list(SERVICE_KINDS)), default=None,
              help="for --role service: which")
@click.option("--expires", default=None, help="the first token's lifetime (30d, 12h...; default: until revoked)")
@click.option("--save", type=FilePath(dir_okay=False, path_type=Path), default=None, help="write the first token to this credentials file")
@bus_options(tenant=False)
@json_option
@command
async def user_create(principal: str, for_tenant: str | None, role: str, service: str | None, expires: str | None, save: Path | None,
                      bus: Bus, as_json: bool) -> None:
    """Create PRINCIPAL and its first token."""
    data = await ask(bus, "user-create", principal=principal, tenant=for_tenant, role=role, service=service,
                     expires_in_s=parse_duration(expires), name="first token")
    _show_token(data, save, as_json)


@user.command("list")
@click.option("--tenant", "for_tenant", envvar="MUSTER_TENANT", default=None, help="default: yours (a super admin: every principal)")
@bus_options(tenant=False)
@json_option
@command
async def user_list(for_tenant: str | None, bus: Bus, as_json: bool) -> None:
    """Principals with their roles and grants."""
    data = await ask(bus, "user-list", tenant=for_tenant)
    echo_json(data) if as_json else _table(data, ["principal", "role", "tenant", "disabled", "grants"], "principals")


@user.command("disable")
@click.argument("principal")
@click.option("--reason", default="", help="recorded with the disabling")
@bus_options(tenant=False)
@json_option
@command
async def user_disable(principal: str, reason: str, bus: Bus, as_json: bool) -> None:
    """Disable PRINCIPAL: its tokens stop working, its connections are closed. For good: there
    is no enable (its id stays taken; make another principal)."""
    data = await ask(bus, "user-disable", principal=principal, reason=reason)
    echo_json(data) if as_json else console.print(f"{data['principal']} disabled")


# -- token --------------------------------------------------------------------------------------


@click.group("token", cls=WholeHelpGroup)
def token() -> None:
    """Bearer tokens (for the bus and the tracker alike)."""


@token.command("create")
@click.option("--for", "principal", default=None, help="another principal you administer (default: you)")
@click.option("--expires", default=None, help="lifetime: 30d, 12h, 15m... (default: until revoked)")
@click.option("--name", default="", help="what the token is for")
@click.option("--save", type=FilePath(dir_okay=False, path_type=Path), default=None, help="write it to this credentials file (0600)")
@bus_options(tenant=False)
@json_option
@command
async def token_create(principal: str | None, expires: str | None, name: str, save: Path | None, bus: Bus, as_json: bool) -> None:
    """A new token, shown once."""
    data = await ask(bus, "token-create", principal=principal, expires_in_s=parse_duration(expires), name=name)
    _show_token(data, save, as_json)


@token.command("list")
@click.option("--for", "principal", default=None, help="another principal you administer (default: you)")
@bus_options(tenant=False)
@json_option
@command
async def token_list(principal: str | None, bus: Bus, as_json: bool) -> None:
    """Token ids, names, expiry and revocation (never the tokens)."""
    data = await ask(bus, "token-list", principal=principal)
    echo_json(data) if as_json else _table(data, ["token_id", "name", "expires_at", "revoked"], "tokens")


@token.command("revoke")
@click.argument("token_id")
@click.option("--for", "principal", default=None, help="whose token (needed for an identity provider's jwt-... ids)")
@bus_options(tenant=False)
@json_option
@command
async def token_revoke(token_id: str, principal: str | None, bus: Bus, as_json: bool) -> None:
    """Revoke TOKEN_ID: refused at once for new connections, open ones closed within seconds."""
    data = await ask(bus, "token-revoke", token_id=token_id, principal=principal)
    echo_json(data) if as_json else console.print(f"token {data['token_id']} revoked")


# -- grants and whoami --------------------------------------------------------------------------


def _grant_command(verb: str, doc: str) -> click.Command:
    @click.command(verb, help=doc)
    @click.argument("principal")
    @click.argument("permission", type=click.Choice(list(PERMISSIONS)))
    @click.option("--scope", default="tenant", show_default=True,
                  help="tenant, cluster:<id or name>, cluster:*, job:<id>, catalog:<kind>/<name>, catalog:*, queue:<class>")
    @click.option("--tenant", "for_tenant", envvar="MUSTER_TENANT", default=None, help="default: the principal's")
    @bus_options(tenant=False)
    @json_option
    @command
    async def run(principal: str, permission: str, scope: str, for_tenant: str | None, bus: Bus,
                  as_json: bool) -> None:
        scope = await _cluster_by_name(bus, scope, for_tenant)
        if verb == "grant":
            try:
                Scope.parse(for_tenant or "tenant", scope)  # its form; the auth service checks it again
            except ValueError as err:
                raise CliError(str(err), EXIT_INVALID) from None
        data = await ask(bus, verb, principal=principal, permission=permission, scope=scope, tenant=for_tenant)
        if data.get("revoked") is False and not as_json:
            console.print(f"{data['principal']} held no {data['permission']} on {data['scope']}: nothing to revoke "
                          f"(`muster user list` shows each principal's grants)")
            return
        echo_json(data) if as_json else console.print(
            f"{'revoked' if verb == 'revoke' else 'granted'}: {data['permission']} on {data['scope']} "
            f"{'from' if verb == 'revoke' else 'to'} {data['principal']}")

    return run


_NAMED_CLUSTER = re.compile(r"cluster:(?!\*$)(?![0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)([A-Za-z0-9_][A-Za-z0-9_-]*)")


async def _cluster_by_name(bus: Bus, scope: str, tenant: str | None) -> str:
    """`cluster:web` as `cluster:<its id>`: every other command takes a cluster's name (the scope
    was refused as "not a cluster id"). A grant stays on that cluster, not on the name."""
    named = _NAMED_CLUSTER.fullmatch(scope)
    if named is None:
        return scope
    from .tracker_client import TrackerReads

    async with TrackerReads(bus, tenant) as tracker:
        found = [c for c in (await tracker.get("/v1/clusters", name=named.group(1)))["items"] if c.get("status") != "deleted"]
    if not found:
        raise CliError(f"scope {scope!r}: no cluster named {named.group(1)!r} in {f'tenant {tenant}' if tenant else 'the tenant of your token'} "
                       "(`muster cluster list`); a cluster scope is a cluster's name or id, or cluster:*", EXIT_INVALID)
    return f"cluster:{found[0]['id']}"


grant = _grant_command("grant", "Give PRINCIPAL PERMISSION on a scope (you must hold it, and `grant` on that scope).")
revoke = _grant_command("revoke", "Take PERMISSION on a scope back from PRINCIPAL.")


@click.command("whoami")
@bus_options(tenant=False)
@json_option
@command
async def whoami(bus: Bus, as_json: bool) -> None:
    """Who the token in use is: principal, role, tenant, grants, and what the bus lets it do."""
    data = await ask(bus, "whoami")  # a token the bus refuses is said with the tracker's reason (connect_bus)
    if as_json:
        echo_json(data)
        return
    console.print(f"{data['principal']}: {data['role'].replace('_', ' ')}"
                  + (f" of tenant {data['tenant']}" if data.get("tenant") else "")
                  + (f" ({data['service']})" if data.get("service") else ""))
    for g in data["grants"]:
        console.print(f"  {g['permission']} on {g['scope']}")
    console.print(f"inbox: {data['inbox']}.>   may publish: {', '.join(data['bus']['publish'][:6])}"
                  + (" ..." if len(data["bus"]["publish"]) > 6 else ""))
