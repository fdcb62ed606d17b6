"""`muster cluster` commands for what operators do every day (docs/client.md): apply a
saved plan, extend a cluster's lease, check the services' observed state, list the drift and
repair it. Registered on the `cluster` group by `ops_cli.py`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from contracts.commands import ApplyPlan, CheckCluster, ExtendLease, RepairCluster, Rolling

from . import durations
from .cli_bus import Bus
from .cli_support import CliError, WholeNumber, echo_json
from .client import ClusterInfo
from .cluster_reads_cli import cluster_read
from .ops_session import Options, Session, chosen, cluster_op, job_op, out, read_cluster
from .tables import print_rows


def seconds(text: str, option: str) -> float:
    """`90`, `90s`, `15m`, `2h`, `7d` -> seconds."""
    found = durations.parsed(text)
    if found is None:
        raise CliError(f"{option}: {text!r} is not a duration ({durations.EXAMPLES})")
    return found


def rolling_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--rolling N|P%` and `--tolerate N`: a batch of nodes at a time (docs/planner.md)."""
    f = click.option("--tolerate", type=WholeNumber(0), default=0, show_default=True,
                     help="with --rolling: nodes that may fail before the change stops and rolls back")(f)
    return click.option("--rolling", default=None, metavar="N|P%",
                        help="a batch of N nodes (or P% of them) at a time; the next once the previous is healthy")(f)


def parse_rolling(batch: str | None, tolerate: int) -> Rolling | None:
    if batch is None:
        if tolerate:
            raise CliError("--tolerate goes with --rolling")
        return None
    text = batch.strip()
    if text.isdigit() and int(text) >= 1:
        return Rolling(batch=int(text), tolerance=tolerate)
    if re.fullmatch(r"\d+(\.\d+)?%", text) and 0 < float(text[:-1]) <= 100:
        return Rolling(batch=text, tolerance=tolerate)
    if re.fullmatch(r"\d+(\.\d+)?%?", text):  # a number, out of range: say so, not that it is none
        raise CliError(f"--rolling: a batch is at least 1 node, or a percentage in (0, 100]; not {batch!r}")
    raise CliError(f"--rolling: {batch!r} is neither a number of nodes nor a percentage (e.g. 2, 25%)")


@click.command("apply")
@click.argument("plan_id")
@job_op
async def apply(plan_id: str, opts: Options) -> None:
    """Run the plan a dry run printed (PLAN_ID), exactly; refused if the cluster or the catalog changed since."""
    async with Session(opts) as s:
        await s.execute(ApplyPlan(plan_id=plan_id))


