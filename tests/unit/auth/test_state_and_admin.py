"""The identity fold and the admin requests (no bus)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import KINDS
from contracts.identity import CATALOG_KINDS, AuthRequest, IdentityEvent, PermissionGranted, PermissionRevoked, Scope, TokenIssued
from services.auth.backends import AuthError
from services.auth.backends.builtin import BuiltinBackend
from services.auth.domain.admin import Admin, Result, bootstrap
from services.auth.domain.state import IdentityState

from .conftest import rand

NOW = 1_000_000.0


def run(state: IdentityState, who: str, verb: str, now: float = NOW, **fields: Any) -> Result:
    result = Admin(state, rand, now).handle(who, verb, AuthRequest(**fields))
    for subject, event, _ in result.appends:
        assert subject.startswith("muster.evt._auth.")
        state.apply(event, state.last_seq + 1)
    return result


def events_of(result: Result) -> list[IdentityEvent]:
    return [e for _, e, _ in result.appends]


def test_apply_is_idempotent_per_sequence(state: IdentityState) -> None:
    scope = Scope(tenant="a")
    state.apply(PermissionGranted(principal="alice", permission="read", scope=scope, by="ada"), 100)
    state.apply(PermissionRevoked(principal="alice", permission="read", scope=scope, by="ada"), 101)
    state.apply(PermissionGranted(principal="alice", permission="read", scope=scope, by="ada"), 100)  # redelivered
    assert not state.grants_of("alice")


def test_a_tenant_admin_creates_a_user_with_a_token_that_authenticates(state: IdentityState) -> None:
    result = run(state, "ada", "user-create", principal="erin")
    assert result.reply.ok, result.reply.reason
    token = result.reply.data["token"]
    assert [type(e).__name__ for e in events_of(result)] == ["PrincipalCreated", "TokenIssued"]
    assert all(token not in e.model_dump_json() for e in events_of(result))  # only salt + digest in the log
    assert all(expect == 0 for _, _, expect in result.appends)  # a second creator is fenced off
    auth = BuiltinBackend(state).authenticate(token, NOW)
    assert (auth.principal.id, auth.principal.tenant, auth.principal.role) == ("erin", "a", "user")


@pytest.mark.parametrize("who, fields, reason", [
    ("alice", {"principal": "x1"}, "only a super admin or a tenant admin"),
    ("ada", {"principal": "x1", "tenant": "b"}, "belongs to tenant a, not b"),
    ("ada", {"principal": "x1", "role": "super_admin"}, "only a super admin"),
    ("ada", {"principal": "alice"}, "exists already"),
    ("ada", {"principal": "Bad_Name"}, "principal id"),
    ("root", {"principal": "s1", "role": "service"}, "--service"),
    ("root", {"principal": "x1", "tenant": "nope"}, "no tenant"),
    ("root", {"principal": "x1"}, "name a tenant"),
])
def test_user_create_refusals(state: IdentityState, who: str, fields: dict[str, Any], reason: str) -> None:
    result = run(state, who, "user-create", **fields)
    assert not result.reply.ok and reason in result.reply.reason and not result.appends


def test_tenants(state: IdentityState) -> None:
    assert run(state, "root", "tenant-create", tenant="c").reply.ok
    assert "exists already" in run(state, "root", "tenant-create", tenant="c").reply.reason
    assert "starting with a letter" in run(state, "root", "tenant-create", tenant="_auth").reply.reason
    assert "reserved" in run(state, "root", "tenant-create", tenant="provisioner").reply.reason
    assert "only a super admin" in run(state, "ada", "tenant-create", tenant="d").reply.reason
    assert [t["tenant"] for t in run(state, "root", "tenant-list").reply.data] == ["a", "b", "c"]
    assert [t["tenant"] for t in run(state, "alice", "tenant-list").reply.data] == ["a"]


def test_tokens_expire_and_revoke(state: IdentityState) -> None:
    made = run(state, "alice", "token-create", expires_in_s=60, name="laptop").reply.data
    backend = BuiltinBackend(state)
    assert backend.authenticate(made["token"], NOW + 59).principal.id == "alice"
    with pytest.raises(AuthError, match="expired"):
        backend.authenticate(made["token"], NOW + 60)
    assert run(state, "alice", "token-revoke", token_id=made["token_id"]).reply.ok
    with pytest.raises(AuthError, match="revoked"):
        backend.authenticate(made["token"], NOW)
    listed = run(state, "alice", "token-list").reply.data
    assert listed == [{"token_id": made["token_id"], "name": "laptop", "expires_at": NOW + 60, "revoked": True}]


def test_who_may_make_and_revoke_whose_tokens(state: IdentityState) -> None:
    assert run(state, "ada", "token-create", principal="alice").reply.ok
    assert "cannot administer" in run(state, "ada", "token-create", principal="dave").reply.reason
    assert "cannot administer" in run(state, "alice", "token-create", principal="carol").reply.reason
    assert "cannot administer" in run(state, "ada", "token-create", principal="root").reply.reason
    carols = run(state, "ada", "token-create", principal="carol").reply.data["token_id"]
    assert "cannot administer" in run(state, "alice", "token-revoke", token_id=carols).reply.reason
    assert "no token" in run(state, "alice", "token-revoke", token_id="ffffffffffff").reply.reason
    # Another tenant's token is one nobody has: the refusal named its owner, so a token id told whose it was.
    daves = run(state, "root", "token-create", principal="dave").reply.data["token_id"]
    for who in ("ada", "alice"):
        refused = run(state, who, "token-revoke", token_id=daves).reply.reason
        assert refused == f"no token {daves!r} (an identity provider's token, jwt-..., needs --for PRINCIPAL too)", refused


def test_disabled_users_cannot_authenticate_or_get_tokens(state: IdentityState) -> None:
    token = run(state, "ada", "token-create", principal="alice").reply.data["token"]
    assert run(state, "ada", "user-disable", principal="alice").reply.ok
    with pytest.raises(AuthError, match="disabled"):
        BuiltinBackend(state).authenticate(token, NOW)
    assert "disabled" in run(state, "ada", "token-create", principal="alice").reply.reason
    assert "not an enabled principal" in run(state, "alice", "whoami").reply.reason
    assert "last super admin" in run(state, "root", "user-disable", principal="root").reply.reason


def test_wrong_tokens_are_refused_with_reasons(state: IdentityState) -> None:
    token = run(state, "alice", "token-create").reply.data["token"]
    backend = BuiltinBackend(state)
    principal, token_id, secret = token.split("_")[1:]
    with pytest.raises(AuthError, match="unknown token"):
        backend.authenticate(f"mst_{principal}_{token_id}_{'0' * 64}", NOW)
    with pytest.raises(AuthError, match="unknown token"):  # another principal's name on it
        backend.authenticate(f"mst_carol_{token_id}_{secret}", NOW)
    with pytest.raises(AuthError, match="malformed"):
        backend.authenticate("mst_" + "x" * 10, NOW)


def test_grants_through_requests(state: IdentityState) -> None:
    assert run(state, "ada", "grant", principal="alice", permission="write", scope="cluster:*").reply.ok
    refused = run(state, "alice", "grant", principal="carol", permission="read").reply
    assert "no grant permission" in refused.reason and refused.code == "forbidden"  # the CLI's exit 4
    assert "grants stay inside a tenant" in run(state, "root", "grant", principal="dave", permission="read", tenant="a").reply.reason
    assert "not one of" in run(state, "ada", "grant", principal="alice", permission="read", scope="cluster").reply.reason
    who = run(state, "alice", "whoami").reply.data
    assert who["grants"] == [{"permission": "write", "scope": "a:cluster:*"}] and who["inbox"] == "_INBOX.alice"
    assert who["bus"]["subscribe"] == ["_INBOX.alice.>", "muster.cb.a.>"]
    assert run(state, "ada", "revoke", principal="alice", permission="write", scope="cluster:*").reply.ok
    assert run(state, "alice", "whoami").reply.data["grants"] == []
    # A grant not held: said so, nothing recorded (it answered "revoked", as if it had been)
    again = run(state, "ada", "revoke", principal="alice", permission="write", scope="cluster:*")
    assert again.reply.ok and again.reply.data["revoked"] is False and not again.appends


@pytest.mark.parametrize("scope, says", [
    ("cluster:*.>", "names one cluster by its id"), ("cluster:web", "names one cluster by its id"), ("job:>", "one job"),
    ("catalog:services", "catalog:<kind>/<name>"), ("catalog:gadgets/x", "catalog:<kind>/<name>"),
    ("catalog:services/a.b", "catalog:<kind>/<name>"), ("queue:a.b", "provisioner class"), ("cluster:**", "UUID"),
])
def test_a_scope_id_its_kind_cannot_have_is_refused_at_grant_time_and_stored_nowhere(state: IdentityState, scope: str,
                                                                                      says: str) -> None:
    done = run(state, "ada", "grant", principal="alice", permission="read", scope=scope)
    assert not done.reply.ok and says in done.reply.reason and not done.appends
    if not scope.startswith("queue:"):  # (queues are provisioners')
        # What an older version let in can still be taken back.
        assert run(state, "ada", "revoke", principal="alice", permission="read", scope=scope).reply.ok


def test_scope_ids_are_one_entity_or_every_one_of_a_kind() -> None:
    upper = "3F1C0C3E-9D43-4C0E-9F5C-0A1B2C3D4E5F"
    assert Scope.parse("a", f"cluster:{upper}").id == upper.lower()
    assert str(Scope.parse("a", "catalog:services/web")) == "a:catalog:services/web"
    assert Scope.parse("a", "queue:gpu").id == "gpu" and Scope.parse("a", "job:*").id == "*"
    assert CATALOG_KINDS == tuple(KINDS)


def test_provisioner_whoami_names_its_queues(state: IdentityState) -> None:
    assert run(state, "p1", "whoami").reply.data["queues"] == [{"tenant": "a", "class": "default"}]


def test_unknown_verbs_and_requesters(state: IdentityState) -> None:
    assert "unknown auth request" in run(state, "root", "explode").reply.reason
    assert "not an enabled principal" in run(state, "ghost", "whoami").reply.reason


def test_bootstrap_makes_a_principal_once_and_a_token_each_time() -> None:
    state = IdentityState()
    token, appends = bootstrap(state, "admin", "super_admin", rand, NOW, by="muster-up")
    assert [type(e).__name__ for _, e, _ in appends] == ["PrincipalCreated", "TokenIssued"]
    for i, (_, e, _) in enumerate(appends, start=1):
        state.apply(e, i)
    assert BuiltinBackend(state).authenticate(token, NOW).principal.is_super_admin
    _, again = bootstrap(state, "admin", "super_admin", rand, NOW, by="muster-up")
    assert [type(e).__name__ for _, e, _ in again] == ["TokenIssued"]
    assert isinstance(again[0][1], TokenIssued) and again[0][0] == subjects.identity_events("token", again[0][1].token_id)


@pytest.mark.parametrize("verb", ["grant", "revoke"])
def test_a_grant_to_nobody_names_the_principal(state: IdentityState, verb: str) -> None:
    # A super admin's typo (`muster grant alicee read`) read "name a tenant (--tenant)", or with
    # --tenant "no such principal" as a refusal (exit 4); a tenant admin is answered as before,
    # in the words another tenant's person gets (tenants do not see each other).
    for tenant in (None, "a"):
        result = run(state, "root", verb, principal="alicee", permission="read", tenant=tenant)
        assert (result.reply.ok, result.reply.reason, result.reply.code, result.appends) == (False, "no principal 'alicee'", None, [])
    result = run(state, "ada", verb, principal="alicee", permission="read")
    assert result.reply.code == "forbidden" and "is not a principal of tenant a" in result.reply.reason


def test_revoking_an_unknown_token_names_the_option_that_exists(state: IdentityState) -> None:
    from click.testing import CliRunner

    from muster.auth_cli import token

    reason = run(state, "root", "token-revoke", token_id="jwt-abc").reply.reason
    flag = reason.split("needs ")[1].split()[0]
    assert reason.startswith("no token 'jwt-abc'") and flag == "--for"
    assert "--for" in CliRunner().invoke(token, ["revoke", "--help"]).output


@pytest.mark.parametrize(("verb", "said"), [
    ("grant", "a tenant admin can give it: muster grant alice read --scope tenant"),
    ("revoke", "a tenant admin can take it back: muster revoke alice read --scope tenant")])
def test_a_user_refused_a_grant_is_told_who_can_make_it(state: IdentityState, verb: str, said: str) -> None:
    """Walk of session 24: a user who typed `muster grant alice read --scope tenant` (itself, to
    read the tenant's schedules) was told `alice has no grant permission on tenant a` and no more,
    where every other refusal names the command a tenant admin runs."""
    refused = run(state, "alice", verb, principal="alice", permission="read").reply
    assert not refused.ok and refused.code == "forbidden"
    assert refused.reason == f"alice has no grant permission on tenant a ({said})", refused.reason


@pytest.mark.parametrize(("verb", "said"), [
    ("grant", "a tenant admin can give carol read: muster grant carol read --scope tenant"),
    ("revoke", "a tenant admin can take read back from carol: muster revoke carol read --scope tenant")])
def test_a_user_refused_a_grant_for_another_is_told_what_the_command_gives(state: IdentityState, verb: str, said: str) -> None:
    """Session 36's walk: alice's `muster grant rita write` was refused `alice has no grant
    permission on every cluster ... (a tenant admin can give it: muster grant rita write ...)`:
    "it" read as the grant permission alice lacked, given by a command that gives rita write."""
    refused = run(state, "alice", verb, principal="carol", permission="read").reply
    assert not refused.ok and refused.code == "forbidden"
    assert refused.reason == f"alice has no grant permission on tenant a ({said})", refused.reason


@pytest.mark.parametrize(("verb", "fields", "said"), [
    ("whoami", {"name": "x"}, "whoami takes no name (it takes no field)"),
    ("token-create", {"tenant": "a", "scope": "tenant"}, "token-create takes no tenant, scope (it takes principal, expires_in_s, name)"),
    ("user-create", {"principal": "eve", "tenant": "a\x00b"}, "tenant 'a\\x00b' is not a valid name"),
    ("grant", {"scope": "cluster:a\x00b"}, "scope 'cluster:a\\x00b' has a space, control or bidirectional character"),
    ("token-revoke", {"token_id": "*"}, "token_id '*' is no token's id"),
    ("token-list", {"principal": "a.*.>"}, "principal id 'a.*.>': use 1-64 lowercase letters"),
])
def test_a_body_field_the_verb_does_not_read_or_no_name_can_be_is_refused_naming_it(
        state: IdentityState, verb: str, fields: dict[str, Any], said: str) -> None:
    """A `name` sent to whoami, a `tenant` to token-create were ignored (the request answered,
    a token made, as if they were not there); a NUL in a tenant was answered about the missing
    principal. Each is refused, naming the field, and nothing is written."""
    result = run(state, "root", verb, **fields)
    assert not result.reply.ok and said in result.reply.reason and result.appends == [], result.reply


@pytest.mark.parametrize("name", ["a\x00b", "ñ\u202e😀", "tab\there"])
def test_a_token_name_with_a_control_or_bidirectional_character_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="(?s)name.*has a control or bidirectional character"):
        AuthRequest(name=name)
    assert AuthRequest(name="ci runner ñ 😀").name == "ci runner ñ 😀"
