"""`muster demo --real`: a NATS cluster that really forms, on namespace nodes (docs/plugins.md).

Three nodes, each a Linux namespace with its own address and sshd, run nats-server from the
catalog in `examples/catalog-real/`; the servers themselves are asked how many members they see.
Expanded to five, the old nodes' configs are stale (the drift says so) and are reconfigured with
the new peer list (macros) one at a time. A
configure with a bad setting fails and rolls back while the servers go on; `muster cluster check`
reads the state from the processes; a server killed by hand is drift, and repair starts it again;
shrunk to three, the rest are stale again and a repair writes their configs; delete leaves nothing behind. Without root the nodes are localhost nodes on their
own loopback addresses (the same scenario, shell flavour).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console

from contracts.catalog import Catalog
from contracts.commands import (
    Accepted,
    CancelJob,
    CheckCluster,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    ExpandCluster,
    RepairCluster,
    Rolling,
    ShrinkCluster,
)
from muster.bus.eventstore import EventStore
from muster.bus.server import nats_server_binary
from muster.catalog.files import load_sources
from muster.catalog.store import apply_catalog
from muster.client import MusterClient, MusterError, Outcome
from muster.readmodel.clusters import ClusterInfo
from muster.tables import print_rows

REAL_CATALOG = Path(__file__).resolve().parents[2] / "examples" / "catalog-real"
TIMEOUT_S = 600.0


def real_catalog(prefix: str, base_dir: Path, *, provider: str = "ns", folder: Path = REAL_CATALOG) -> Catalog:
    """The real catalog with this run's node prefix and directory, and the project's own nats-server."""
    if not (folder / "catalog.yaml").is_file():
        raise FileNotFoundError(f"{folder}/catalog.yaml not found: `muster demo --real` runs from a checkout of muster")
    loaded = load_sources([folder / "catalog.yaml"])
    if loaded.problems:
        raise ValueError("; ".join(str(p) for p in loaded.problems))
    catalog = loaded.catalog
    ns = catalog.providers["ns"]
    catalog.providers["ns"] = ns.model_copy(update={"provisioner": {**ns.provisioner, "prefix": prefix, "base_dir": str(base_dir)}})
    for name, template in catalog.clustertemplates.items():
        defaults = template.defaults.model_copy(update={"provider": provider, "config": binary_config(template.defaults.config)})
        catalog.clustertemplates[name] = template.model_copy(update={"defaults": defaults})
    return catalog


def binary_config(config: dict[str, Any]) -> dict[str, Any]:
    if "nats" not in config:
        return config
    return {**config, "nats": {**config["nats"], "binary": str(nats_server_binary())}}


def members(ip: str, timeout: float = 5.0) -> int | None:
    """How many members the nats-server on `ip` says its cluster has (itself and its routes);
    None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{ip}:8222/routez", timeout=timeout) as answer:
            routez = json.load(answer)
    except OSError:
        return None
    return len({r.get("remote_name") or r.get("ip") for r in routez.get("routes") or []}) + 1


async def members_by_node(info: ClusterInfo) -> dict[str, int | None]:
    ips = {n.id: info.ipaddresses.get(n.id, {}).get("access_v4", "") for n in info.nodes}  # the nodes it has now
    counts = await asyncio.gather(*(asyncio.to_thread(members, ip) for ip in ips.values()))
    return dict(zip(ips, counts, strict=True))


def kill_member(ip: str) -> list[int]:
    """SIGKILL the nats-server serving `ip`, as an operator would by hand: the one whose config
    (`nats.conf` in its working directory, seen through its own mounts) listens there."""
    killed = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"nats-server") or f'listen: "{ip}:4222"' not in (proc / "cwd" / "nats.conf").read_text():
                continue
            os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        killed.append(int(proc.name))
    return killed


def fresh_prefix() -> str:
    return "md" + secrets.token_hex(2)