@click.command("extend-lease")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--add", "add", default=None, help="how much longer (e.g. 2h, 7d; default: the template's step)")
@click.option("--until", default=None, help="until when (ISO 8601 with a time zone)")
@click.option("--if-version", type=WholeNumber(1), default=None, help="refuse unless the cluster is at this version (`cluster show` prints it)")
@job_op
async def extend_lease(cluster_ref: str, add: str | None, until: str | None, opts: Options) -> None:
    """Move CLUSTER's lease expiry later, within its template's step and max."""
    try:
        when = datetime.fromisoformat(until) if until else None
    except ValueError:
        raise CliError(f"--until: {until!r} is not an ISO 8601 time") from None
    if when is not None and when.tzinfo is None:
        raise CliError("--until needs a time zone (e.g. 2026-12-01T12:00:00+00:00)")
    async with Session(opts) as s:
        cmd = ExtendLease(cluster_id=(await s.cluster(cluster_ref)).id, by_s=seconds(add, "--add") if add else None,
                          until=when)  # --if-version: Session.stamp
        await s.execute(cmd)


@click.command("check")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.argument("services", nargs=-1)
@cluster_op
async def check(cluster_ref: str, services: tuple[str, ...], opts: Options) -> None:
    """Ask every node for the state of SERVICES (default: all with a `status` action); with
    --wait, print what was found and the drift."""
    async with Session(opts) as s:
        c = await s.cluster(cluster_ref)
        await s.execute(CheckCluster(cluster_id=c.id, services=chosen(services, "SERVICES", "all of them")))
        if opts.wait and not opts.dry_run and not opts.as_json:
            print_drift(await s.cluster(c.id, "read"))


@click.command("repair")
@click.argument("cluster_ref", metavar="CLUSTER")
@rolling_options
@cluster_op
async def repair(cluster_ref: str, rolling: str | None, tolerate: int, opts: Options) -> None:
    """Re-run what the last check says is missing: start what should run (install and configure
    again where it failed, unless something it needs was down too), stop what should not,
    restart what runs an older config, configure and restart what is stale (an expand or a
    shrink since), reconnect a node whose state is unknown (its provider confirms it). With
    --rolling, a batch of nodes at a time, those it only brings up first."""
    spec = parse_rolling(rolling, tolerate)
    async with Session(opts) as s:
        await s.execute(RepairCluster(cluster_id=(await s.cluster(cluster_ref)).id, rolling=spec))


def print_drift(c: ClusterInfo) -> None:
    if c.status == "deleted":  # (it said "no service state observed yet: `muster cluster check`", which is refused)
        out.print(f"cluster {c.name} ({c.id}) is deleted: no service runs on it")
        return
    rows = []
    for node in c.nodes:  # every observed one, and every one meant to be stopped
        for service in sorted(node.services):
            state, off = c.observed.get((node.id, service)), (node.id, service) in c.stopped
            if state is not None or off:
                # NODE is the id `--nodes` takes and `cluster show` lists (it showed the host name).
                rows.append([node.id, c.hostnames.get(node.id) or node.hostname, service, "stopped" if off else "running",
                             state or "not checked"])
    if c.observed or c.stopped:
        print_rows(f"services of {c.name}: desired and observed", ["node", "hostname", "service", "desired", "observed"], rows)
        unseen = Counter(s for node in c.nodes for s in node.services
                         if (node.id, s) not in c.observed and (node.id, s) not in c.stopped)
        if unseen:  # else a 5-node cluster's table shows one node and the reader wonders where the others went
            out.print("never observed (a check asks only the services with a `status` action): "
                      + ", ".join(f"{s} on {n} node{'s' if n > 1 else ''}" for s, n in sorted(unseen.items())))
    else:
        out.print("no service state observed yet: `muster cluster check CLUSTER`")
    if not c.drift:
        out.print("no drift: every observed service is as it should be")
        return
    out.print(f"drift ({len(c.drift)}):")
    for d in c.drift:
        action = {"start": "start it", "reinstall": "install, configure and start it again", "stop": "stop it",
                  "restart": "restart it, to run the cluster's config",
                  "reconfigure": "configure and restart it: its config was written for another config or other members "
                                 "(an expand or a shrink since)",
                  "reconnect": "confirm the node through its provider (which brings its ssh back where it can), start it, "
                               "check it"}.get(d.repair, "unknown: check again, or look at the node")
        if d.after:  # the repair's own reason for not installing it again
            action = f"start it after {', '.join(d.after)}, down too (it may have failed for that alone)"
        out.print(f"  {d.node} {d.service}: {d.observed}, should be {d.desired} -> {action}")
        # why: "unknown" alone left the reader to dig in the job's history; a stopped one's status says how it
        # found it so (`redis on 10.213.0.3 does not answer: ... Connection refused`: examples/catalog-real)
        if d.observed in ("unknown", "failed", "stopped") and (said := c.observed_detail.get((d.node, d.service))):
            out.print(f"    its status said: {said}")
    if any(d.repair for d in c.drift):
        out.print(f"repair: muster cluster repair {c.name}")


@cluster_read("drift")
async def drift(cluster_ref: str, bus: Bus, as_json: bool) -> None:
    """What the last checks found on CLUSTER, and how it differs from what should be."""
    c = await read_cluster(bus, cluster_ref)
    if as_json:
        echo_json({"cluster": c.id, "drift": [d.to_json() for d in c.drift],
                   "stopped": [{"node": n, "service": s} for n, s in sorted(c.stopped)],
                   "observed": [{"node": n, "service": s, "state": st, "detail": c.observed_detail.get((n, s), "")}
                                for (n, s), st in sorted(c.observed.items())]})
        return
    print_drift(c)


COMMANDS = (apply, extend_lease, check, repair, drift)
