"""The permission matrix: every permission against every scope shape, for every role."""

from __future__ import annotations

import itertools

import pytest

from contracts.identity import PERMISSIONS, Scope
from services.auth.domain.authz import may, may_govern, may_grant, may_operate, permission_covers, scope_covers
from services.auth.domain.state import Grant, IdentityState, Principal

A_SCOPES = [Scope(tenant="a"), Scope(tenant="a", kind="cluster", id="c1"), Scope(tenant="a", kind="cluster", id="*"),
            Scope(tenant="a", kind="job", id="j1", cluster="c1"), Scope(tenant="a", kind="catalog", id="services/hdfs"),
            Scope(tenant="a", kind="catalog", id="*")]
B_SCOPES = [s.model_copy(update={"tenant": "b"}) for s in A_SCOPES]


def p(state: IdentityState, pid: str) -> Principal:
    return state.principals[pid]


@pytest.mark.parametrize("permission, scope", list(itertools.product(PERMISSIONS, A_SCOPES + B_SCOPES)))
def test_a_super_admin_may_do_anything_anywhere(state: IdentityState, permission: str, scope: Scope) -> None:
    assert may(p(state, "root"), (), permission, scope)  # type: ignore[arg-type]


@pytest.mark.parametrize("permission, scope", list(itertools.product(PERMISSIONS, A_SCOPES)))
def test_a_tenant_admin_may_do_anything_in_its_tenant_and_nothing_outside(state: IdentityState, permission: str, scope: Scope) -> None:
    assert may(p(state, "ada"), (), permission, scope)  # type: ignore[arg-type]
    other = scope.model_copy(update={"tenant": "b"})
    decision = may(p(state, "ada"), (), permission, other)  # type: ignore[arg-type]
    assert not decision and "belongs to tenant a, not b" in decision.reason


@pytest.mark.parametrize("permission, scope", list(itertools.product(PERMISSIONS, A_SCOPES)))
def test_a_user_without_grants_may_do_nothing(state: IdentityState, permission: str, scope: Scope) -> None:
    decision = may(p(state, "alice"), (), permission, scope)  # type: ignore[arg-type]
    assert not decision and f"no {permission} permission" in decision.reason


def test_grants_cover_their_permission_and_read_and_nothing_else() -> None:
    assert permission_covers("write", "read") and permission_covers("execute", "read")
    assert permission_covers("approve", "read") and not permission_covers("approve", "write")  # an approver reads the plan
    assert not permission_covers("read", "write") and not permission_covers("execute", "write")
    assert not permission_covers("write", "execute") and not permission_covers("grant", "read")
    assert not permission_covers("write", "grant")


def test_scopes_cover_themselves_their_kind_and_a_clusters_jobs() -> None:
    tenant, c1, all_clusters = Scope(tenant="a"), Scope(tenant="a", kind="cluster", id="c1"), Scope(tenant="a", kind="cluster", id="*")
    job_c1, job_c2 = Scope(tenant="a", kind="job", id="j", cluster="c1"), Scope(tenant="a", kind="job", id="k", cluster="c2")
    assert all(scope_covers(tenant, s) for s in A_SCOPES)
    assert not any(scope_covers(tenant, s) for s in B_SCOPES)
    assert scope_covers(c1, c1) and not scope_covers(c1, all_clusters) and not scope_covers(c1, Scope(tenant="a", kind="cluster", id="c2"))
    assert scope_covers(all_clusters, c1) and scope_covers(all_clusters, job_c2)
    assert scope_covers(c1, job_c1) and not scope_covers(c1, job_c2)
    assert not scope_covers(c1, Scope(tenant="a", kind="job", id="j"))  # a job of unknown cluster
    assert not scope_covers(Scope(tenant="a", kind="catalog", id="*"), c1)
    assert not scope_covers(job_c1, c1)


def test_read_only_cannot_create_write_or_execute(state: IdentityState) -> None:
    grants = {Grant("read", Scope(tenant="a"))}
    alice = p(state, "alice")
    assert may(alice, grants, "read", Scope(tenant="a", kind="cluster", id="c1"))
    for verb in ("create", "delete", "expand", "configure", "restart", "pause", "retry"):
        assert not may_operate(alice, grants, "a", verb, "c1", "j1"), verb


def test_a_governance_refusal_names_what_only_administrators_change(state: IdentityState) -> None:
    alice = p(state, "alice")
    grants = {Grant("write", Scope(tenant="a"))}
    assert "change its policies" in may_govern(alice, grants, "a", "policy").reason
    assert "change its approval rules" in may_govern(alice, grants, "a", "rule").reason
    assert may_govern(alice, grants, "a", "schedule")
    # Reading them (`schedule list`, `notify add`) needs `read` on the tenant: the refusal names
    # the grant to ask for, as an operation's does (it said only `alice has no read permission on tenant a`).
    said = may_govern(alice, {Grant("write", Scope(tenant="a", kind="cluster", id="*"))}, "a", "subscription").reason
    assert said == "alice has no read permission on tenant a (a tenant admin can give it: muster grant alice read --scope tenant)"


def test_write_on_one_cluster_does_not_create_clusters(state: IdentityState) -> None:
    grants = {Grant("write", Scope(tenant="a", kind="cluster", id="c1"))}
    alice = p(state, "alice")
    assert may_operate(alice, grants, "a", "expand", "c1")
    assert not may_operate(alice, grants, "a", "expand", "c2")
    assert not may_operate(alice, grants, "a", "create", None)
    assert may_operate(alice, {Grant("write", Scope(tenant="a", kind="cluster", id="*"))}, "a", "create", None)


