"""`muster cluster list` and `muster cluster show`: the tenant's clusters as their events tell
them, `muster cluster cost`: what they cost an hour at today's prices, and `muster job list`: its jobs from the tracker's index; read through the tracker
(docs/decisions/0016). Registered on the `cluster` and `job` groups by `ops_cli.py`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from contracts.catalog import Catalog

from .cli_bus import Bus, bus_options
from .cli_support import CliError, command, echo_json, json_option
from .client import ClusterInfo
from .ops_session import out
from .readmodel.cost import hidden_prices_note, rate, spend
from .tables import print_rows
from .times import lease_end, shown_time
from .tracker_client import TrackerReads


@click.command("list")
@click.option("--all", "show_all", is_flag=True, help="deleted clusters too")
@click.option("--output", "-o", type=click.Choice(["table", "wide", "json"]), default=None,
              help="table (default), wide (services, version, provider too) or json; without a terminal, the "
                   "table is plain columns with nothing cut")
@bus_options
@json_option
@command
async def list_clusters(show_all: bool, output: str | None, bus: Bus, as_json: bool) -> None:
    """The tenant's clusters, from their events (through the tracker)."""
    async with TrackerReads(bus) as tracker:
        every = await tracker.clusters()
    clusters = [c for c in every if show_all or c.status != "deleted"]
    if as_json or output == "json":
        echo_json([{k: v for k, v in c.to_json().items() if k not in ("nodes", "config")} | {"nodes": len(c.nodes)}
                   for c in clusters])
        return
    tenant = bus.asked or (every[0].tenant if every else "")
    if not clusters:
        # Only deleted ones: say so, else "no clusters" reads as if the tenant never had any.
        hidden = len(every) - len(clusters)
        elsewhere = await _elsewhere(bus)
        tenant = elsewhere.here if elsewhere is not None else tenant
        where = f" in tenant {tenant!r}" if tenant else ""
        out.print(f"no clusters{where}" + (f" ({hidden} deleted: --all lists them)" if hidden else "")
                  + (elsewhere.said if elsewhere is not None else ""))
        return
    columns = ["name", "id", "status", "template", "nodes", "last job", "expires"]
    if output == "wide":
        columns[5:5] = ["services", "provider", "version"]
    rows = [[str(_column(c, col)) for col in columns] for c in clusters]
    print_rows(f"clusters of tenant {tenant!r}", columns, rows)


@dataclass(frozen=True)
class Elsewhere:
    here: str
    said: str


ELSEWHERE_TENANTS = 20
"""Other tenants looked at for an empty listing at most (one small read each)."""


async def _elsewhere(bus: Bus) -> Elsewhere | None:
    """For an empty listing: the tenant it was (`--tenant`, else the token's own, `default` for
    a super admin, who has none), and for a super admin the other tenants that have clusters,
    with the command that lists them: "no clusters" read as if the deployment had none (with
    `--tenant acme` too, until session 34). Only a super admin reads other tenants: anyone
    else is told nothing of them (the tracker would refuse it their reads)."""
    from .auth_cli import ask

    try:
        me = await ask(bus, "whoami")
        here = bus.asked or str(me.get("tenant") or "default")  # (the tracker's for a principal of no tenant)
        if me.get("role") != "super_admin":
            return Elsewhere(here, "")
        others = [str(t["tenant"]) for t in await ask(bus, "tenant-list") if t["tenant"] != here]
    except CliError:  # (a read that cannot say more still says what it found)
        return None
    counts = []
    for other in others[:ELSEWHERE_TENANTS]:
        try:
            async with TrackerReads(bus, tenant=other) as tracker:
                page = await tracker.get("/v1/clusters", limit=100)
        except CliError:
            continue
        live = sum(1 for c in page["items"] if c.get("status") != "deleted")
        if live:
            counts.append(f"{other} ({live}{'+' if page.get('next_after') is not None else ''})")
    if not counts:
        more = f" (of the first {ELSEWHERE_TENANTS} other tenants)" if len(others) > ELSEWHERE_TENANTS else ""
        return Elsewhere(here, f"; no other tenant has any either{more}" if others else "")
    first = counts[0].split(" ", 1)[0]
    return Elsewhere(here, f"; other tenants have clusters: {', '.join(counts)}; list them with "
                           f"`muster cluster list --tenant {first}`")


def _column(c: ClusterInfo, name: str) -> object:
    return {"name": c.name, "id": c.id, "status": c.status, "template": c.template, "nodes": len(c.nodes),
            "services": ",".join(c.services), "provider": c.provider, "version": c.version, "last job": c.job_id,
            "expires": lease_end(c.expires_at)}[name]


