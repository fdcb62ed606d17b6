"""Who is looking: the console's tenant and what the viewer may do.

The console answers for one tenant per browser, the same way the API answers for one tenant per
request. Which tenant is decided by a `ConsoleAuth`:

- `TenantCookie` (the default, while the tracker has no authentication): the tenant the API
  would answer for — the one chosen on the sign-in page, kept in the `muster_tenant` cookie,
  `default` without one, exactly what the `X-Muster-Tenant` header does for the API;
- an authenticating backend (bearer tokens) plugs in through `CONSOLE_AUTH`: the sign-in page
  then asks for a token, which goes into the HttpOnly cookie `muster_session` and is checked on
  every request by the tracker's own check; the tenant and the permissions come from the
  principal, never from the URL.

Either way a page only ever reads the viewer's tenant, so another tenant's id is "not found";
with tokens, a cluster or job of the tenant the principal may not read is "not found" too, and
job control is offered per job (`Viewer.may_cluster`, `Viewer.may_job`; pages.py asks them).
Forms that change something (sign-in, job control) must come from the console's own pages
(same-origin `Origin` check; the cookies are also `SameSite=Strict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from contracts import subjects
from contracts.identity import Permission, Scope

TENANT_COOKIE = "muster_tenant"
SESSION_COOKIE = "muster_session"
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Viewer:
    tenant: str
    name: str
    """Recorded as who asked, on job-control requests."""
    chosen: bool = False
    """The tenant (or token) was chosen on the sign-in page, not defaulted."""
    may: Callable[[Permission, Scope], object] | None = field(default=None, compare=False, repr=False)
    """With tokens: the principal's grants, asked as the API asks them (auth.Authz.may). None (no
    authentication): the whole tenant."""
    operator: bool = True
    """Sees the deployment's names (a planner's instance name); a tenant's people see "a
    planner" (planner_view.py). Without authentication, as the API: everything."""

    def may_cluster(self, permission: Permission, cluster_id: str) -> bool:
        return self.may is None or bool(self.may(permission, Scope(tenant=self.tenant, kind="cluster", id=cluster_id)))

    def why_not_cluster(self, permission: Permission, cluster_id: str) -> str:
        """Why the viewer may not, with the grant to ask for ('' when it may)."""
        if self.may is None:
            return ""
        decision = self.may(permission, Scope(tenant=self.tenant, kind="cluster", id=cluster_id))
        return "" if decision else str(getattr(decision, "reason", "") or f"{self.name} may not {permission} every cluster")

    def may_catalog(self, permission: Permission, kind: str, name: str) -> bool:
        """A grant on the entity, on the whole catalog (`catalog:*`) or the tenant."""
        return self.may is None or bool(self.may(permission, Scope(tenant=self.tenant, kind="catalog", id=f"{kind}/{name}")))

    def may_job(self, permission: Permission, job_id: str, cluster_id: str | None) -> bool:
        """A grant on the job, or on its cluster, covers it (as for the API)."""
        scope = Scope(tenant=self.tenant, kind="job", id=job_id, cluster=cluster_id)
        return self.may is None or bool(self.may(permission, scope))

    def why_not_job(self, permission: Permission, job_id: str, cluster_id: str | None) -> str:
        """Why the viewer may not, with the grant to ask for, in the API's words ('' when it may)."""
        if self.may is None:
            return ""
        decision = self.may(permission, Scope(tenant=self.tenant, kind="job", id=job_id, cluster=cluster_id))
        return "" if decision else str(getattr(decision, "reason", "") or f"{self.name} may not {permission} job {job_id}")


class NeedsSignIn(Exception):
    """No valid credential: the page redirects to the sign-in page (401 for scripts). `refused`:
    a token was given and refused (revoked, expired, its principal disabled), not none at all."""

    def __init__(self, reason: str, refused: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refused = refused

    @property
    def told(self) -> str:
        """What the sign-in page says: a refused token as no longer valid, with why."""
        if not self.refused:
            return self.reason
        return f"Your token is no longer valid ({self.reason}): sign in again with a current one."


class ConsoleAuth(Protocol):
    asks_for: str
    """What the sign-in page asks for: "tenant" or "token"."""

    async def viewer(self, request: web.Request) -> Viewer:
        """The viewer of this request; raises NeedsSignIn."""
        ...

    async def sign_in(self, request: web.Request, secret: str, response: web.StreamResponse) -> Viewer:
        """Check `secret`, remember it on `response` (a cookie); raises NeedsSignIn with a reason."""
        ...

    def sign_out(self, response: web.StreamResponse) -> None: ...


CONSOLE_AUTH = web.AppKey("console_auth", ConsoleAuth)


def set_cookie(response: web.StreamResponse, request: web.Request, name: str, value: str) -> None:
    response.set_cookie(name, value, path="/", httponly=True, samesite="Strict", secure=request.secure,
                        max_age=30 * 24 * 3600)


class TenantCookie:
    """No authentication yet: the tenant the API answers for, chosen like its header."""

    asks_for = "tenant"

    async def viewer(self, request: web.Request) -> Viewer:
        raw = request.cookies.get(TENANT_COOKIE)
        if raw and subjects.TOKEN.fullmatch(raw):
            return Viewer(tenant=raw, name="console", chosen=True)
        return Viewer(tenant=DEFAULT_TENANT, name="console")

    async def sign_in(self, request: web.Request, secret: str, response: web.StreamResponse) -> Viewer:
        tenant = secret.strip()
        if not subjects.TOKEN.fullmatch(tenant):
            raise NeedsSignIn(f"{tenant[:80]!r} is not a tenant name: use 1-128 letters, digits, '-' or '_'")
        set_cookie(response, request, TENANT_COOKIE, tenant)
        return Viewer(tenant=tenant, name="console", chosen=True)

    def sign_out(self, response: web.StreamResponse) -> None:
        response.del_cookie(TENANT_COOKIE, path="/")


def auth_of(request: web.Request) -> ConsoleAuth:
    return request.app.get(CONSOLE_AUTH) or _DEFAULT


_DEFAULT = TenantCookie()


async def viewer_of(request: web.Request) -> Viewer:
    return await auth_of(request).viewer(request)


def session_token(request: web.Request) -> str | None:
    """The viewer's bearer token (the session cookie, or an `Authorization` header for scripts);
    None without authentication. Writes are sent with it (acting.py), forms are bound to it (csrf.py)."""
    if auth_of(request).asks_for != "token":
        return None
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(SESSION_COOKIE) or None


def same_origin(request: web.Request) -> bool:
    """A form post from the console's own pages: browsers send `Origin` on POST; a page of
    another site cannot forge it."""
    origin = request.headers.get("Origin")
    if origin is None:
        return request.headers.get("Sec-Fetch-Site") in (None, "same-origin")
    return origin == f"{request.scheme}://{request.host}"
