"""Taking a requester's facts (`muster.evt.<tenant>.poolreq.<pool>.<request-id>`) into the pool.

A fact says what the requester did; the pool decides what it means. Facts are taken in again
and again (redelivery; every delivery re-reads the request's whole short history, so facts of
one request are taken in their order even when two pool services share the work): each one
changes the pool at most once.
"""

from __future__ import annotations

from typing import Any

from contracts.pools import (
    PoolDynamicHostCreated,
    PoolHostsRequested,
    PoolNodesReported,
    PoolRequestCancelled,
    PoolRequestClosed,
)

from .pool import Pool

FACT_TYPES = ("PoolHostsRequested", "PoolRequestCancelled", "PoolNodesReported", "PoolDynamicHostCreated", "PoolRequestClosed")


def take(pool: Pool, tenant: str, request_id: str, fact: Any) -> str:
    """Apply one fact; returns what it did, for logs and answers."""
    if isinstance(fact, PoolHostsRequested):
        req = fact.request
        wrong = [what for what, have, want in (("tenant", req.tenant, tenant), ("pool", req.pool, pool.name),
                                               ("request id", req.request_id, request_id)) if have != want]
        if wrong:
            return pool.refuse(req, f"the request's {' and '.join(wrong)} do not match the subject it was written to")
        return pool.request(req)
    if isinstance(fact, PoolRequestCancelled):
        return "cancelled" if pool.cancel(request_id, by=fact.by, reason=fact.reason) else "nothing to cancel"
    if isinstance(fact, PoolNodesReported):
        changed = pool.report(tenant, fact)
        return f"{fact.status}: {', '.join(changed) or 'no host changed'}"
    if isinstance(fact, PoolDynamicHostCreated):
        if fact.holder.tenant != tenant:
            return "ignored: the holder's tenant does not match the subject"
        return pool.dynamic_host(fact.host, fact.holder, by=fact.by)
    if isinstance(fact, PoolRequestClosed):
        return "closed" if pool.close(request_id, by=fact.by, outcome=fact.outcome) else "nothing to close"
    return f"ignored: {getattr(fact, 'type', '?')} is not a requester's fact"
