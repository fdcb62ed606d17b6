"""Pools as one tenant may see them (pure; the tracker's read model of pools).

The fold is the Pool aggregate itself (`pool.py`: a second fold of the same events could only
drift from it; readers fold with `muster.bus.repository.fold`). What this adds is the view: pools are
shared by tenants, so a tenant sees every host and the whole waiting line, but not whose
other hosts and requests they are: another tenant's holder is `{"tenant": null}` and its place
in line shows only its size and score.
"""

from __future__ import annotations

from typing import Any

from contracts.pools import grants_in
from contracts.records import Recorded

from .policy import priority_of
from .pool import Pool, hosts, ordinal

HIDDEN_REQUEST_FIELDS = ("tenant", "cluster_id", "job_id", "request_id", "by", "deadline")


def pools_there(names: list[str], operator: bool = True) -> str:
    """What follows "no pool X: " wherever one nobody made is named (the bus, the API, the
    console): the pools there are, or how one is made: the command to an operator (`operator`:
    the pool service's callers, a super admin, a service), to a tenant's people who makes one
    (they may not run it)."""
    if names:
        return f"the pools are {', '.join(sorted(names))}"
    if operator:
        return "there are no pools yet (`muster pool add-hosts NAME FILE` makes one)"
    return "there are no pools yet (the deployment's operators make them: ask yours for one)"


def host_for(host: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    holder = host.get("holder")
    if tenant is None or holder is None or holder.get("tenant") == tenant:
        return host
    return {**host, "holder": {"tenant": None, "cluster_id": None, "node_id": None, "request_id": None}}


def queue_for(queue: list[dict[str, Any]], tenant: str | None) -> list[dict[str, Any]]:
    if tenant is None:
        return queue
    return [q if q["tenant"] == tenant else {**q, **{k: None for k in HIDDEN_REQUEST_FIELDS}} for q in queue]


def pool_view(pool: Pool, tenant: str | None, hosts: bool = True) -> dict[str, Any]:
    """Summary, terms (only this tenant's own quota), the waiting line and, with `hosts`,
    every host. `tenant=None`: everything (administrators)."""
    summary = pool.summary()
    if tenant is not None:
        terms = dict(summary["terms"])
        terms["tenants"] = {t: v for t, v in terms["tenants"].items() if t == tenant}
        summary = {**summary, "terms": terms}
    view = {**summary, "queue": queue_for(pool.queue_view(), tenant)}
    if hosts:
        view["hosts_detail"] = [host_for(h, tenant) for h in pool.hosts_view()]
    return view


def terms_for(pool: Pool, tenant: str) -> dict[str, Any]:
    """A tenant's terms of the pool with what counts against them now (the console's pool
    page): its priority, its quotas (None: no limit), the hosts it holds and waits for, the
    clusters that hold or wait for hosts, and the per-job limit."""
    quota = pool.terms.tenants.get(tenant)
    held, waiting = pool.nodes_of(tenant)
    return {"tenant": tenant, "policy": pool.terms.policy, "priority": priority_of(pool.terms, tenant),
            "max_nodes": quota.max_nodes if quota else None, "max_clusters": quota.max_clusters if quota else None,
            "job_limit": pool.terms.job_limit, "held": held, "waiting": waiting, "clusters": len(pool.clusters_of(tenant))}


def resources_line(wanted: dict[str, Any], ended: bool = False) -> str:
    """`waiting for 3 hosts of pool lab: 2nd in line` (docs/pools.md): a job's `resources`.
    `ended`: the job is over (a job whose deadline passed was said to be `waiting for 3 hosts
    ...: not in line`, beside the error that it had stopped waiting)."""
    what = f"{hosts(wanted['hosts'])} of pool {wanted['pool']}"
    if wanted.get("granted"):
        return f"granted {what}"
    if ended:
        return f"asked for {what}: none granted before the job ended"
    position = wanted.get("position")
    where = f"{ordinal(position)} in line" if position else "not in line (the pool has not taken the request yet, or it ended)"
    return f"waiting for {what}: {where}"


def change_for(pool: Pool, recorded: Recorded, tenant: str | None) -> dict[str, Any]:
    """One SSE `change`: what happened (the event's type, its hosts) and where things stand
    now (summary and waiting line); the event's own fields are left out, they name other
    tenants' requests."""
    touched: list[str] = []
    event = recorded.event
    for name in ("host_ids", "returned"):
        touched += list(getattr(event, name, []) or [])
    if getattr(event, "host_id", None):
        touched.append(event.host_id)
    touched += [a.host_id for grant in grants_in(event) for a in grant.assignments]
    touched += [h.id for h in getattr(event, "hosts", []) or []]
    hosts = [host_for(pool.book.hosts[h].view(), tenant) if h in pool.book.hosts else {"id": h, "state": "removed"}
             for h in dict.fromkeys(touched)]
    return {"seq": recorded.seq, "type": recorded.type, "time": recorded.time.isoformat(), "hosts": hosts,
            "summary": pool_view(pool, tenant, hosts=False)}
