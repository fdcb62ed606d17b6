"""`muster demo --pool`: the demo on a pool of SSH hosts on this machine (docs/pools.md).

Four hosts (in-process SSH servers, each its own port and host key; two large with an SSD, two
small) go into the pool `lab`. A 3-node cluster takes the large one its database needs and both
small ones. A second cluster asks for a large and a small host: a large one is free, a small one
is not, so it is accepted at once and waits, first in line. Deleting the first cluster gives
its hosts back; the pool records the grant and the waiting cluster is built on them.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path
from typing import Any

import click
from nats.aio.msg import Msg
from rich.console import Console
from rich.text import Text

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected
from contracts.events import FINAL_JOB_EVENTS, JobSucceeded
from contracts.pool_commands import AddHosts, RemoveHost, ShowPool
from muster.bus.eventstore import EventStore
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from muster.client import MusterClient
from muster.demo.pool_hosts import LocalPoolHosts, NamespacePoolHosts
from muster.ops_session import follow
from muster.tables import print_rows
from services.pool import client as pools
from services.tracker.render import resources_line

from .supervisor import Deployment

POOL_CATALOG = Path(str(resources.files("muster.demo") / "pool-catalog"))
TIMEOUT_S = 600.0
HOSTS = {"lab-large-1": {"cpu": 8, "memory": "16G", "labels": ["ssd"]},
         "lab-large-2": {"cpu": 8, "memory": "16G", "labels": ["ssd"]},
         "lab-small-1": {"cpu": 2, "memory": "4G"},
         "lab-small-2": {"cpu": 2, "memory": "4G"}}


def show_pool(view: dict[str, Any], console: Console) -> None:
    """As every command's tables (muster.tables): in a pipe, plain columns, a holder on one line."""
    rows = [[h["id"], f"{h['address']}:{h['port']}", str(h["properties"]["cpu"]), ",".join(h["properties"]["labels"]),
             h["state"], f"{h['holder']['node_id']} of {h['holder']['cluster_id'][:8]}" if h["holder"] else ""]
            for h in view.get("hosts_detail", [])]
    print_rows(f"pool lab: {view['hosts']} hosts, {view['free']} free, {view['waiting']} waiting",
               ["host", "address", "cpu", "labels", "state", "held by node"], rows, console, heading=True)


async def scenario(deployment: Deployment, data_dir: Path, tenant: str, keep: bool, console: Console, real: bool = False) -> None:
    from services.provisioner.plugins.builtin.namespaces.system import root_refusal

    # --real: namespace nodes with Debian's sshd (root only); in-process SSH servers otherwise.
    refusal = root_refusal() if real else None
    if refusal:
        console.print(f"{refusal}: the pool's hosts are SSH servers on 127.0.0.1 instead")
    hosts = NamespacePoolHosts(data_dir / "pool-hosts") if real and not refusal else LocalPoolHosts(data_dir / "pool-hosts")
    try:
        specs = [await hosts.start(name, **props) for name, props in HOSTS.items()]
        # The super admin's token of the auth service `muster up` runs (a user's shell has none of its own).
        async with await MusterClient.connect(deployment.nats_url, token=deployment.admin_token(), data_dir=deployment.data_dir) as client:
            await _run(client, deployment, hosts, specs, tenant, keep, console)
    finally:
        await hosts.stop()


async def _run(client: MusterClient, deployment: Deployment, hosts: LocalPoolHosts, specs: list[Any], tenant: str,
               keep: bool, console: Console) -> None:
    catalog = load_catalog(POOL_CATALOG)
    lab = catalog.providers["lab"]
    # Absolute: a relative identityfile is the provisioner's own key folder's (docs/plugins.md), and
    # the data directory is relative when `muster demo --pool` runs without --data-dir.
    key = str(hosts.key_path.resolve())
    catalog.providers["lab"] = lab.model_copy(update={"provisioner": {**lab.provisioner, "identityfile": key}})
    await apply_catalog(EventStore(client.nc), tenant, catalog, by="demo")
    await clear_earlier_run(client, deployment.data_dir, console)
    answer = await pools.send(client.nc, "lab", AddHosts(hosts=specs, requested_by="demo"))
    where = "namespace nodes with their own sshd" if isinstance(hosts, NamespacePoolHosts) else "SSH servers on 127.0.0.1"
    console.print(f"{answer.message} ({where}: {', '.join(f'{h.address}:{h.port}' for h in specs)}; client key {hosts.key_path})")

    async def show(returned_by: str = "") -> None:
        """The pool; with `returned_by`, once no host is held by that cluster any more (its
        delete reports each node as it goes; the pool records each release)."""
        view = await _pool_view(client, returned_by)
        show_pool(view, console)

    await show()
    shop = await _create(client, tenant, "shop", 3, console)
    final = (await follow(client.events(shop.job_id), shop.job_id, "create", FINAL_JOB_EVENTS, timeout=TIMEOUT_S)).final
    _require(final, "create of shop")
    await show()

    blog = await _create(client, tenant, "blog", 2, console)
    waiting = await _until_waiting(client, tenant, blog.job_id)
    console.print("cluster blog: job ", blog.job_id, " is ", Text(waiting['state'], style="bold"), ": ", resources_line(waiting['resources']), sep="")
    await show()

    console.print("deleting shop: its hosts go back to the pool, and blog gets them")
    gone = await client.submit(DeleteCluster(cluster_id=shop.cluster_id, requested_by="demo"), tenant=tenant)
    assert isinstance(gone, Accepted)
    _require((await follow(client.events(gone.job_id), gone.job_id, "delete", FINAL_JOB_EVENTS, timeout=TIMEOUT_S)).final, "delete of shop")
    _require((await follow(client.events(blog.job_id), blog.job_id, "create", FINAL_JOB_EVENTS, timeout=TIMEOUT_S)).final, "create of blog")
    await show(returned_by=shop.cluster_id)
    if keep:
        console.print(f"blog is kept; the tracker is at {deployment.tracker_url} (GET /v1/pools/lab). Ctrl-C stops everything.")
        await _forever()
    gone = await client.submit(DeleteCluster(cluster_id=blog.cluster_id, requested_by="demo"), tenant=tenant)
    assert isinstance(gone, Accepted)
    _require((await follow(client.events(gone.job_id), gone.job_id, "delete", FINAL_JOB_EVENTS, timeout=TIMEOUT_S)).final, "delete of blog")
    await show(returned_by=blog.cluster_id)


