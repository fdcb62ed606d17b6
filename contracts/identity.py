"""Identities on the wire: the identity events of the log, the requests to the auth service and
their replies (docs/security.md, docs/decisions/0009).

Identity events live on `muster.evt._auth.<aggregate>.<id>` (`_auth` can never be a tenant):
`tenant.<name>` (TenantCreated), `principal.<id>` (PrincipalCreated, PrincipalDisabled,
PermissionGranted, PermissionRevoked) and `token.<id>` (TokenIssued, TokenRevoked). A token is
never in an event: only a random salt and the SHA-256 of salt + secret.

Imports pydantic only, like the rest of `contracts`. The events do not subclass
`contracts.events.Event` (which imports this module to put them in its union); they share its
configuration.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from contracts.base import DEFERRED

IDENTITY_TENANT = "_auth"
"""The pseudo-tenant of identity events: tenant names starting with `_` are refused."""

RESERVED_TENANTS = frozenset({"provisioner", "auth", "metrics"})
"""Names that would collide with subjects of their own (`muster.q.provisioner.<id>.drain`)."""

PRINCIPAL_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
"""Principal ids are one subject token and never contain `_`, which separates a token's parts."""

RESERVED_PRINCIPALS = frozenset({"anonymous"})
"""Ids no principal may take: "anonymous" is who a request comes from on a bus without
authorization, where services take the body's `requested_by` instead (docs/security.md)."""

TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

Permission = Literal["read", "write", "execute", "grant", "approve"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "execute", "grant", "approve")
"""`approve`: decide (approve or reject) jobs that wait for approval (docs/governance.md)."""

OPERATION_PERMISSIONS: dict[str, Permission] = {
    "create": "write", "delete": "write", "expand": "write", "shrink": "write", "add-services": "write",
    "remove-services": "write", "configure": "write", "upgrade": "write", "rollback": "write",
    "start": "execute", "stop": "execute", "restart": "execute",
    "pause": "execute", "resume": "execute", "cancel": "execute", "retry": "execute",
    "extend-lease": "write", "repair": "write", "check": "execute",
    "apply": "write",  # a saved plan names its cluster only once loaded: write on every cluster
    "approve": "approve", "reject": "approve",  # a job waiting for approval (docs/governance.md)
}
"""What each operation needs on its cluster or job (docs/security.md): the planner checks it, and the
CLI's lookup of the cluster asks the tracker for it (`LOOKUP_PERMISSIONS`)."""

LOOKUP_PERMISSIONS: tuple[Permission, ...] = ("read", "write", "execute", "approve")
"""What `GET /v1/events?cluster=...&needs=` may ask for: the read of a cluster before an
operation (`muster cluster expand web`) asks for the operation's permission, so its refusal
names the grant the operation needs, for every client. Each covers `read` (`grant` does not)."""

Role = Literal["super_admin", "tenant_admin", "user", "service"]
ServiceKind = Literal["planner", "solver", "tracker", "provisioner", "pool", "governance", "notifier", "system"]
SERVICE_KINDS: tuple[ServiceKind, ...] = ("planner", "solver", "tracker", "provisioner", "pool", "governance", "notifier", "system")
ScopeKind = Literal["tenant", "cluster", "job", "catalog", "queue"]


def valid_principal_id(value: str) -> bool:
    return isinstance(value, str) and PRINCIPAL_ID.fullmatch(value) is not None


def tenant_name_problem(name: str) -> str | None:
    """Why `name` cannot be a tenant, or None."""
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        return f"tenant {name!r} is not a valid name: use 1-64 letters, digits, '-' or '_', starting with a letter or digit"
    if name in RESERVED_TENANTS:
        return f"tenant name {name!r} is reserved"
    return None


