"""Who exists, which tokens are good and who may do what: a fold of the identity events.

Applying an event never reads the clock; checks take `now` from the caller. Applying the same
event twice changes nothing (handlers assume at-least-once delivery)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from contracts.identity import (
    IdentityEvent,
    Permission,
    PermissionGranted,
    PermissionRevoked,
    PrincipalCreated,
    PrincipalDisabled,
    Role,
    Scope,
    ServiceKind,
    TenantCreated,
    TokenIssued,
    TokenRevoked,
)


@dataclass(frozen=True)
class Principal:
    id: str
    role: Role
    tenant: str | None = None
    service: ServiceKind | None = None
    disabled: bool = False

    @property
    def is_super_admin(self) -> bool:
        return self.role == "super_admin"

    @property
    def is_tenant_admin(self) -> bool:
        return self.role == "tenant_admin"

    def describe(self) -> str:
        if self.role == "service":
            return f"{self.id} (service: {self.service})"
        where = f" of tenant {self.tenant}" if self.tenant else ""
        return f"{self.id} ({self.role.replace('_', ' ')}{where})"


@dataclass(frozen=True)
class Grant:
    permission: Permission
    scope: Scope


@dataclass(frozen=True)
class TokenRecord:
    token_id: str
    principal: str
    salt: str
    digest: str
    expires_at: float | None
    name: str = ""
    revoked: bool = False

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass
class IdentityState:
    tenants: dict[str, str] = field(default_factory=dict)
    """tenant -> description"""
    principals: dict[str, Principal] = field(default_factory=dict)
    tokens: dict[str, TokenRecord] = field(default_factory=dict)
    grants: dict[str, set[Grant]] = field(default_factory=dict)
    revoked_external: set[str] = field(default_factory=set)
    """ids of revoked tokens that muster did not issue (identity-provider JWTs)"""
    last_seq: int = 0

    def apply(self, event: IdentityEvent, seq: int = 0) -> None:
        if seq and seq <= self.last_seq:
            return  # seen already (redelivery)
        self.last_seq = max(self.last_seq, seq)
        if isinstance(event, TenantCreated):
            self.tenants.setdefault(event.tenant, event.description)
        elif isinstance(event, PrincipalCreated):
            self.principals.setdefault(event.principal, Principal(event.principal, event.role, event.tenant, event.service))
        elif isinstance(event, PrincipalDisabled):
            if event.principal in self.principals:
                self.principals[event.principal] = replace(self.principals[event.principal], disabled=True)
        elif isinstance(event, TokenIssued):
            self.tokens.setdefault(event.token_id, TokenRecord(
                event.token_id, event.principal, event.salt, event.digest, event.expires_at, event.name))
        elif isinstance(event, TokenRevoked):
            if event.token_id in self.tokens:
                self.tokens[event.token_id] = replace(self.tokens[event.token_id], revoked=True)
            else:
                self.revoked_external.add(event.token_id)
        elif isinstance(event, PermissionGranted):
            self.grants.setdefault(event.principal, set()).add(Grant(event.permission, event.scope))
        elif isinstance(event, PermissionRevoked):
            self.grants.get(event.principal, set()).discard(Grant(event.permission, event.scope))

    def grants_of(self, principal: str) -> frozenset[Grant]:
        return frozenset(self.grants.get(principal, ()))

    def tokens_of(self, principal: str) -> list[TokenRecord]:
        return sorted((t for t in self.tokens.values() if t.principal == principal), key=lambda t: t.token_id)

    def super_admins(self) -> list[Principal]:
        return [p for p in self.principals.values() if p.is_super_admin and not p.disabled]