async def run(client: MusterClient, command: Any, tenant: str, console: Console | None = None, what: str = "") -> Outcome:
    outcome = await client.run(command, tenant=tenant, timeout=TIMEOUT_S)
    if console is not None:
        said(console, outcome, what or command.type)
    return outcome


def said(console: Console, outcome: Outcome, what: str) -> None:
    state = "succeeded" if outcome.succeeded else f"ended {outcome.final.type}: {outcome.reason}"
    console.print(f"{what}: job {outcome.reply.job_id} {state}")


def show_members(info: ClusterInfo, counts: dict[str, int | None], console: Console) -> None:
    """As every command's tables (muster.tables): in a pipe, plain columns with every value in full."""
    named = {n.id: n.hostname for n in info.nodes}  # the layout's, where the provider reports none (localhost nodes)
    rows = [[node, info.hostnames.get(node) or named.get(node, ""), info.ipaddresses.get(node, {}).get("access_v4", ""),
             "not answering" if count is None else str(count),
             ", ".join(f"{svc} {state}" for (n, svc), state in info.observed.items() if n == node)]
            for node, count in sorted(counts.items())]
    print_rows(f"cluster {info.name}: what each nats-server says", ["node", "hostname", "address", "members seen", "observed"],
               rows, console, heading=True)


async def scenario(client: MusterClient, tenant: str, console: Console, *, nodes: int = 3, grow_to: int = 5,
                   provider: str = "ns", base_dir: Path, prefix: str = "", kept: str = "") -> None:
    """The story of examples/catalog-real/README.md on a NATS cluster, deleted however it ends;
    with `kept` (what to say), the cluster stays after the story until the demo is interrupted
    (`muster demo --real --keep`: it was deleted at once, the flag taken and ignored)."""
    prefix = prefix or fresh_prefix()
    await apply_catalog(EventStore(client.nc), tenant, real_catalog(prefix, base_dir, provider=provider), by="demo")
    console.print(f"real catalog loaded: NATS on {provider!r} nodes (prefix {prefix})")
    # accepted before it is waited for: an interruption in the create still deletes the cluster
    accepted = await client.submit(CreateCluster(name=f"nats-{prefix}", template="nats-cluster", nodes=nodes, requested_by="demo"),
                                   tenant=tenant)
    if not isinstance(accepted, Accepted):  # (a create is an operation: submit raises on a refusal)
        raise MusterError(f"create answered {accepted.type}")
    cluster_id = accepted.cluster_id
    try:
        created = Outcome(accepted, await client.wait(accepted.job_id, tenant=tenant, timeout=TIMEOUT_S))
        said(console, created, f"create {nodes} nodes")
        if not created.succeeded:
            return
        info = await client.cluster(cluster_id, tenant=tenant)
        show_members(info, await members_by_node(info), console)
        grown = await run(client, ExpandCluster(cluster_id=cluster_id, nodes=grow_to, requested_by="demo"), tenant, console,
                          f"expand to {grow_to}")
        if not grown.succeeded:
            return
        info = await client.cluster(cluster_id, tenant=tenant)
        print_drift(console, info)  # the old nodes' configs name the three of before: stale
        await run(client, ConfigureCluster(cluster_id=cluster_id, config=info.config, restart=True, rolling=Rolling(batch=1),
                                           requested_by="demo"), tenant, console, "reconfigure with the new peers, one node at a time")
        await run(client, CheckCluster(cluster_id=cluster_id, requested_by="demo"), tenant, console, "check")
        info = await client.cluster(cluster_id, tenant=tenant)
        show_members(info, await members_by_node(info), console)
        await misbehave(client, tenant, console, info)
        await run(client, ShrinkCluster(cluster_id=cluster_id, nodes=nodes, requested_by="demo"), tenant, console, f"shrink to {nodes}")
        info = await client.cluster(cluster_id, tenant=tenant)
        show_members(info, await members_by_node(info), console)
        print_drift(console, info)  # the rest still name the two nodes gone
        await run(client, RepairCluster(cluster_id=cluster_id, requested_by="demo"), tenant, console, "repair the stale configs")
        if kept:
            console.print(f"kept running: cluster {info.name}, {kept}; Ctrl-C deletes it and stops everything.")
            await asyncio.Event().wait()  # until Ctrl-C (or a service dies): the delete below follows
    finally:
        await delete(client, tenant, console, cluster_id)