class Scope(BaseModel):
    """What a permission applies to, inside one tenant: the whole tenant, every entity of a kind
    (`id="*"`), or one entity. A job names its cluster so that a grant on the cluster covers it.
    Catalog ids are `<kind>/<name>`; queue ids are provisioner classes (provisioners only)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    tenant: str = Field(min_length=1, max_length=128)
    kind: ScopeKind = "tenant"
    id: str = Field(default="*", min_length=1, max_length=300)
    cluster: str | None = Field(default=None, description="for a job: its cluster")

    def __str__(self) -> str:
        return f"{self.tenant}:tenant" if self.kind == "tenant" else f"{self.tenant}:{self.kind}:{self.id}"

    @classmethod
    def parse(cls, tenant: str, text: str, strict: bool = True) -> Scope:
        """`tenant`, `cluster:<id>`, `cluster:*`, `job:<id>`, `catalog:<kind>/<name>`, `catalog:*`,
        `queue:<class>` (raises ValueError with a reason). `strict`: the id must be one its kind
        can have (a grant); a revocation takes any, to take back what an older version stored."""
        if text in ("", "tenant"):
            return cls(tenant=tenant)
        kind, sep, ident = text.partition(":")
        if not sep or kind not in ("cluster", "job", "catalog", "queue") or not ident:
            raise ValueError(f"scope {text!r} is not one of tenant, cluster:<id>, job:<id>, catalog:<kind>/<name>, queue:<class> (or <kind>:*)")
        if strict:
            ident = _scope_id(kind, ident, text)
        return cls(tenant=tenant, kind=kind, id=ident)  # type: ignore[arg-type]


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,127}$")
CATALOG_KINDS = ("providers", "hardwaretypes", "imagetypes", "services", "clustertemplates", "partialtemplates")


def _scope_id(kind: str, ident: str, text: str) -> str:
    """The id of a granted scope, or ValueError saying what its kind takes: a wildcard is `*`
    alone (a grant never holds a subject pattern such as `*.>`)."""
    if ident == "*":
        return ident
    if kind in ("cluster", "job"):
        if not _UUID.fullmatch(ident):
            raise ValueError(f"scope {text!r}: a {kind} scope names one {kind} by its id (a UUID; `muster {kind} show` "
                             f"prints it) or every {kind} (`{kind}:*`)")
        return ident.lower()
    if kind == "catalog":
        what, _, name = ident.partition("/")
        if what not in CATALOG_KINDS or not _NAME.fullmatch(name):
            raise ValueError(f"scope {text!r}: a catalog scope is catalog:<kind>/<name> with a kind of "
                             f"{', '.join(CATALOG_KINDS)} and an entity's name, or catalog:*")
        return ident
    if not _NAME.fullmatch(ident):
        raise ValueError(f"scope {text!r}: a queue scope names a provisioner class (letters, digits, '-', '_') or every queue (queue:*)")
    return ident


class IdentityEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class TenantCreated(IdentityEvent):
    type: Literal["TenantCreated"] = "TenantCreated"
    v: Literal[1] = 1
    tenant: str
    description: str = ""
    by: str


class PrincipalCreated(IdentityEvent):
    """A user, a tenant admin, a super admin or a service identity."""

    type: Literal["PrincipalCreated"] = "PrincipalCreated"
    v: Literal[1] = 1
    principal: str
    role: Role
    tenant: str | None = Field(default=None, description="users and tenant admins belong to one tenant")
    service: ServiceKind | None = Field(default=None, description="for role `service`: what it is")
    by: str

    @field_validator("principal")
    @classmethod
    def _id(cls, value: str) -> str:
        if not valid_principal_id(value):
            raise ValueError(f"principal id {value!r}: use 1-64 lowercase letters, digits or '-'")
        return value


class PrincipalDisabled(IdentityEvent):
    type: Literal["PrincipalDisabled"] = "PrincipalDisabled"
    v: Literal[1] = 1
    principal: str
    reason: str = ""
    by: str


class TokenIssued(IdentityEvent):
    """A bearer token was made for `principal`. The token itself was shown once and is
    nowhere: `digest` is SHA-256(salt + secret), hex."""

    type: Literal["TokenIssued"] = "TokenIssued"
    v: Literal[1] = 1
    token_id: str
    principal: str
    salt: str
    digest: str
    expires_at: float | None = Field(default=None, description="Unix time; none = until revoked")
    name: str = Field(default="", max_length=128, description="what the token is for (free text)")
    by: str


class TokenRevoked(IdentityEvent):
    type: Literal["TokenRevoked"] = "TokenRevoked"
    v: Literal[1] = 1
    token_id: str
    principal: str
    by: str


class PermissionGranted(IdentityEvent):
    type: Literal["PermissionGranted"] = "PermissionGranted"
    v: Literal[1] = 1
    principal: str
    permission: Permission
    scope: Scope
    by: str


class PermissionRevoked(IdentityEvent):
    type: Literal["PermissionRevoked"] = "PermissionRevoked"
    v: Literal[1] = 1
    principal: str
    permission: Permission
    scope: Scope
    by: str


IDENTITY_EVENTS: tuple[type[IdentityEvent], ...] = (
    TenantCreated, PrincipalCreated, PrincipalDisabled, TokenIssued, TokenRevoked, PermissionGranted, PermissionRevoked,
)


# -- requests to the auth service: muster.auth.<principal>.<verb> ------------------------------
# The requester is the subject's principal (the server lets no one else use it); bodies are JSON.

AUTH_VERBS = (
    "whoami", "tenant-create", "tenant-list", "user-create", "user-list", "user-disable",
    "token-create", "token-revoke", "token-list", "grant", "revoke",
)


_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters, and the bidirectional ones that make text read other than it is stored
(U+202E turns what follows around): a token's name, a reason, a tenant's description are shown
in lists and terminals."""


