"""`muster pool`: hosts, terms and the waiting line of resource pools (docs/pools.md)."""

from __future__ import annotations

from typing import Any

import click
from pydantic import ValidationError

from contracts import subjects
from contracts.errors import problem_text
from contracts.pool_commands import (
    MAX_HOSTS_PER_COMMAND,
    AddHosts,
    ConfigurePool,
    RemoveHost,
    ResetHost,
    ResolveHost,
    ShowPool,
)
from contracts.pools import HostSpec, PoolTerms, TenantTerms
from muster.cli_bus import Bus, bus_options, open_nats
from muster.cli_support import EXIT_UNREACHABLE, CliError, WholeNumber, command, echo_json, json_option, parse_json_arg
from muster.client import default_user
from muster.help_group import WholeHelpGroup
from muster.tables import Output, print_rows
from muster.times import shown_time

from . import client as pools
from .entrypoint import serve

out = Output(highlight=False, soft_wrap=True, markup=False)
PROPERTY_KEYS = ("cpu", "memory", "labels", "extra")


@click.group("pool", cls=WholeHelpGroup)
def pool() -> None:
    """Resource pools: SSH hosts lent to one node of one cluster at a time."""


pool.add_command(serve)


def _options(f: Any) -> Any:
    """Pools belong to no tenant: --nats-url and --data-dir only; --json."""
    return bus_options(json_option(f), tenant=False)


POOLS_ELSEWHERE = "a tenant's people see the pools through the tracker: GET /v1/pools, the console's pools page"
"""Where a tenant's user reads what `pool list|show` show (docs/pools.md): the bus refuses them."""


class NoPool(CliError):
    """The pool named is not there (the answer names the pools that are): said as a missing
    name, since `refused: there is no pool 'lab'` read like a permission problem."""


async def _send(bus: Bus, name: str, cmd: Any, elsewhere: str = "") -> Any:
    async with open_nats(bus, elsewhere) as nc:
        try:
            return await pools.send(nc, name, cmd)
        except pools.NoPoolService as err:
            raise CliError(str(err), EXIT_UNREACHABLE) from None
        except pools.PoolRejected as err:
            if err.code == "not_found":
                raise NoPool(err.reason) from None
            raise CliError(f"refused: {err.reason}") from None


NO_HOST_KEY = ("none given: list the host's public keys as `ssh-keyscan ADDRESS` prints them "
               "(host_keys: [\"ssh-ed25519 AAAA...\"]); every login checks them")
"""(pydantic said "Field required", and "List should have at least 1 item after validation, not 0")"""


def host_entries(raw: Any, source: str) -> list[HostSpec]:
    """Hosts from a file: the contract's shape, or with cpu/memory/labels at the top level and
    `host_key` for a single key."""
    if isinstance(raw, dict) and "hosts" in raw:
        raw = raw["hosts"]
    if not isinstance(raw, list) or not raw:
        raise CliError(f"{source}: expected a list of hosts (or {{hosts: [...]}})")
    specs = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise CliError(f"{source}: host {i + 1} is not a mapping")
        item = dict(item)
        props = dict(item.pop("properties", {}) or {})
        props.update({k: item.pop(k) for k in PROPERTY_KEYS if k in item})
        if "host_key" in item:
            item["host_keys"] = item.pop("host_key")
        try:
            specs.append(HostSpec.model_validate({**item, "properties": props}))
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            said = NO_HOST_KEY if first["loc"] == ("host_keys",) and first["type"] in ("missing", "too_short") else problem_text(first)
            raise CliError(f"{source}: host {i + 1} ({item.get('id', '?')}): {where + ': ' if where else ''}{said}") from None
    return specs


@pool.command("add-hosts")
@click.argument("name")
@click.argument("hosts_file", metavar="FILE")
@_options
@command
async def add_hosts(name: str, hosts_file: str, bus: Bus, as_json: bool) -> None:
    """Register static hosts from FILE (YAML or JSON: id, address, port, user, host_keys,
    cpu, memory, labels). Makes the pool if it is new."""
    specs = host_entries(parse_json_arg(f"@{hosts_file}", "hosts"), hosts_file)
    answers = []
    for i in range(0, len(specs), MAX_HOSTS_PER_COMMAND):
        chunk = specs[i : i + MAX_HOSTS_PER_COMMAND]
        answers.append(await _send(bus, name, AddHosts(hosts=chunk, requested_by=default_user())))
    if as_json:
        echo_json([a.model_dump() for a in answers])
    else:
        for a in answers:
            out.print(a.message)


