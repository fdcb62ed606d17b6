"""Cluster leases on the service side: each lease's expiry is a timer (kind `lease`) armed from
the cluster's logged `ClusterLeaseChanged`, by the planner that owns the cluster, when it takes
the cluster in (create, `Planner.resume`) and whenever the lease or the cluster's job changes.
No loop looks for expired clusters.

At expiry the owner asks for the cluster's delete like any request (admission rules and all),
with a request id derived from the cluster and the expiry, so two planners or a restart ask
for one job. A cluster busy with a job when its lease ends is deleted when that job ends (the
end of a job arms the timer again; a lease in the past fires at once). The rules: docs/planner.md,
"Cluster leases"; the terms: `domain/leases.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from contracts.commands import Accepted, DeleteCluster, ExtendLease, LeaseExtended
from muster.ports.eventlog import ConcurrencyError

from .domain import leases as terms
from .domain.admission import Facts, Refused, template_of
from .domain.cluster import Cluster
from .state import PlannerState
from .timers import Timers

if TYPE_CHECKING:
    from .requests import RequestContext

log = structlog.get_logger("muster.planner")

KIND = "lease"
EXPIRY = "lease-expiry"
"""Who asks for the delete of an expired cluster (its `requested_by`)."""


def arm(timers: Timers, owns: Callable[[str, str], bool], cluster: Cluster) -> None:
    """(Re-)arm the cluster's expiry, or disarm it: a lease forever, a deleted cluster, one
    another planner owns."""
    key = (KIND, cluster.tenant, str(cluster.id))
    timers.disarm(key)
    if cluster.expires_at is not None and cluster.status != "deleted" and owns(cluster.tenant, str(cluster.id)):
        timers.arm(key, cluster.expires_at)


class LeaseExpiry:
    def __init__(self, clusters: dict[str, Cluster], timers: Timers, owns: Callable[[str, str], bool],
                 handle: Callable[[RequestContext], Awaitable[object]]) -> None:
        self.clusters, self.timers, self.owns, self.handle = clusters, timers, owns, handle
        timers.on(KIND, self.expired)

    async def expired(self, tenant: str, cluster_id: str) -> None:
        from .requests import RequestContext

        cluster = self.clusters.get(cluster_id)
        if cluster is None or cluster.expires_at is None or cluster.status == "deleted" or not self.owns(tenant, cluster_id):
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


# -- the requests: a new cluster's lease, an extension -------------------------------------------


def start(cluster: Cluster, facts: Facts, by: str, timers: Timers) -> None:
    """A new cluster's lease from its template (and the request's `lease_s`), recorded with
    the cluster's first events; none for a lease forever."""
    try:
        lease_terms = terms.terms_of(template_of(facts).administration)
    except ValueError as err:
        raise Refused(f"template {facts.command.template!r}: {err}", code="invalid", field="template") from None
    lease = terms.initial(lease_terms, facts.command.lease_s, timers.clock.now())
    cluster.change_lease(lease.expires_at, lease.max_at, lease.step_s, by)


async def extend(state: PlannerState, timers: Timers, owns: Callable[[str, str], bool], cluster: Cluster,
                 cmd: ExtendLease, by: str) -> LeaseExtended:
    """Record the cluster's later expiry (the admission rules ran) and arm its timer again."""
    if cmd.request_id and cmd.request_id in cluster.lease_requests and cluster.expires_at is not None:
        return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=cluster.expires_at, version=cluster.version)  # a retry
    current = terms.Lease(cluster.expires_at, cluster.lease_max_at, cluster.lease_step_s)
    until = terms.extended(current, timers.clock.now(), by_s=cmd.by_s, until=cmd.until)
    cluster.change_lease(until, cluster.lease_max_at, cluster.lease_step_s, by, cmd.request_id)
    try:
        await state.save_cluster(cluster)
    except ConcurrencyError:
        await state.reload_cluster(cluster.tenant, cmd.cluster_id)
        raise Refused(f"cluster {cmd.cluster_id!r} changed meanwhile: ask again", code="conflict") from None
    arm(timers, owns, cluster)
    log.info("lease extended", tenant=cluster.tenant, cluster=cmd.cluster_id, until=until.isoformat(), by=by)
    return LeaseExtended(cluster_id=cmd.cluster_id, expires_at=until, version=cluster.version)