def cluster_read(name: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A command that reads one CLUSTER (its id or name) through the tracker, with --json."""

    def decorate(f: Callable[..., Any]) -> click.Command:
        return click.command(name)(click.argument("cluster_ref", metavar="CLUSTER")(bus_options(json_option(command(f)))))

    return decorate


@cluster_read("show")
async def show(cluster_ref: str, bus: Bus, as_json: bool) -> None:
    """One cluster: status, template, config, every node, and what its last job is doing."""
    async with TrackerReads(bus) as tracker:
        c = await tracker.cluster(cluster_ref)
        data = c.to_json()
        if as_json:
            echo_json(data)
            return
        last = await _job_state(tracker, c.job_id)
    status = c.status + (f" ({c.status_reason})" if c.status_reason else "")
    for label, value in (("cluster", f"{c.name} ({c.id})"), ("status", status), ("template", c.template),
                         ("provider", c.provider), ("last job", f"{c.job_id}{last}"), ("services", ", ".join(c.services) or "none"),
                         ("version", str(c.version)), ("nodes", str(len(c.nodes))),
                         ("expires", lease_end(c.expires_at)),
                         ("config", json.dumps(c.config))):
        out.print(f"{label:>9}: {value}")
    rows = []
    for n in data["nodes"]:  # a service meant to be stopped there (a stop job) says so
        services = [s + (" (stopped)" if n["desired"].get(s) == "stopped" else "") for s in n["services"]]
        addresses = list(dict.fromkeys(n["ipaddresses"].values()))  # access and bind are often one address
        rows.append([n["id"], n["hostname"], n["hardwaretype"], n["imagetype"], ", ".join(addresses), ", ".join(services)])
    if rows:  # (a deleted cluster's ended on a table header of no nodes; `nodes: 0` says it)
        print_rows(f"{len(c.nodes)} nodes", ["node", "hostname", "hardware", "image", "address", "services"], rows)


async def _job_state(tracker: TrackerReads, job_id: str | None) -> str:
    """` (delete, waiting_for_approval)`: a cluster `active` while a job waits on it is busy all the
    same (a new user's walk, session 20, met `status: active` and then "busy" at its next change)."""
    if not job_id:
        return ""
    try:
        job = await tracker.get(f"/v1/jobs/{job_id}")
    except CliError:  # (best effort: the cluster reads without it)
        return ""
    return f" ({job.get('operation')}, {job.get('state')})"


@click.command("list")
@click.option("--cluster", "cluster_ref", default=None, metavar="CLUSTER", help="only this cluster's jobs (its id or name)")
@click.option("--state", default=None, help="only jobs in this state (running, paused, succeeded, failed, rolled_back, ...)")
@bus_options
@json_option
@command
async def list_jobs(cluster_ref: str | None, state: str | None, bus: Bus, as_json: bool) -> None:
    """The tenant's jobs, oldest first: operation, cluster, state, who asked, when (through the
    tracker). `muster status JOB` shows one."""
    async with TrackerReads(bus) as tracker:
        named = await tracker.cluster(cluster_ref) if cluster_ref else None
        jobs = await tracker.pages("/v1/jobs", cluster=named.id if named else None, state=state)
        if named is not None or not jobs or as_json:  # (a reader of one cluster may not list the others)
            names = {named.id: named.name} if named is not None else {}
        else:
            names = {c["id"]: c["name"] for c in await tracker.pages("/v1/clusters")}
    if as_json:
        echo_json(jobs)
        return
    if not jobs:
        out.print("no jobs" + (f" of cluster {named.name}" if named else "") + (f" in state {state}" if state else ""))
        return
    rows = [[j["id"], names.get(j["cluster_id"]) or j["cluster_id"] or "", j["operation"] or "", j["state"], j.get("requested_by") or "",
             shown_time(j.get("started_at"), ""), shown_time(j.get("finished_at"), "")] for j in jobs]
    print_rows(None, ["job", "cluster", "operation", "state", "requested by", "started", "finished"], rows)


@click.command("cost")
@bus_options
@json_option
@command
async def cost(bus: Bus, as_json: bool) -> None:
    """What the tenant's clusters cost an hour at today's catalog prices, each and together."""
    async with TrackerReads(bus) as tracker:
        every = await tracker.clusters()
        read = await tracker.get("/v1/catalog")
    catalog = Catalog.model_validate(read.get("catalog") or {})
    live = [c for c in every if c.status != "deleted"]
    report = spend(((c.name, c.id, c.provider, [n.hardwaretype for n in c.nodes]) for c in live), catalog.hardwaretypes)
    # The tracker's answer names the tenant it read (a super admin's `default` too, clusters or none).
    tenant = bus.asked or read.get("tenant") or (every[0].tenant if every else "")
    # A type the catalog it read lacks, while the tracker hid some of it, is one it may not read:
    # its price is what a grant shows (one the catalog does not price, no grant shows).
    hidden = [t for t in report["unknown"] if t not in catalog.hardwaretypes] if read.get("hidden") else []
    note = hidden_prices_note(tracker.principal, hidden)
    if as_json:
        echo_json({"tenant": tenant, **report, **({"note": note} if note else {})})
        return
    if not live:
        out.print(f"no clusters in tenant {tenant!r}: nothing to pay for" if tenant else "no clusters: nothing to pay for")
        return
    rows = [[c["name"], str(c["nodes"]), f"{rate(c['per_hour'])}/h",
             ", ".join(f"{h} {v['nodes']} × " + ("no price" if h in c["unknown"] else f"{rate(v['each'])}/h")
                       for h, v in c["by_hardware"].items())] for c in report["clusters"]]
    print_rows(f"what the clusters of tenant {tenant!r} cost at today's prices", ["cluster", "nodes", "per hour", "hardware"], rows)
    nodes, clusters = report["nodes"], len(live)
    out.print(f"total: {rate(report['per_hour'])}/h for {nodes} node{'' if nodes == 1 else 's'} in {clusters} cluster{'' if clusters == 1 else 's'}"
              + (f"; no price for {', '.join(report['unknown'])} (counted as 0)" if report["unknown"] else ""))
    if note:  # the prices it may not read, not prices the catalog lacks
        out.print(note)


COMMANDS = (list_clusters, show, cost)
JOB_COMMANDS = (list_jobs,)