def _plain_text(value: str) -> str:
    found = _UNSEEN.search(value)
    if found is not None:
        raise ValueError(f"has a control or bidirectional character (U+{ord(found.group()):04X}): give plain text")
    return value


PlainText = Annotated[str, AfterValidator(_plain_text)]


class AuthRequest(BaseModel):
    """Every auth request body: a verb takes only the fields it reads (`AUTH_VERB_FIELDS`); another
    one given a value is refused, naming it (`auth_body_problems`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tenant: str | None = Field(default=None, max_length=128)
    principal: str | None = Field(default=None, max_length=64, description="the user or service the request is about")
    role: Literal["tenant_admin", "user", "super_admin", "service"] | None = None
    service: ServiceKind | None = None
    description: PlainText = Field(default="", max_length=500)
    token_id: str | None = Field(default=None, max_length=64)
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)
    name: PlainText = Field(default="", max_length=128)
    permission: Permission | None = None
    scope: str | None = Field(default=None, max_length=400, description="tenant, cluster:<id>, job:<id>, catalog:<kind>/<name>, queue:<class>")
    reason: PlainText = Field(default="", max_length=500)


AUTH_VERB_FIELDS: dict[str, tuple[str, ...]] = {
    "whoami": (), "tenant-create": ("tenant", "description"), "tenant-list": (),
    "user-create": ("principal", "tenant", "role", "service", "expires_in_s", "name"), "user-list": ("tenant",),
    "user-disable": ("principal", "reason"), "token-create": ("principal", "expires_in_s", "name"),
    "token-revoke": ("token_id", "principal"), "token-list": ("principal",),
    "grant": ("principal", "permission", "tenant", "scope"), "revoke": ("principal", "permission", "tenant", "scope"),
}
"""The body fields each verb reads (a user's first token's `name` and `expires_in_s` too)."""
TOKEN_ID = re.compile(r"^(?:[0-9a-f]{12}|jwt-[!-~]{1,60})$")
"""A muster token's id, or an identity provider's token's (`jwt-` and its `jti`, or a digest)."""


def auth_body_problems(verb: str, request: AuthRequest) -> list[str]:
    """What makes `request` no body of `verb`, each naming its field, before the verb reads it:
    a field it does not read given a value (a `name` to whoami, a `tenant` to token-create was
    ignored, and the request answered as another one), and a tenant, principal, token id or
    scope that none can be (a NUL in a tenant was answered about the missing principal)."""
    takes = AUTH_VERB_FIELDS.get(verb)
    if takes is None:
        return []
    given = [f for f in AuthRequest.model_fields if getattr(request, f) not in (None, "")]
    unread = [f for f in given if f not in takes]
    problems = [f"{verb} takes no {', '.join(unread)} (it takes {', '.join(takes) or 'no field'})"] if unread else []
    tenant, principal, token_id, scope = (getattr(request, f) if f in takes else None for f in ("tenant", "principal", "token_id", "scope"))
    if tenant and not TENANT_NAME.fullmatch(tenant):
        problems.append(f"tenant {tenant!r} is not a valid name: use 1-64 letters, digits, '-' or '_', starting with a letter or digit")
    if principal and not valid_principal_id(principal):
        problems.append(f"principal id {principal!r}: use 1-64 lowercase letters, digits or '-', starting with a letter or digit")
    if token_id and not TOKEN_ID.fullmatch(token_id):
        problems.append(f"token_id {token_id!r} is no token's id: `muster token list` shows them (12 hex digits, or jwt-...)")
    if scope and (_UNSEEN.search(scope) or " " in scope):
        problems.append(f"scope {scope!r} has a space, control or bidirectional character: no scope has one")
    return problems


class AuthReply(BaseModel):
    """`ok` with `data`, or not `ok` with a reason a person understands."""

    model_config = DEFERRED

    ok: bool
    reason: str = ""
    data: Any = None
    code: Literal["forbidden"] | None = Field(default=None, description=(
        "`forbidden` when the requester may not do it (the reason says why); left out otherwise"))

    @model_serializer(mode="wrap")
    def _without_code(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("code") is None:
            data.pop("code", None)
        return data
