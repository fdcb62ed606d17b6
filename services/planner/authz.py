"""Who may ask for what: the planner's admission check for identities (docs/security.md).

The requester is the principal the request's subject names (the server lets no one else use it,
docs/decisions/0009); its grants come from the identity events (an IdentityView of this
process). `create` needs `write` on every cluster of the tenant; other cluster operations
`write` (or `execute` for start/stop/restart) on the cluster; job control `execute` on the job,
which a grant on its cluster covers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts import subjects
from contracts.identity import Scope
from services.auth.domain.authz import may, may_operate, plan_refusal, unmade_tenant
from services.auth.domain.state import IdentityState
from services.governance.domain import approvals

from .domain.admission import Refused
from .domain.job import Job
from .domain.operations import Operation
from .messages import RequestContext


class OperationAuthz:
    def __init__(self, state: IdentityState, job: Callable[[str], Job | None]) -> None:
        self.state = state
        self.job = job

    def __call__(self, ctx: RequestContext, op: Operation, command: Any) -> None:
        principal = self.state.principals.get(ctx.principal or subjects.ANONYMOUS)
        if principal is None:
            raise Refused(f"{ctx.principal!r} is not a known principal", code="forbidden")
        unmade = unmade_tenant(principal, self.state.tenants, ctx.tenant)
        if unmade:  # as the tracker answers its reads (a cluster made there could not be read back)
            raise Refused(unmade, code="invalid", field="tenant")
        job_id = getattr(command, "job_id", None)
        cluster_id = getattr(command, "cluster_id", None)
        known = self.job(job_id) if job_id else None  # a job this planner holds; else only grants on the job (or wider) cover it
        if known is not None and known.tenant != ctx.tenant:
            known = None
        if ctx.verb == "reject" and known is not None and known.requested_by == principal.id:
            return  # a requester may always reject its own job, `approve` or not (docs/governance.md)
        if ctx.verb == "approve" and known is not None and known.requested_by == principal.id and known.awaiting_approval \
                and not (known.approval or {}).get("allow_self_approval"):
            # No grant would let it: said before the missing `approve`, whose refusal named a grant to ask for.
            raise Refused(approvals.not_to_decide(principal.id, "approve", str(job_id), approvals.own_job(principal.id)),
                          code="forbidden")
        if job_id and cluster_id is None:
            cluster_id = known.cluster_id if known is not None else None
        # A saved plan asks for what its own operation asks, on its own cluster (loaded by now).
        verb = op.verb if ctx.verb == "apply" else ctx.verb
        grants = self.state.grants_of(principal.id)
        decision = may_operate(principal, grants, ctx.tenant, verb, cluster_id, job_id)
        if not decision:
            if ctx.verb == "apply" and cluster_id and not may(principal, grants, "read", Scope(tenant=ctx.tenant, kind="cluster", id=cluster_id)):
                # The plan named the cluster, not the requester: one it may not read is not named
                # to it (its id, or a grant on it to ask for), as the tracker's reads would not.
                raise Refused(plan_refusal(principal.id, verb, ctx.tenant), code="forbidden")
            if ctx.verb in ("approve", "reject") and job_id:  # in the words of a requester's refusal (above)
                raise Refused(approvals.not_to_decide(principal.id, ctx.verb, job_id, decision.reason), code="forbidden")
            raise Refused(decision.reason, code="forbidden")


def catalog_reads(state: IdentityState | None) -> Callable[[str | None, str], Callable[[str], bool]]:
    """What a requester may read of a tenant's catalog (`<kind>/<name>`), as the tracker's
    catalog reads decide: a refusal's "did you mean" names only that. Everything on a bus
    without identities."""
    def reader(principal_id: str | None, tenant: str) -> Callable[[str], bool]:
        if state is None:
            return lambda entity: True
        principal = state.principals.get(principal_id or subjects.ANONYMOUS)
        grants = state.grants_of(principal.id) if principal is not None else frozenset()
        return lambda entity: bool(may(principal, grants, "read", Scope(tenant=tenant, kind="catalog", id=entity)))

    return reader


def totals_reads(state: IdentityState | None) -> Callable[[str | None, str], bool]:
    """May a requester read the tenant's totals (every cluster's count, nodes and price), as
    `GET /v1/cost` asks: `read` on every cluster of the tenant. A dry run shows them only then."""
    def reader(principal_id: str | None, tenant: str) -> bool:
        if state is None:
            return True
        principal = state.principals.get(principal_id or subjects.ANONYMOUS)
        grants = state.grants_of(principal.id) if principal is not None else frozenset()
        return bool(may(principal, grants, "read", Scope(tenant=tenant, kind="cluster", id="*")))

    return reader