def test_execute_controls_jobs_of_its_cluster_but_cannot_grant(state: IdentityState) -> None:
    grants = {Grant("execute", Scope(tenant="a", kind="cluster", id="c1"))}
    alice = p(state, "alice")
    assert may_operate(alice, grants, "a", "pause", "c1", "j1")
    assert may_operate(alice, grants, "a", "restart", "c1")
    assert not may_operate(alice, grants, "a", "pause", "c2", "j2")
    assert not may_operate(alice, grants, "a", "delete", "c1")
    decision = may_grant(alice, grants, p(state, "carol"), "execute", Scope(tenant="a", kind="cluster", id="c1"))
    assert not decision and "grant" in decision.reason


def test_every_operation_verb_needs_a_permission() -> None:
    from contracts.subjects import OPERATION_VERBS
    from services.auth.domain.authz import OPERATION_PERMISSIONS

    assert set(OPERATION_PERMISSIONS) == set(OPERATION_VERBS)


def test_unknown_operations_and_principals_are_refused(state: IdentityState) -> None:
    assert not may_operate(p(state, "root"), (), "a", "explode", "c1")
    assert not may(None, (), "read", Scope(tenant="a"))


def test_disabled_principals_may_do_nothing(state: IdentityState) -> None:
    root = p(state, "root")
    disabled = Principal(root.id, root.role, disabled=True)
    assert not may(disabled, (), "read", Scope(tenant="a"))


def test_services_act_through_bus_permissions_except_system(state: IdentityState) -> None:
    assert not may(p(state, "planner"), (), "read", Scope(tenant="a"))
    assert may(Principal("sys", "service", service="system"), (), "grant", Scope(tenant="b"))


class TestGrant:
    def test_a_tenant_admin_grants_inside_its_tenant_only(self, state: IdentityState) -> None:
        ada = p(state, "ada")
        assert may_grant(ada, (), p(state, "alice"), "write", Scope(tenant="a", kind="cluster", id="*"))
        outside = may_grant(ada, (), p(state, "dave"), "read", Scope(tenant="b"))
        assert not outside and "tenant" in outside.reason
        # nor to a user of its tenant on another tenant's scope
        assert not may_grant(ada, (), p(state, "alice"), "read", Scope(tenant="b"))

    def test_a_user_with_grant_gives_only_what_it_holds(self, state: IdentityState) -> None:
        c1 = Scope(tenant="a", kind="cluster", id="c1")
        grants = {Grant("grant", c1), Grant("read", c1)}
        alice, carol = p(state, "alice"), p(state, "carol")
        assert may_grant(alice, grants, carol, "read", c1)
        no_write = may_grant(alice, grants, carol, "write", c1)
        assert not no_write and "cannot give write" in no_write.reason
        assert not may_grant(alice, grants, carol, "read", Scope(tenant="a", kind="cluster", id="c2"))
        assert not may_grant(alice, grants, p(state, "dave"), "read", c1)

    def test_only_a_super_admin_grants_to_services_and_super_admins(self, state: IdentityState) -> None:
        queue = Scope(tenant="a", kind="queue", id="gpu")
        assert may_grant(p(state, "root"), (), p(state, "p1"), "execute", queue)
        assert not may_grant(p(state, "ada"), (), p(state, "p1"), "execute", queue)
        assert not may_grant(p(state, "root"), (), p(state, "alice"), "execute", queue)
        assert not may_grant(p(state, "root"), (), None, "read", Scope(tenant="a"))


def test_the_cli_grants_and_revokes_every_permission() -> None:
    from muster.auth_cli import grant, revoke

    for command in (grant, revoke):
        (param,) = [p for p in command.params if p.name == "permission"]
        assert tuple(param.type.choices) == PERMISSIONS  # type: ignore[attr-defined]


def test_a_refused_operation_says_which_grant_to_ask_for(state: IdentityState) -> None:
    """A refusal names the problem and what to do: the grant, as the command a tenant admin runs
    (found walking a user's day: `stop rejected: alice has no execute permission on cluster ...`
    said nothing of how to get it). A job's grant is asked on its cluster, which covers the job and
    the cluster's next ones. Nothing to ask for a principal of another tenant."""
    stop = may_operate(p(state, "alice"), (), "a", "stop", "c1")
    assert stop.reason == ("alice has no execute permission on cluster c1 of tenant a"
                           " (a tenant admin can give it: muster grant alice execute --scope cluster:c1)")
    create = may_operate(p(state, "alice"), (), "a", "create", None)
    assert create.reason.endswith("(a tenant admin can give it: muster grant alice write --scope 'cluster:*')")
    # Asked on the cluster by one who may read it; on the job by one who may not (the cluster's
    # id is not named to it: docs/security.md, "What a refusal names").
    reads = (Grant(permission="read", scope=Scope(tenant="a", kind="cluster", id="c1")),)
    cancel = may_operate(p(state, "alice"), reads, "a", "cancel", "c1", "j1")
    assert cancel.reason.endswith("(a tenant admin can give it: muster grant alice execute --scope cluster:c1)")
    cancel = may_operate(p(state, "alice"), (), "a", "cancel", "c1", "j1")
    assert cancel.reason.endswith("(a tenant admin can give it: muster grant alice execute --scope job:j1)") and "c1" not in cancel.reason
    other = may_operate(p(state, "alice"), (), "b", "stop", "c1")
    assert not other and "tenant admin" not in other.reason
