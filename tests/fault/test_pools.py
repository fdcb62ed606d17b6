"""Scenario 7: three tenants of different priority ask a pool of SSH hosts for three times what it
has; clusters are deleted over time; the planner is killed -9 in the middle of an assignment.
Real processes (`muster up`'s children: planner, solver, provisioner, tracker, pool service),
hosts reached over real SSH. Then, over the whole log: requests were served in policy order,
no host was ever lent twice, quotas held at every step, and the state rebuilt from the log
equals what the services report (docs/pools.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster, Rejected
from contracts.events import JobSucceeded
from contracts.pool_commands import AddHosts, ConfigurePool, RemoveHost, ResetHost
from contracts.pools import PoolTerms, TenantTerms
from muster.bus.connect import principal_of
from muster.bus.eventstore import EventStore, Recorded
from muster.catalog.files import load_catalog
from muster.demo.pool_hosts import LocalPoolHosts
from services.pool import client as pools

from .harness import ROOT, FaultStack

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240)]
TENANTS = {"ops": 1, "gold": 3, "silver": 2, "bronze": 1}
HOSTS = 6
WAIT_S = 60  # for the pool to take the waiting requests (about a second when nothing is wrong)
NODES = 2  # per cluster: 3 tenants x 3 clusters x 2 nodes = 18 = 3 x the pool


async def _pool_events(store: EventStore) -> list[Recorded]:
    return await store.read(subjects.pool_events("lab"))


async def test_contention_in_policy_order_with_quotas_and_a_planner_killed_mid_assignment(tmp_path: Path) -> None:
    hosts = LocalPoolHosts(tmp_path / "hosts")
    try:
        specs = [await hosts.start(f"h{i}", cpu=8, memory="16G", labels=["ssd"]) for i in range(HOSTS)]
        async with await FaultStack.single(tmp_path, tenants=",".join(TENANTS)) as fs:
            await _scenario(fs, hosts, specs)
    finally:
        await hosts.stop()


async def _scenario(fs: FaultStack, hosts: LocalPoolHosts, specs: list[Any]) -> None:
    assert fs.nc is not None
    store = EventStore(fs.nc)
    catalog = load_catalog(ROOT / "muster" / "demo" / "pool-catalog")
    lab = catalog.providers["lab"]
    catalog.providers["lab"] = lab.model_copy(update={"provisioner": {**lab.provisioner, "identityfile": str(hosts.key_path)}})
    for tenant in TENANTS:
        await fs.load_catalog(tenant, catalog)
    await pools.send(fs.nc, "lab", AddHosts(hosts=specs, requested_by="admin"))
    await pools.send(fs.nc, "lab", ConfigurePool(requested_by="admin", terms=PoolTerms(tenants={
        "ops": TenantTerms(priority=1), "gold": TenantTerms(priority=3),
        "silver": TenantTerms(priority=2, max_clusters=2), "bronze": TenantTerms(priority=1, max_nodes=4)})))

    # The pool full: three clusters of another tenant hold every host.
    fillers = await asyncio.gather(*(fs.client.run(CreateCluster(name=f"fill{i}", template="app-on-pool", nodes=NODES),
                                                   tenant="ops", timeout=120) for i in range(3)))
    assert all(f.succeeded for f in fillers), [f.reason for f in fillers]
    active: list[tuple[str, str]] = [("ops", f.reply.cluster_id) for f in fillers]

    # Bad input to the real pool service, refused with its reason and nothing recorded.
    before = len(await _pool_events(store))
    for command, reason in [
        (ResetHost(host_id="h0"), "h0 is assigned; only a host in error can be reset"),
        (RemoveHost(host_id="h9"), "no host 'h9' in pool lab"),
        (AddHosts(hosts=specs[:1]), "already in pool lab: h0"),
    ]:
        with pytest.raises(pools.PoolRejected, match=reason):
            await pools.send(fs.nc, "lab", command)
    raw = await fs.nc.request(subjects.pool_command(principal_of(fs.nc), "lab", "add-hosts"), b'{"type": "AddHosts", "hosts": [{"id": "x", '
                              b'"address": "a", "host_keys": ["ssh-ed25519 AAAA"], "properties": {"cpu": "many"}}]}', timeout=10)
    assert b"Rejected" in raw.data and b"cpu" in raw.data
    after = [r.type for r in (await _pool_events(store))[before:]]
    assert set(after) <= {"RequestClosed"}, after  # the fillers' jobs closing their requests, nothing else

    # Three of each, in the order opposite to the policy's: every one waits.
    accepted: dict[str, list[Accepted]] = {t: [] for t in TENANTS}
    refused: dict[str, list[str]] = {t: [] for t in TENANTS}
    for tenant in ("bronze", "silver", "gold"):
        for i in range(3):
            reply = await fs.client.send(tenant, CreateCluster(name=f"{tenant}{i}", template="app-on-pool", nodes=NODES))
            if isinstance(reply, Rejected):
                refused[tenant].append(reply.reason)
            else:
                assert isinstance(reply, Accepted)
                accepted[tenant].append(reply)
    wanted = [a.job_id for t in ("bronze", "silver", "gold") for a in accepted[t]]
    tenant_of = {a.job_id: t for t in accepted for a in accepted[t]}

    def unanswered(evs: list[Recorded]) -> set[str]:
        return set(wanted) - {e.event.request.job_id for e in evs if e.type == "RequestAccepted"} - set(_refusals(evs, wanted))

    try:
        waiting = await fs.follow(subjects.pool_events("lab"), lambda evs: not unanswered(evs), timeout=WAIT_S)
    except TimeoutError:
        left = unanswered(await _pool_events(store))
        raise AssertionError(f"the pool took no request of {len(left)} jobs within {WAIT_S} s:\n" + "\n".join(
            [f"{job} ({tenant_of[job]}): {await fs._last_events(job, tenant_of[job])}" for job in sorted(left)])) from None
    by_pool = _refusals(waiting, wanted)
    # Silver's and bronze's third creates exceed their quotas: refused at admission, or (when
    # their first requests had not reached the pool yet) by the pool as it took the request.
    # Either way with the reason, and nothing else is refused.
    reasons = {t: refused[t] + [by_pool[a.job_id] for a in accepted[t] if a.job_id in by_pool] for t in accepted}
    assert reasons["gold"] == []
    assert reasons["silver"] == ["tenant silver may use pool lab for 2 clusters and already uses it for 2"]
    assert len(reasons["bronze"]) == 1 and "tenant bronze may hold 4 hosts of pool lab" in reasons["bronze"][0]

    # Free the pool over time: delete the oldest cluster; the best waiting one gets its hosts.
    # The planner is killed -9 right after the pool records the second of these grants.
    killed = asyncio.get_running_loop().create_future()
    grants = 0

    async def on_pool_event(msg: Any) -> None:
        nonlocal grants
        kind = (msg.headers or {}).get("Muster-Type")
        if kind == "HostsGranted" or (kind == "HostsReleased" and json.loads(msg.data).get("granted")):
            grants += 1  # a grant alone, or with the release that made it (HostsReleased v2)
            if grants == 2 and not killed.done():
                killed.set_result(await fs.kill("planner"))
                await fs.restart("planner")

    sub = await fs.nc.subscribe(subjects.pool_events("lab"), cb=on_pool_event)
    served: list[str] = []
    open_jobs = {a.job_id: (t, a.cluster_id) for t in accepted for a in accepted[t] if a.job_id not in by_pool}
    while open_jobs:
        tenant, cluster_id = active.pop(0)
        gone = await fs.client.run(DeleteCluster(cluster_id=cluster_id), tenant=tenant, timeout=120)
        assert gone.succeeded, gone.reason
        done = await _next_success(fs, open_jobs)
        served.append(open_jobs[done][0])
        active.append(open_jobs.pop(done))
    await sub.unsubscribe()
    assert killed.done(), "the planner was never killed"

    # Served by urgency x priority, then arrival: gold, then silver, then bronze.
    assert served == sorted(served, key=lambda t: -TENANTS[t]), served
    report = await fs.check()
    report.assert_ok()
    assert report.compared["pools"] == 1


def _refusals(events: list[Recorded], job_ids: list[str]) -> dict[str, str]:
    return {e.event.request_id: e.event.reason for e in events if e.type == "RequestRefused" and e.event.request_id in job_ids}


async def _next_success(fs: FaultStack, open_jobs: dict[str, tuple[str, str]]) -> str:
    """The first of the open creates to end (each must succeed)."""
    waits = {asyncio.ensure_future(fs.wait_final(job_id, tenant=t, timeout=120)): job_id for job_id, (t, _) in open_jobs.items()}
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    first = done.pop()
    assert isinstance(first.result(), JobSucceeded), first.result()
    return waits[first]
