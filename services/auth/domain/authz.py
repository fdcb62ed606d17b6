"""May this principal do that? Pure permission checks (docs/security.md has the table).

- A super admin may do anything, anywhere.
- A tenant admin may do anything inside its tenant (and grant inside it only).
- A user may do what its grants cover: a grant covers the same permission, or `read` when it is
  `write`, `execute` or `approve` (an approver reads the plan it decides on); on its scope, which covers itself, every entity of its kind (`id="*"`),
  and for a cluster the cluster's jobs; a tenant-wide grant covers the whole tenant.
- `grant` lets a principal give others permissions it holds itself, on scopes it holds `grant`
  on, to principals of the same tenant.
- Services act through their bus permissions, not through grants; the `system` service (tests,
  maintenance) may do anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from contracts.commands import JOB_VERBS
from contracts.identity import OPERATION_PERMISSIONS as OPERATION_PERMISSIONS
from contracts.identity import Permission, Scope

from .state import Grant, Principal


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOW = Decision(True)
UNMADE_EXEMPT = "default"
"""The tenant every deployment has without `muster tenant create` (muster up's own)."""


def unmade_tenant(principal: Principal | None, tenants: Iterable[str], tenant: str) -> str:
    """Why a super admin's request names a tenant no one made ('' when it does not): a
    mistyped `--tenant acmee` read as an empty tenant ("no clusters") or wrote a first cluster
    there. A tenant's own principals can only name theirs, which exists; services name what the
    log holds."""
    if principal is None or not principal.is_super_admin or tenant == UNMADE_EXEMPT or tenant in tenants:
        return ""
    return f"no tenant {tenant[:64]!r} (`muster tenant list` lists them; `muster tenant create` makes one)"


def permission_covers(held: Permission, wanted: Permission) -> bool:
    return held == wanted or (wanted == "read" and held in ("write", "execute", "approve"))


def scope_covers(held: Scope, wanted: Scope) -> bool:
    if held.tenant != wanted.tenant:
        return False
    if held.kind == "tenant":
        return True
    if held.kind == wanted.kind:
        return held.id == "*" or held.id == wanted.id
    # A grant on a cluster (or on every cluster) covers the cluster's jobs.
    return held.kind == "cluster" and wanted.kind == "job" and wanted.cluster is not None and held.id in ("*", wanted.cluster)


def may(principal: Principal | None, grants: Iterable[Grant], permission: Permission, scope: Scope) -> Decision:
    if principal is None:
        return Decision(False, "unknown principal")
    if principal.disabled:
        return Decision(False, f"{principal.id} is disabled")
    if principal.is_super_admin or principal.service == "system":
        return ALLOW
    if principal.role == "service":
        return Decision(False, f"service {principal.id} acts through its bus permissions, not grants")
    if principal.tenant != scope.tenant:
        return Decision(False, f"{principal.id} belongs to tenant {principal.tenant}, not {scope.tenant}")
    if principal.is_tenant_admin:
        return ALLOW
    for grant in grants:
        if permission_covers(grant.permission, permission) and scope_covers(grant.scope, scope):
            return ALLOW
    return Decision(False, f"{principal.id} has no {permission} permission on {_describe(scope)}")


def may_grant(grantor: Principal | None, grantor_grants: Iterable[Grant], grantee: Principal | None,
              permission: Permission, scope: Scope, verb: str = "grant") -> Decision:
    """May `grantor` give (`verb` grant) or take back (revoke) `permission` on `scope` to `grantee`?
    A user refused is told the command a tenant admin runs for it, as `may_operate` says."""
    if grantee is None:
        return Decision(False, "no such principal")
    if grantee.role in ("super_admin", "service") and not (grantor and (grantor.is_super_admin or grantor.service == "system")):
        return Decision(False, f"only a super admin grants to {grantee.role.replace('_', ' ')}s")
    if grantee.role in ("user", "tenant_admin") and grantee.tenant != scope.tenant:
        return Decision(False, f"{grantee.id} belongs to tenant {grantee.tenant}: grants stay inside a tenant")
    if scope.kind == "queue" and grantee.service != "provisioner":
        return Decision(False, "queue scopes are for provisioners")
    grants = list(grantor_grants)
    held = may(grantor, grants, "grant", scope)
    if not held:
        return Decision(False, held.reason + _ask_an_admin(grantor, grantee, permission, scope, verb))
    own = may(grantor, grants, permission, scope)
    if not own:
        return Decision(False, f"cannot give {permission} on {_describe(scope)}: {own.reason}"
                               + _ask_an_admin(grantor, grantee, permission, scope, verb))
    return ALLOW


def _ask_an_admin(grantor: Principal | None, grantee: Principal, permission: Permission, scope: Scope, verb: str) -> str:
    if grantor is None or grantor.disabled or grantor.role != "user" or grantor.tenant != scope.tenant:
        return ""
    # "it" is the grantor's own request only when it asked for itself; for another principal the
    # hint read "alice has no grant permission ... (a tenant admin can give it: muster grant rita
    # write ...)", the grant permission seemingly offered by a command that gives rita write.
    if grantee.id == grantor.id:
        does = "take it back" if verb == "revoke" else "give it"
    else:
        does = f"take {permission} back from {grantee.id}" if verb == "revoke" else f"give {grantee.id} {permission}"
    return f" (a tenant admin can {does}: muster {verb} {grantee.id} {permission} --scope {_scope_arg(scope)})"


def how_to_get(principal: Principal | None, permission: Permission, scope: Scope, grants: Iterable[Grant] = ()) -> str:
    """What a user refused by `may` can do about it: ask a tenant admin for the grant, named as
    the command that gives it ('' when no grant would help: a stranger, a disabled principal,
    another tenant's scope, a service). Appended by the planner's and the tracker's refusals, so
    the CLI, the API and the console say the same. A job's grant is asked on its cluster when
    the user (its `grants`) may read that cluster; else on the job: the cluster's id is not
    named to one who may not read it (docs/security.md, "What a refusal names")."""
    if principal is None or principal.disabled or principal.role != "user" or principal.tenant != scope.tenant:
        return ""
    if scope.kind == "job" and scope.cluster and not may(principal, grants, "read", Scope(tenant=scope.tenant, kind="cluster", id=scope.cluster)):
        scope = Scope(tenant=scope.tenant, kind="job", id=scope.id)
    return f" (a tenant admin can give it: muster grant {principal.id} {permission} --scope {_scope_arg(scope)})"


def _scope_arg(scope: Scope) -> str:
    """The scope as `muster grant --scope` takes it (quoted where a shell would expand it)."""
    if scope.kind == "tenant":
        return "tenant"
    if scope.kind == "job" and scope.cluster:  # a grant on its cluster covers it, and every later job
        return f"cluster:{scope.cluster}"
    return f"{scope.kind}:{scope.id}" if scope.id != "*" else f"'{scope.kind}:*'"


def _describe(scope: Scope) -> str:
    if scope.kind == "tenant":
        return f"tenant {scope.tenant}"
    if scope.id == "*":
        return f"every {scope.kind} of tenant {scope.tenant}"
    return f"{scope.kind} {scope.id} of tenant {scope.tenant}"


# -- what each request needs (OPERATION_PERMISSIONS: contracts/identity.py) ------------------------


def operation_scope(tenant: str, verb: str, cluster_id: str | None, job_id: str | None = None) -> Scope:
    """The scope an operation acts on: a new cluster is `cluster:*` (any cluster of the
    tenant), job control is the job (which its cluster's grants cover)."""
    if verb in JOB_VERBS and job_id:
        return Scope(tenant=tenant, kind="job", id=job_id, cluster=cluster_id)
    if verb == "create" or not cluster_id:
        return Scope(tenant=tenant, kind="cluster", id="*")
    return Scope(tenant=tenant, kind="cluster", id=cluster_id)


def may_operate(principal: Principal | None, grants: Iterable[Grant], tenant: str, verb: str,
                cluster_id: str | None, job_id: str | None = None) -> Decision:
    """As `may`, with what to do about a refusal (`how_to_get`)."""
    permission = OPERATION_PERMISSIONS.get(verb)
    if permission is None:
        return Decision(False, f"unknown operation {verb!r}")
    scope = operation_scope(tenant, verb, cluster_id, job_id)
    held = tuple(grants)
    decision = may(principal, held, permission, scope)
    return decision if decision else Decision(False, decision.reason + how_to_get(principal, permission, scope, held))


def plan_refusal(principal_id: str, verb: str, tenant: str) -> str:
    """Why `principal_id` may not apply a saved plan whose cluster it may not read either: the
    plan named the cluster, not the requester, so neither its id nor a grant on it is said
    (the planner's and the tracker's words; docs/security.md, "What a refusal names")."""
    return (f"{principal_id} may not apply this plan: it has no {OPERATION_PERMISSIONS[verb]} permission on the plan's "
            f"cluster in tenant {tenant}, nor read on it (a tenant admin can give them)")


def may_see_schedule(principal_id: str | None, allowed: Callable[[Permission, Scope], object], tenant: str,
                     schedule: Mapping[str, object]) -> bool:
    """Is `schedule` one of those a principal without `read` on the tenant is shown: the ones it
    may pause or delete (docs/governance.md), its own or one whose operation it may run
    (`allowed`: its `may`, as the governance service, the tracker or the console asks it). A
    user who may make schedules could not list them (`schedule list` needed `read` on the tenant)."""
    if principal_id is not None and schedule.get("owner") == principal_id:
        return True
    verb, command = str(schedule.get("verb")), schedule.get("command")
    cmd: Mapping[str, object] = command if isinstance(command, Mapping) else {}
    cluster_id, job_id = cmd.get("cluster_id"), cmd.get("job_id")
    permission = OPERATION_PERMISSIONS.get(verb)
    return permission is not None and bool(allowed(permission, operation_scope(
        tenant, verb, cluster_id if isinstance(cluster_id, str) else None, job_id if isinstance(job_id, str) else None)))


def may_govern(principal: Principal | None, grants: Iterable[Grant], tenant: str, kind: str) -> Decision:
    """May `principal` change the tenant's governance entities of `kind` (docs/governance.md)?
    Approval rules and policies bind everyone in the tenant: those who administer it (tenant
    and super admins, or `grant` on the whole tenant). A subscription tells of the tenant's jobs:
    `read` on the tenant. A schedule sends requests as its owner, whose grants the planner checks
    at every tick: `write` on the tenant to make one."""
    wanted: Permission = {"rule": "grant", "policy": "grant", "subscription": "read"}.get(kind, "write")  # type: ignore[assignment]
    decision = may(principal, grants, wanted, Scope(tenant=tenant))
    if decision:
        return decision
    if wanted != "grant":  # a grant helps: named, as an operation's refusal names it (`schedule list` said only no)
        return Decision(False, decision.reason + how_to_get(principal, wanted, Scope(tenant=tenant)))
    plural = {"policy": "policies", "rule": "approval rules"}.get(kind, f"{kind}s")
    return Decision(False, f"{decision.reason}: only the tenant's administrators change its {plural}")