@pool.command("list")
@_options
@command
async def list_pools(bus: Bus, as_json: bool) -> None:
    """Every pool: hosts by state, free hosts, waiting requests."""
    async with open_nats(bus, POOLS_ELSEWHERE) as nc:
        try:
            found = await pools.list_pools(nc)
        except pools.NoPoolService as err:
            raise CliError(str(err), EXIT_UNREACHABLE) from None
    if as_json:
        echo_json(found)
        return
    if not found:
        out.print("no pools yet: `muster pool add-hosts NAME FILE` makes one")
        return
    print_rows("pools", ["pool", "hosts", "free", "states", "waiting", "granted", "policy"],
               [[p["pool"], str(p["hosts"]), str(p["free"]), ", ".join(f"{k} {v}" for k, v in p["states"].items()),
                 str(p["waiting"]), str(p["granted"]), p["terms"]["policy"]] for p in found], out)


@pool.command("show")
@click.argument("name")
@click.option("--no-hosts", is_flag=True, help="only the summary and the waiting line")
@_options
@command
async def show(name: str, no_hosts: bool, bus: Bus, as_json: bool) -> None:
    """A pool: its terms, every host and the waiting line in policy order."""
    answer = await _send(bus, name, ShowPool(hosts=not no_hosts), POOLS_ELSEWHERE)
    view = answer.view or {}
    if as_json:
        echo_json(view)
        return
    terms = view["terms"]
    out.print(f"pool {name}: {view['hosts']} hosts, {view['free']} free; policy {terms['policy']}"
              # (set with `configure --default-priority`, it was shown nowhere but --json; session 32)
              + (f", default priority {terms['default_priority']}" if terms.get("default_priority", 1) != 1 else "")
              + (f", at most {terms['job_limit']} hosts per job" if terms.get("job_limit") else ""))
    for t, tt in sorted(terms["tenants"].items()):
        limits = ", ".join(f"max {what} {tt[key]}" for what, key in (("nodes", "max_nodes"), ("clusters", "max_clusters"))
                           if tt.get(key) is not None)
        out.print(f"  tenant {t}: priority {tt['priority']}" + (f", {limits}" if limits else ""))
    if not no_hosts:
        print_rows("hosts", ["host", "address", "state", "cpu", "memory", "labels", "held by", "note"],
                   [_host_row(h) for h in view.get("hosts_detail", [])], out, heading=True)
    queue = view.get("queue", [])
    if queue:
        print_rows("waiting, in policy order", ["#", "request", "tenant", "cluster", "hosts", "urgency", "priority", "score", "deadline"],
                   [[str(q["position"]), q["request_id"], q["tenant"], q["cluster_id"], str(q["hosts"]),
                     str(q["urgency"]), str(q["priority"]), f"{q['score']:g}", shown_time(q["deadline"], "")] for q in queue], out, heading=True)
    else:
        out.print("nobody is waiting")


def _host_row(h: dict[str, Any]) -> list[str]:
    holder = h["holder"]
    note = h["error"] or ("ambiguous" + (f": shares address with {', '.join(h['shares_address_with'])}"
                                         if h["shares_address_with"] else f": {len(h['claims']) + 1} registrations")
                          if h["ambiguous"] else "")
    return [h["id"], f"{h['address']}:{h['port']}", h["state"], str(h["properties"]["cpu"]), f"{h['properties']['memory']}M",
            ",".join(h["properties"]["labels"]), f"{holder['tenant']}/{holder['cluster_id'][:8]}/{holder['node_id']}" if holder else "", note]