async def clear_earlier_run(client: MusterClient, data_dir: Path, console: Console) -> None:
    """The hosts an earlier run of the demo on this data directory left in pool lab: SSH servers
    of that run, gone with it. Run again, the demo registered its new ones (other ports, other
    keys) under the same ids: every host ambiguous, lent to nobody, and the demo waited for hosts
    for 10 minutes (walk of session 27). Those nobody holds leave the pool; a host still held (a
    run stopped half-way, its clusters alive) stops the demo, naming the way out."""
    try:
        view = (await pools.send(client.nc, "lab", ShowPool())).view or {}
    except pools.PoolRejected:  # no pool lab yet: a first run
        return
    hosts = view.get("hosts_detail", [])
    held = sorted({h["holder"]["cluster_id"] for h in hosts if h["holder"]})
    if held:
        raise click.ClickException(
            f"pool lab in {data_dir} still lends hosts to clusters of an earlier `muster demo --pool` that did not finish "
            f"({', '.join(held)}): run the demo with another --data-dir, or delete them first (`muster cluster delete "
            f"{held[0]} --data-dir {data_dir}` while `muster up --data-dir {data_dir}` runs)")
    for h in hosts:
        await pools.send(client.nc, "lab", RemoveHost(host_id=h["id"], requested_by="demo",
                                                      reason="an earlier muster demo --pool's host: its SSH server is gone"))
    if hosts:
        console.print(f"pool lab: the {len(hosts)} hosts of an earlier run on {data_dir} removed (their SSH servers are gone)")


async def _create(client: MusterClient, tenant: str, name: str, nodes: int, console: Console) -> Any:
    reply = await client.send(tenant, CreateCluster(name=name, template="app-on-pool", nodes=nodes, requested_by="demo"))
    if isinstance(reply, Rejected):
        raise click.ClickException(f"create of {name} rejected: {reply.reason}")
    assert isinstance(reply, Accepted)
    console.print(f"create of {name} ({nodes} nodes) accepted at once: job {reply.job_id}")
    return reply


async def _until_waiting(client: MusterClient, tenant: str, job_id: str) -> dict[str, Any]:
    """The job's status once the pool has put its request in line (read from the log: the job's
    events say it asked, the pool's events where it stands; the second can come later)."""
    from services.tracker.app import Tracker

    store = EventStore(client.nc)
    changed = asyncio.Event()

    async def on_event(_: Msg) -> None:
        changed.set()

    subs = [await client.nc.subscribe(s, cb=on_event) for s in (subjects.job_events(tenant, job_id), subjects.pool_events("lab"))]
    try:
        while True:  # each turn waits for the job's or the pool's next event, with a deadline
            changed.clear()  # before the read: an event during it is not missed
            status = await Tracker(store, nc=store.nc).job_status(tenant, job_id)
            wanted = (status or {}).get("resources") or {}
            if status is not None and (wanted.get("position") or wanted.get("granted")):
                return status
            await asyncio.wait_for(changed.wait(), TIMEOUT_S)
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def _pool_view(client: MusterClient, returned_by: str) -> dict[str, Any]:
    sub = await client.nc.subscribe(subjects.pool_events("lab"))
    try:
        while True:  # each turn waits for the pool's next event, with a deadline
            view = (await pools.send(client.nc, "lab", ShowPool())).view or {}
            held = [h for h in view.get("hosts_detail", []) if h["holder"] and h["holder"]["cluster_id"] == returned_by]
            if not returned_by or not held:
                return view
            await sub.next_msg(timeout=TIMEOUT_S)
    finally:
        await sub.unsubscribe()


def _require(final: Any, what: str) -> None:
    if not isinstance(final, JobSucceeded):
        raise click.ClickException(f"{what} ended {final.type}: {getattr(final, 'reason', '')}")


async def _forever() -> None:
    import asyncio

    await asyncio.Event().wait()
