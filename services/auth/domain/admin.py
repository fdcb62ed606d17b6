"""The identity requests (`muster tenant|user|token|grant|revoke|whoami`), decided without IO:
each returns the events to append and the reply. The requester is the principal the request's
subject names, which the server checked (docs/decisions/0009).

Who may do what: a super admin everything; a tenant admin users, tokens and grants of its own
tenant; anyone their own tokens, `whoami`, and grants they hold `grant` for (authz.may_grant).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contracts import subjects
from contracts.identity import (
    RESERVED_PRINCIPALS,
    AuthReply,
    AuthRequest,
    IdentityEvent,
    PermissionGranted,
    PermissionRevoked,
    PrincipalCreated,
    PrincipalDisabled,
    Scope,
    TenantCreated,
    TokenIssued,
    TokenRevoked,
    auth_body_problems,
    tenant_name_problem,
    valid_principal_id,
)

from . import tokens
from .authz import may_grant
from .buspermissions import bus_permissions, provisioner_queues
from .state import Grant, IdentityState, Principal

Random = Callable[[int], bytes]


class Refused(Exception):
    pass


class Forbidden(Refused):
    """Refused because the requester may not do it (the reply's code is `forbidden`)."""


def _super(p: Principal) -> bool:
    """Super admins, and the `system` service (test harnesses, maintenance), administer all."""
    return p.is_super_admin or p.service == "system"


def _elsewhere(me: Principal, target: Principal | None) -> bool:
    """Another tenant's person, or nobody, asked about by a tenant's person: a refusal says no
    more than that, the same words for both (whether a principal exists elsewhere, its role and
    its tenant are that tenant's business; tenants do not see each other)."""
    in_a_tenant = not _super(me) and me.tenant is not None
    return in_a_tenant and (target is None or (target.tenant is not None and target.tenant != me.tenant))


@dataclass
class Result:
    reply: AuthReply
    appends: list[tuple[str, IdentityEvent, int | None]] = field(default_factory=list)
    """(subject, event, expected last subject sequence or None)"""


def ok(data: Any, *appends: tuple[str, IdentityEvent, int | None]) -> Result:
    return Result(AuthReply(ok=True, data=data), list(appends))


def describe_principal(state: IdentityState, p: Principal) -> dict[str, Any]:
    grants = sorted(state.grants_of(p.id), key=lambda g: (str(g.scope), g.permission))
    return {"principal": p.id, "role": p.role, "tenant": p.tenant, "service": p.service, "disabled": p.disabled,
            "grants": [{"permission": g.permission, "scope": str(g.scope)} for g in grants]}


class Admin:
    def __init__(self, state: IdentityState, random: Random, now: float) -> None:
        self.state, self.random, self.now = state, random, now

    def handle(self, requester_id: str, verb: str, request: AuthRequest) -> Result:
        me = self.state.principals.get(requester_id)
        if me is None or me.disabled:
            return Result(AuthReply(ok=False, reason=f"{requester_id} is not an enabled principal"))
        handler = getattr(self, "do_" + verb.replace("-", "_"), None)
        if handler is None:
            return Result(AuthReply(ok=False, reason=f"unknown auth request {verb!r}"))
        problems = auth_body_problems(verb, request)
        if problems:
            return Result(AuthReply(ok=False, reason="; ".join(problems)))
        try:
            result: Result = handler(me, request)
            return result
        except Refused as err:
            return Result(AuthReply(ok=False, reason=str(err), code="forbidden" if isinstance(err, Forbidden) else None))

    # -- helpers ------------------------------------------------------------------------------

    def _tenant_of_request(self, me: Principal, request: AuthRequest) -> str:
        tenant = request.tenant or me.tenant
        if tenant is None:
            raise Refused("name a tenant (--tenant)")
        if not _super(me) and tenant != me.tenant:
            raise Forbidden(f"{me.id} belongs to tenant {me.tenant}, not {tenant}")
        if tenant not in self.state.tenants:
            raise Refused(f"no tenant {tenant!r}")
        return tenant

    def _managed(self, me: Principal, principal_id: str | None) -> Principal:
        """A principal `me` administers: itself, its tenant's people (tenant admin), anyone (super admin)."""
        target = self.state.principals.get(principal_id or me.id)
        if _elsewhere(me, target):
            raise Forbidden(f"{me.id} cannot administer {principal_id}: not a principal of tenant {me.tenant}")
        if target is None:
            raise Refused(f"no principal {principal_id!r}")
        if _super(me) or target.id == me.id:
            return target
        if me.is_tenant_admin and target.role in ("user", "tenant_admin") and target.tenant == me.tenant:
            return target
        raise Forbidden(f"{me.id} cannot administer {target.describe()}")

    def _issue(self, me: Principal, target: Principal, request: AuthRequest) -> tuple[str, tuple[str, IdentityEvent, int | None]]:
        token, token_id, salt, digest = tokens.make_token(target.id, self.random(6), self.random(32), self.random(16))
        expires = self.now + request.expires_in_s if request.expires_in_s else None
        event = TokenIssued(token_id=token_id, principal=target.id, salt=salt, digest=digest, expires_at=expires,
                            name=request.name, by=me.id)
        return token, (subjects.identity_events("token", token_id), event, 0)

    # -- verbs --------------------------------------------------------------------------------

    def do_whoami(self, me: Principal, request: AuthRequest) -> Result:
        data = describe_principal(self.state, me)
        perms = bus_permissions(me, self.state.grants_of(me.id))
        data["inbox"] = subjects.inbox_prefix(me.id)
        data["bus"] = {"publish": list(perms.pub), "subscribe": list(perms.sub)}
        if me.service == "provisioner":
            data["queues"] = [{"tenant": t, "class": c} for t, c in provisioner_queues(self.state.grants_of(me.id))]
        return ok(data)

    def do_tenant_create(self, me: Principal, request: AuthRequest) -> Result:
        if not _super(me):
            raise Forbidden("only a super admin creates tenants")
        name = request.tenant or ""
        problem = tenant_name_problem(name)
        if problem or name.startswith("_"):
            raise Refused(problem or f"tenant names starting with '_' are reserved ({name!r})")
        if name in self.state.tenants:
            raise Refused(f"tenant {name!r} exists already")
        event = TenantCreated(tenant=name, description=request.description, by=me.id)
        return ok({"tenant": name}, (subjects.identity_events("tenant", name), event, 0))

    def do_tenant_list(self, me: Principal, request: AuthRequest) -> Result:
        names = sorted(self.state.tenants) if _super(me) else [t for t in [me.tenant] if t in self.state.tenants]
        return ok([{"tenant": t, "description": self.state.tenants[t]} for t in names])

    def do_user_create(self, me: Principal, request: AuthRequest) -> Result:
        pid, role = request.principal or "", request.role or "user"
        if not valid_principal_id(pid):
            raise Refused(f"principal id {pid!r}: use 1-64 lowercase letters, digits or '-', starting with a letter or digit")
        if pid in RESERVED_PRINCIPALS:
            raise Refused(f"principal id {pid!r} is reserved: it names the sender of a request on a bus without authorization")
        if pid in self.state.principals:
            raise Refused(f"principal {pid!r} exists already")
        if role in ("super_admin", "service"):
            if not _super(me):
                raise Forbidden(f"only a super admin creates {role.replace('_', ' ')}s")
            if role == "service" and request.service is None:
                raise Refused("a service principal needs --service (planner, solver, tracker, provisioner or system)")
            tenant = None
        else:
            if not (_super(me) or me.is_tenant_admin):
                raise Forbidden("only a super admin or a tenant admin creates users")
            tenant = self._tenant_of_request(me, request)
        created = PrincipalCreated(principal=pid, role=role, tenant=tenant,
                                   service=request.service if role == "service" else None, by=me.id)
        target = Principal(pid, role, tenant, created.service)
        token, issued = self._issue(me, target, request)
        return ok({"principal": pid, "role": role, "tenant": tenant, "token": token, "token_id": issued[1].token_id},  # type: ignore[attr-defined]
                  (subjects.identity_events("principal", pid), created, 0), issued)

    def do_user_list(self, me: Principal, request: AuthRequest) -> Result:
        if _super(me) and not request.tenant:
            people = list(self.state.principals.values())
        else:
            tenant = self._tenant_of_request(me, request)
            if not (_super(me) or me.is_tenant_admin):
                people = [me]
            else:
                people = [p for p in self.state.principals.values() if p.tenant == tenant]
        return ok([describe_principal(self.state, p) for p in sorted(people, key=lambda p: p.id)])

    def do_user_disable(self, me: Principal, request: AuthRequest) -> Result:
        target = self._managed(me, request.principal or "")
        if target.disabled:
            return ok({"principal": target.id, "disabled": True})
        if target.is_super_admin and len(self.state.super_admins()) <= 1:
            raise Refused("cannot disable the last super admin")
        event = PrincipalDisabled(principal=target.id, reason=request.reason, by=me.id)
        return ok({"principal": target.id, "disabled": True}, (subjects.identity_events("principal", target.id), event, None))

    def do_token_create(self, me: Principal, request: AuthRequest) -> Result:
        target = self._managed(me, request.principal)
        if target.disabled:
            raise Refused(f"{target.id} is disabled")
        token, issued = self._issue(me, target, request)
        event = issued[1]
        assert isinstance(event, TokenIssued)
        return ok({"principal": target.id, "token": token, "token_id": event.token_id, "expires_at": event.expires_at}, issued)

    def do_token_list(self, me: Principal, request: AuthRequest) -> Result:
        target = self._managed(me, request.principal)
        return ok([{"token_id": t.token_id, "name": t.name, "expires_at": t.expires_at, "revoked": t.revoked}
                   for t in self.state.tokens_of(target.id)])

    def do_token_revoke(self, me: Principal, request: AuthRequest) -> Result:
        token_id = request.token_id or ""
        record = self.state.tokens.get(token_id)
        if record is not None and _elsewhere(me, self.state.principals.get(record.principal)):
            record = None  # another tenant's token: answered as one nobody has (its owner named it to a stranger)
        if record is not None:
            target = self._managed(me, record.principal)
        elif token_id.startswith("jwt-") and request.principal:
            target = self._managed(me, request.principal)
            if token_id in self.state.revoked_external:
                return ok({"token_id": token_id, "revoked": True})
        else:
            raise Refused(f"no token {token_id!r} (an identity provider's token, jwt-..., needs --for PRINCIPAL too)")
        if record is not None and record.revoked:
            return ok({"token_id": token_id, "revoked": True})
        event = TokenRevoked(token_id=token_id, principal=target.id, by=me.id)
        subject = subjects.identity_events("token", token_id) if record else subjects.identity_events("principal", target.id)
        return ok({"token_id": token_id, "principal": target.id, "revoked": True}, (subject, event, None))

    def _grant_change(self, me: Principal, request: AuthRequest, strict: bool = True, verb: str = "grant") -> tuple[Principal, Scope]:
        if request.permission is None or not request.principal:
            raise Refused("name a principal and a permission (read, write, execute or grant)")
        grantee = self.state.principals.get(request.principal)
        if _elsewhere(me, grantee):
            raise Forbidden(f"{request.principal} is not a principal of tenant {me.tenant}: grants stay inside a tenant")
        if grantee is None:  # (a tenant's person was answered above, in the words another tenant's gets)
            raise Refused(f"no principal {request.principal!r}")
        tenant = request.tenant or (grantee.tenant if grantee else None) or me.tenant
        if tenant is None:
            raise Refused("name a tenant (--tenant)")
        try:
            scope = Scope.parse(tenant, request.scope or "tenant", strict=strict)
        except ValueError as err:
            raise Refused(str(err)) from None
        if tenant not in self.state.tenants:
            raise Refused(f"no tenant {tenant!r}")
        decision = may_grant(me, self.state.grants_of(me.id), grantee, request.permission, scope, verb)
        if not decision:
            raise Forbidden(decision.reason)
        assert grantee is not None
        return grantee, scope

    def do_grant(self, me: Principal, request: AuthRequest) -> Result:
        grantee, scope = self._grant_change(me, request)
        assert request.permission is not None
        event = PermissionGranted(principal=grantee.id, permission=request.permission, scope=scope, by=me.id)
        return ok({"principal": grantee.id, "permission": request.permission, "scope": str(scope)},
                  (subjects.identity_events("principal", grantee.id), event, None))

    def do_revoke(self, me: Principal, request: AuthRequest) -> Result:
        grantee, scope = self._grant_change(me, request, strict=False, verb="revoke")  # what an older version let in goes too
        assert request.permission is not None
        if Grant(request.permission, scope) not in self.state.grants_of(grantee.id):  # said, not recorded ("revoked" before)
            return ok({"principal": grantee.id, "permission": request.permission, "scope": str(scope), "revoked": False})
        event = PermissionRevoked(principal=grantee.id, permission=request.permission, scope=scope, by=me.id)
        return ok({"principal": grantee.id, "permission": request.permission, "scope": str(scope), "revoked": True},
                  (subjects.identity_events("principal", grantee.id), event, None))


def bootstrap(state: IdentityState, principal_id: str, role: str, random: Random, now: float, by: str,
              service: str | None = None, name: str = "", token: str | None = None) -> tuple[str, list[tuple[str, IdentityEvent, int | None]]]:
    """Events that create a super admin or a service principal with one token, for the first
    start (`muster up`, `muster auth --bootstrap`): no requester exists yet to ask for them.
    `token`: register this very token (a test harness's) instead of making one; nothing to
    append when it is registered already."""
    appends: list[tuple[str, IdentityEvent, int | None]] = []
    if principal_id not in state.principals:
        created = PrincipalCreated(principal=principal_id, role=role, service=service, by=by)  # type: ignore[arg-type]
        appends.append((subjects.identity_events("principal", principal_id), created, 0))
    if token is None:
        token, token_id, salt, digest = tokens.make_token(principal_id, random(6), random(32), random(16))
    else:
        parsed = tokens.parse(token)
        if parsed.principal != principal_id:
            raise tokens.TokenError(f"the given token is {parsed.principal}'s, not {principal_id}'s")
        token_id, salt = parsed.token_id, random(16).hex()
        digest = tokens.digest(salt, parsed.secret)
        if token_id in state.tokens:
            return token, appends
    issued = TokenIssued(token_id=token_id, principal=principal_id, salt=salt, digest=digest, name=name, by=by)
    appends.append((subjects.identity_events("token", token_id), issued, 0))
    return token, appends
