"""Cluster leases on the service side: the timer of each lease's expiry, the delete it asks for,
and extensions.

Each expiry is a timer (kind `lease`) armed from the cluster's logged `ClusterLeaseChanged`,
when the planner takes the cluster in (create, `Planner.resume`) and whenever the lease or the
cluster's job changes. No loop looks for expired clusters.

At expiry the owner asks for the cluster's delete like any request (admission rules and all),
with a request id derived from the cluster and the expiry, so two planners or a restart ask
for one job. A cluster busy with a job when its lease ends is deleted when that job ends (the
end of a job arms the timer again; a lease in the past fires at once). The rules: docs/planner.md,
"Cluster leases"; the terms: `domain/leases.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from contracts.commands import Accepted, DeleteCluster, ExtendLease, LeaseExtended
from muster.ports.eventlog import ConcurrencyError

from .domain import leases as terms
from .domain.admission import Refused
from .domain.cluster import Cluster
from .messages import RequestContext
from .state import PlannerState
from .timers import Timers

log = structlog.get_logger("muster.planner")

KIND = "lease"
EXPIRY = "lease-expiry"
"""Who asks for the delete of an expired cluster (its `requested_by`)."""


def arm(timers: Timers, cluster: Cluster) -> None:
    """(Re-)arm the cluster's expiry, or disarm it: a lease forever, a deleted cluster. (Whether
    this planner still acts for the cluster is asked when it falls due: `Planner.lease_expired`.)"""
    key = (KIND, cluster.tenant, str(cluster.id))
    timers.disarm(key)
    if cluster.expires_at is not None and cluster.status != "deleted":
        timers.arm(key, cluster.expires_at)


class LeaseExpiry:
    def __init__(self, clusters: dict[str, Cluster], timers: Timers,
                 handle: Callable[[RequestContext], Awaitable[object]]) -> None:
        self.clusters, self.timers, self.handle = clusters, timers, handle

    async def expired(self, tenant: str, cluster_id: str) -> None:
        """A lease's timer fell due for a cluster this planner acts for."""
        cluster = self.clusters.get(cluster_id)
        if cluster is None or cluster.expires_at is None or cluster.status == "deleted":
            return
        if cluster.expires_at > self.timers.clock.now():  # extended meanwhile (its timer is armed again)
            return
        command = DeleteCluster(cluster_id=cluster_id, request_id=f"lease-{cluster_id}-{int(cluster.expires_at.timestamp())}",
                                requested_by=EXPIRY)
        reply = await self.handle(RequestContext(tenant=tenant, verb="delete", body=command.model_dump_json().encode()))
        if isinstance(reply, Accepted):
            log.info("lease expired: cluster deleted", tenant=tenant, cluster=cluster_id, job=reply.job_id,
                     duplicate=reply.duplicate, expired=cluster.expires_at.isoformat())
        else:  # busy: its job's end arms the timer again; deleted meanwhile: nothing to do
            log.info("lease expired: delete not started now", tenant=tenant, cluster=cluster_id, reason=getattr(reply, "reason", ""))


# -- the requests: an extension -------------------------------------------


async def extend(state: PlannerState, timers: Timers, cluster: Cluster, cmd: ExtendLease, by: str) -> LeaseExtended:
    """Record the cluster's later expiry (the admission rules ran) and arm its timer again."""
    if cmd.request_id and cmd.request_id in cluster.lease_requests and cluster.expires_at is not None:
        return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=cluster.expires_at, version=cluster.version)  # a retry
    current = terms.Lease(cluster.expires_at, cluster.lease_max_at, cluster.lease_step_s)
    until = terms.extended(current, timers.clock.now(), by_s=cmd.by_s, until=cmd.until)
    cluster.change_lease(until, cluster.lease_max_at, cluster.lease_step_s, by, cmd.request_id)
    try:
        await state.save_cluster(cluster)
    except ConcurrencyError:  # (the save took the log's view)
        raise Refused(f"cluster {cmd.cluster_id!r} changed meanwhile: ask again", code="conflict") from None
    arm(timers, cluster)
    log.info("lease extended", tenant=cluster.tenant, cluster=cmd.cluster_id, until=until.isoformat(), by=by)
    return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=until, version=cluster.version)
