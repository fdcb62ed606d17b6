"""Invariant 5 of the fault checker (invariants.py): resource pools, over the WHOLE log.

- No host is ever lent twice: replaying each pool's events one by one, every host a grant hands
  out is free (unassigned, held by nobody, not ambiguous, not in error) just before the grant.
- Quotas hold at every step: a tenant with `max_nodes` never holds and waits for more hosts,
  one with `max_clusters` never uses the pool for more clusters.
- The pool rebuilt from the log equals what a pool service reports (`ShowPool`), when one runs,
  at the log sequence the service reports.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from nats.aio.client import Client

from contracts import subjects
from contracts.pool_commands import ShowPool
from contracts.pools import grants_in
from muster.bus.eventstore import EventStore, Recorded
from muster.bus.repository import fold, log_seq, rebuild
from services.pool import client as pools
from services.pool.domain.pool import Pool


def pool_problems(log: list[Recorded]) -> tuple[dict[str, Pool], list[str]]:
    """Replay every pool; returns the pools and every violation found on the way."""
    by_pool: dict[str, list[Recorded]] = defaultdict(list)
    for r in log:
        if r.subject.startswith(f"{subjects.EVT}.{subjects.SYSTEM}.pool."):
            by_pool[r.subject.rsplit(".", 1)[1]].append(r)
    problems: list[str] = []
    rebuilt: dict[str, Pool] = {}
    for name, history in by_pool.items():
        pool: Any = None
        for r in history:
            # A grant takes free hosts only; a release's own grants (HostsReleased v2) may take
            # the hosts it frees, unless they stay in error.
            freed = set(r.event.host_ids) if r.type == "HostsReleased" else set()
            for grant in grants_in(r.event) if pool is not None else []:
                for a in grant.assignments:
                    host = pool.book.hosts.get(a.host_id)
                    if host is None or not (host.free or (a.host_id in freed and host.state != "error" and not host.ambiguous)):
                        problems.append(f"pool {name} seq {r.seq}: host {a.host_id} granted to {grant.request_id} "
                                        f"while {host.view() if host else 'unknown'}")
            pool = fold(Pool, pool, r)
            problems += _quota_problems(name, pool, r.seq)
        rebuilt[name] = pool
    return rebuilt, problems


def _quota_problems(name: str, pool: Pool, seq: int) -> list[str]:
    out = []
    for tenant, terms in pool.terms.tenants.items():
        held: dict[str, int] = dict(pool.book.held_by_tenant.get(tenant, {}))
        if terms.max_nodes is not None and sum(held.values()) + pool.requests.waiting_nodes[tenant] > terms.max_nodes:
            out.append(f"pool {name} seq {seq}: tenant {tenant} holds and waits for more than {terms.max_nodes} hosts")
        clusters = set(held) | set(pool.requests.waiting_clusters.get(tenant, {}))
        if terms.max_clusters is not None and len(clusters) > terms.max_clusters:
            out.append(f"pool {name} seq {seq}: tenant {tenant} uses the pool for {len(clusters)} clusters")
    return out


async def compare_with_service(nc: Client, rebuilt: dict[str, Pool]) -> tuple[int, list[str]]:
    """Each pool as a pool service reports it, against the pool rebuilt from the log."""
    compared, problems = 0, []
    for name, pool in rebuilt.items():
        try:
            answer = await pools.send(nc, name, ShowPool(), timeout=5)
        except pools.NoPoolService:
            continue
        reported = answer.view or {}
        if reported.get("seq") != log_seq(pool):
            # The pool moved between the checker's read of the log and this answer (a request
            # closed after its job ended): compare at the point the service reports.
            history = await EventStore(nc).read(subjects.pool_events(name))
            at_that_point = rebuild(Pool, [r for r in history if r.seq <= int(reported.get("seq") or 0)])
            if at_that_point is None:
                problems.append(f"pool {name}: the service reports seq {reported.get('seq')!r}, before the pool's first event")
                continue
            pool = at_that_point
        mine = {**pool.summary(), "queue": pool.queue_view(), "hosts_detail": pool.hosts_view()}
        compared += 1
        for key in mine:
            if reported.get(key) != mine[key]:
                problems.append(f"pool {name}: {key} differs: the service says {reported.get(key)!r:.200}, "
                                f"the log {mine[key]!r:.200}")
    return compared, problems