async def delete(client: MusterClient, tenant: str, console: Console, cluster_id: str) -> None:
    """The demo's nodes are real: its cluster goes however the demo ends. Interrupted (Ctrl-C), the
    demo was waiting for a job, and a delete is refused while one runs (`busy`): that job is
    cancelled first (its changes rolled back), then the cluster deleted. Until session 32 the
    delete was refused, and the namespaces, sshds and nats-servers stayed after "everything
    stopped." (`muster demo` then sweeps its prefix too: cli.py)."""
    command = DeleteCluster(cluster_id=cluster_id, requested_by="demo")
    for _ in range(3):  # a job that ended meanwhile, or one accepted just after the first look
        try:
            await run(client, command, tenant, console, "delete")
            return
        except MusterError as refused:
            info = await client.cluster(cluster_id, tenant=tenant)
            if info.status == "deleted":  # (a create cancelled: its rollback deleted every node)
                console.print(f"cluster {info.name} is deleted")
                return
            job = info.job_id
            console.print(f"{refused}: cancelling its job {job} first")
        with contextlib.suppress(MusterError):  # (it ended already: the delete is tried again)
            await run(client, CancelJob(job_id=job, requested_by="demo"), tenant, console, "cancel")
    console.print(f"cluster {cluster_id} not deleted: its nodes go as the demo stops (namespace nodes by the demo's prefix)")


def print_drift(console: Console, info: ClusterInfo) -> None:
    for d in info.drift:
        console.print(f"drift: node {d.node} {d.service} is {d.observed}, should be {d.desired} (repair: {d.repair})")


async def misbehave(client: MusterClient, tenant: str, console: Console, info: ClusterInfo) -> None:
    """A configure that fails (the servers go on), then a server killed by hand: drift, repaired."""
    cluster_id = info.id
    bad = {**info.config, "nats": {**info.config["nats"], "settings": {"max_payload": "lots"}}}
    await run(client, ConfigureCluster(cluster_id=cluster_id, config=bad, restart=True, rolling=Rolling(batch=1), requested_by="demo"),
              tenant, console, "configure with a bad setting (max_payload: lots)")
    counts = await members_by_node(await client.cluster(cluster_id, tenant=tenant))
    console.print(f"members each server sees after it: {', '.join(str(n) for n in counts.values())}")
    victim = sorted(info.ipaddresses)[1]
    ip = info.ipaddresses[victim]["access_v4"]
    console.print(f"killed by hand: nats-server of node {victim} on {ip} (pid {', '.join(map(str, kill_member(ip))) or 'none found'})")
    await run(client, CheckCluster(cluster_id=cluster_id, requested_by="demo"), tenant, console, "check")
    print_drift(console, await client.cluster(cluster_id, tenant=tenant))
    await run(client, RepairCluster(cluster_id=cluster_id, requested_by="demo"), tenant, console, "repair")
    counts = await members_by_node(await client.cluster(cluster_id, tenant=tenant))
    console.print(f"members each server sees after it: {', '.join(str(n) for n in counts.values())}")


async def sweep_left(prefix: str, base_dir: Path, console: Console) -> None:
    """After the deployment has stopped (no provisioner makes a node any more), what the demo's
    namespace nodes left goes by the demo's prefix, its own: nothing after a delete that finished;
    after one that did not (a demo stopped hard, a delete that failed, a create accepted as the demo
    was stopped), the namespaces, veths, bridge, processes and directories."""
    from services.provisioner.plugins.builtin.namespaces import system

    if system.root_refusal():
        return  # (localhost nodes: the provisioner's stop removes them)
    removed = await system.sweep(prefix, [base_dir])
    if removed:
        console.print(f"removed what the demo's nodes had left: {', '.join(removed)}")