@pool.command("resolve")
@click.argument("name")
@click.argument("host_id", metavar="HOST")
@click.option("--use", "use_claim", type=WholeNumber(1), help="keep this registration of the host (1 = the first)")
@click.option("--drop", is_flag=True, help="remove the host from the pool instead")
@_options
@command
async def resolve(name: str, host_id: str, use_claim: int | None, drop: bool, bus: Bus, as_json: bool) -> None:
    """End an ambiguity: say which registration of HOST is right, or drop it."""
    answer = await _send(bus, name,
                         ResolveHost(host_id=host_id, use_claim=use_claim, drop=drop, requested_by=default_user()))
    echo_json(answer.model_dump()) if as_json else out.print(answer.message)


@pool.command("reset")
@click.argument("name")
@click.argument("host_id", metavar="HOST")
@_options
@command
async def reset(name: str, host_id: str, bus: Bus, as_json: bool) -> None:
    """Put a host in error back in the pool (after you repaired it)."""
    answer = await _send(bus, name, ResetHost(host_id=host_id, requested_by=default_user()))
    echo_json(answer.model_dump()) if as_json else out.print(answer.message)


@pool.command("remove-host")
@click.argument("name")
@click.argument("host_id", metavar="HOST")
@click.option("--reason", default="", help="recorded with the removal")
@_options
@command
async def remove_host(name: str, host_id: str, reason: str, bus: Bus, as_json: bool) -> None:
    """Take a host that nobody holds out of the pool."""
    answer = await _send(bus, name,
                         RemoveHost(host_id=host_id, reason=reason, requested_by=default_user()))
    echo_json(answer.model_dump()) if as_json else out.print(answer.message)


def _pairs(values: tuple[str, ...], what: str) -> dict[str, int]:
    """TENANT=N pairs, each refused naming what is wrong with it (`--max-nodes 'acme=-1'` was
    told only "use TENANT=NUMBER", and `--priority =3` "tenants..[key]: '' is not allowed here")."""
    found = {}
    for v in values:
        key, sep, number = v.partition("=")
        if not sep:
            raise CliError(f"{what} {v!r}: use TENANT=NUMBER")
        if not subjects.TOKEN.fullmatch(key):
            raise CliError(f"{what} {v!r}: {key!r} is not a tenant's name (1-128 letters, digits, '-' or '_'): use TENANT=NUMBER")
        if not number.isdigit():
            raise CliError(f"{what} {v!r}: {number!r} is not a whole number, 0 or more: use TENANT=NUMBER")
        found[key] = int(number)
    return found


@pool.command("configure")
@click.argument("name")
@click.option("--policy", help="urgency-x-priority (default), priority or fifo")
@click.option("--default-priority", type=WholeNumber(0, 1000), help="priority of tenants not listed")
@click.option("--priority", multiple=True, metavar="TENANT=N", help="a tenant's priority (repeat)")
@click.option("--max-nodes", multiple=True, metavar="TENANT=N", help="most hosts a tenant may hold and wait for")
@click.option("--max-clusters", multiple=True, metavar="TENANT=N", help="most clusters a tenant may use the pool for")
@click.option("--job-limit", type=WholeNumber(0), help="most hosts one job may ask for (0 = no limit)")
@_options
@command
async def configure(name: str, policy: str | None, default_priority: int | None, priority: tuple[str, ...],
                    max_nodes: tuple[str, ...], max_clusters: tuple[str, ...], job_limit: int | None, bus: Bus, as_json: bool) -> None:
    """Change a pool's policy, priorities and quotas (what is not given stays)."""
    try:
        current = (await _send(bus, name, ShowPool(hosts=False))).view["terms"]
    except NoPool:  # configure makes the pool
        current = PoolTerms().model_dump()
    tenants = {t: dict(v) for t, v in current["tenants"].items()}
    for field, values in (("priority", priority), ("max_nodes", max_nodes), ("max_clusters", max_clusters)):
        for t, n in _pairs(values, "--" + field.replace("_", "-")).items():
            tenants.setdefault(t, TenantTerms().model_dump())[field] = n
    terms = PoolTerms.model_validate({
        **current, "tenants": tenants,
        **({"policy": policy} if policy else {}),
        **({"default_priority": default_priority} if default_priority is not None else {}),
        **({"job_limit": job_limit or None} if job_limit is not None else {}),
    })
    answer = await _send(bus, name, ConfigurePool(terms=terms, requested_by=default_user()))
    echo_json(answer.model_dump()) if as_json else out.print(answer.message)
