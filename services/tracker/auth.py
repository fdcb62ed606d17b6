"""Who is asking, and may they: the tracker's bearer-token check (docs/tracker.md, "Access").

Every /v1 route needs a token, as `Authorization: Bearer <token>` or (for the console, where a
browser cannot set headers on EventSource) the HttpOnly cookie `muster_session`. The token is
checked here, with the same identity backends as the auth service and the same identity events
(an `IdentityView` of this process), so a request costs no extra hop. /metrics needs a super
admin's or a service's token; /healthz, /v1/openapi.json and the console's static files (its
stylesheet and scripts, which the sign-in page loads before anyone has signed in) need none.

The principal's tenant is the only one it may ask about (`X-Muster-Tenant` may only repeat it);
super admins and the `system` service name the tenant with that header. Handlers find the
principal in `request[PRINCIPAL]` and ask `request[AUTHZ].may(permission, scope)`.

A tracker on a server that does not authorize connections (auth off: benchmarks, old deployments) lets every
request through as `anonymous`, in the tenant the header names.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from contracts import subjects
from contracts.identity import Permission, Scope
from services.auth.backends import Authenticated, AuthError, IdentityBackend
from services.auth.domain.authz import Decision, how_to_get, may, unmade_tenant
from services.auth.domain.state import IdentityState, Principal
from services.auth.domain.tokens import TokenError, check_size

from . import api
from .still import ALWAYS, Still

COOKIE = "muster_session"
OPEN_ROUTES = frozenset({"healthz", "openapi", "ui-static"})
OPERATOR_ROUTES = frozenset({"metrics"})
ANONYMOUS = Principal(subjects.ANONYMOUS, "service", service="system")


@dataclass(frozen=True)
class Authz:
    """What the request's principal may do (console: `request[AUTHZ].may("execute", scope)`)."""

    principal: Principal
    state: IdentityState | None
    tenant: str

    def may(self, permission: Permission, scope: Scope) -> Decision:
        """A refusal says what to do about it (`how_to_get`), as the planner's do."""
        if self.state is None:
            return Decision(True)
        grants = self.state.grants_of(self.principal.id)
        decision = may(self.principal, grants, permission, scope)
        return decision if decision else Decision(False, decision.reason + how_to_get(self.principal, permission, scope, grants))

    def require(self, permission: Permission, scope: Scope) -> None:
        decision = self.may(permission, scope)
        if not decision:
            raise Forbidden(decision.reason)


class Forbidden(Exception):
    pass


PRINCIPAL = web.RequestKey("principal", Principal)
AUTHZ = web.RequestKey("authz", Authz)
AGAIN: web.RequestKey[Callable[[], Authz]] = web.RequestKey("authorize_again")
"""The request's token checked again, as the guard did (a stream asks before each event: still.py)."""


class Unauthorized(Exception):
    pass


class UnknownTenant(Exception):
    """A 400 naming `X-Muster-Tenant`, as for a malformed tenant name (docs/tracker.md, "Access")."""


TENANTLESS_ROUTES = frozenset({"whoami"}) | OPERATOR_ROUTES
"""Routes whose answer is not about a tenant: a tenant named to them is not checked."""
LOG_SCOPES = frozenset({subjects.SYSTEM, subjects.IDENTITY})
"""The log's own scopes (the pools', the identities'): no one makes them (a tenant's name starts
with no `_`), and an operator reads them (`muster events --tenant _system`, docs/tracker.md)."""


def _token_of(request: web.Request) -> str | None:
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        return value.strip()
    return request.cookies.get(COOKIE) or None


class HttpAuth:
    def __init__(self, state: IdentityState, backends: Sequence[IdentityBackend]) -> None:
        self.state = state
        self.backends = backends

    def authenticate(self, token: str) -> Authenticated:
        try:
            check_size(token)
        except TokenError as err:
            raise Unauthorized(str(err)) from None
        backend = next((b for b in self.backends if b.accepts(token)), None)
        if backend is None:
            raise Unauthorized("malformed token: neither a muster token (mst_...) nor a JWT")
        try:
            return backend.authenticate(token, time.time())
        except AuthError as err:
            raise Unauthorized(str(err)) from None

    def authorize(self, request: web.Request, route: str) -> Authz:
        token = _token_of(request)
        if token is None:
            raise Unauthorized("this route needs a token: 'Authorization: Bearer <token>' (see muster token create)")
        principal = self.authenticate(token).principal
        if route in OPERATOR_ROUTES and not (principal.is_super_admin or principal.role == "service"):
            raise Forbidden(f"{principal.id} may not read metrics: they need a super admin's or a service's token")
        asked = request.headers.get(api.TENANT_HEADER)
        if principal.tenant is not None:
            if asked is not None and asked != principal.tenant:
                raise Forbidden(f"{principal.id} belongs to tenant {principal.tenant}; it cannot ask about tenant {asked[:64]!r}")
            tenant = principal.tenant
        elif principal.is_super_admin or principal.service in ("system", "tracker"):
            tenant = asked if asked is not None else api.DEFAULT_TENANT  # checked by the handler (400)
            unmade = "" if route in TENANTLESS_ROUTES or (tenant in LOG_SCOPES and request.method in ("GET", "HEAD")) \
                else unmade_tenant(principal, self.state.tenants, tenant)
            if unmade and subjects.TOKEN.fullmatch(tenant):  # (a malformed name gets its own 400)
                raise UnknownTenant(unmade)
        else:
            raise Forbidden(f"{principal.describe()} cannot use the tracker's API")
        return Authz(principal, self.state, tenant)


def error(status: int, message: str, parameter: str | None = None) -> web.Response:
    response = web.json_response({"error": {"status": status, "message": message, "parameter": parameter}}, status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = f'Bearer realm="muster", error="invalid_token", error_description="{message[:200]}"'
    return response


def middleware(auth: Callable[[], HttpAuth | None]) -> Any:
    """aiohttp middleware: 401 / 403 with a reason, or the principal on the request."""

    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        route = request.match_info.route.name or ""
        current = auth()
        if current is None or route in OPEN_ROUTES or not route:
            request[PRINCIPAL] = ANONYMOUS
            request[AUTHZ] = Authz(ANONYMOUS, None, request.headers.get(api.TENANT_HEADER, api.DEFAULT_TENANT))
            return await handler(request)
        try:
            authz = current.authorize(request, route)
        except Unauthorized as err:
            return error(401, str(err))
        except Forbidden as err:
            return error(403, str(err))
        except UnknownTenant as err:
            return error(400, str(err), api.TENANT_HEADER)
        request[PRINCIPAL], request[AUTHZ] = authz.principal, authz
        request[AGAIN] = lambda: current.authorize(request, route)
        try:
            return await handler(request)
        except Forbidden as err:
            return error(403, str(err))

    return check


# -- the console's sign-in (services/tracker/ui/session.py: ConsoleAuth) ------------------------


class ConsoleTokens:
    """The console's ConsoleAuth when auth is on: the sign-in page asks for a token, kept in the
    HttpOnly cookie `muster_session` (or sent as `Authorization: Bearer`, for scripts) and
    checked here on every page; the tenant is the principal's. Super admins (and the `system`
    service) choose one like the API's header: the `muster_tenant` cookie or `X-Muster-Tenant`,
    else `default`. Auth off: the tenant cookie alone, as before."""

    def __init__(self, auth: Callable[[], HttpAuth | None]) -> None:
        from .ui.session import TenantCookie

        self.auth = auth
        self.fallback = TenantCookie()

    @property
    def asks_for(self) -> str:
        return "token" if self.auth() is not None else "tenant"

    @asks_for.setter
    def asks_for(self, value: str) -> None:  # the ConsoleAuth protocol declares a variable; ours follows auth
        raise AttributeError("asks_for follows whether auth is on")

    def _viewer(self, current: HttpAuth, token: str, request: web.Request) -> Any:
        from .ui.session import TENANT_COOKIE, NeedsSignIn, Viewer

        try:
            principal = current.authenticate(token).principal
        except Unauthorized as err:
            raise NeedsSignIn(str(err), refused=True) from None
        chosen = request.cookies.get(TENANT_COOKIE) or request.headers.get(api.TENANT_HEADER)
        tenant = principal.tenant or (chosen if chosen and subjects.TOKEN.fullmatch(chosen) else api.DEFAULT_TENANT)
        if principal.role == "service" and principal.service != "system":
            raise NeedsSignIn(f"{principal.describe()} cannot use the console")
        return Viewer(tenant=tenant, name=principal.id, chosen=True, may=Authz(principal, current.state, tenant).may,
                      operator=principal.is_super_admin or principal.role == "service")  # (planner_view.sees_deployment)

    async def viewer(self, request: web.Request) -> Any:
        from .ui.session import SESSION_COOKIE, NeedsSignIn

        current = self.auth()
        if current is None:
            return await self.fallback.viewer(request)
        try:
            token = _token_of(request) if "Authorization" in request.headers else request.cookies.get(SESSION_COOKIE)
        except Unauthorized as err:
            raise NeedsSignIn(str(err)) from None
        if not token:
            raise NeedsSignIn("sign in with a token (muster token create)")
        return self._viewer(current, token, request)

    async def sign_in(self, request: web.Request, secret: str, response: web.StreamResponse) -> Any:
        from .ui.session import SESSION_COOKIE, NeedsSignIn, set_cookie

        current = self.auth()
        if current is None:
            return await self.fallback.sign_in(request, secret, response)
        if secret.strip().startswith("{"):  # the whole file `--save` wrote, pasted as it is
            raise NeedsSignIn('that is a credentials file: paste the value of its "token" (jq -r .token FILE)')
        viewer = self._viewer(current, secret.strip(), request)
        set_cookie(response, request, SESSION_COOKIE, secret.strip())
        return viewer

    def sign_out(self, response: web.StreamResponse) -> None:
        from .ui.session import SESSION_COOKIE

        response.del_cookie(SESSION_COOKIE, path="/")
        self.fallback.sign_out(response)


# -- what the routes need (services/tracker/http.py) --------------------------------------------


def may_read(request: web.Request, scope: Scope) -> None:
    """403 (Forbidden) unless the request's principal may read `scope`."""
    request[AUTHZ].require("read", scope)


def still_reading(request: web.Request, scope: Scope | None) -> Still:
    """For a stream: why the request's token may no longer read `scope` (revoked, expired, its
    principal disabled, the grant taken back; None: it may). `scope` None: the token alone."""
    again = request.get(AGAIN)
    if again is None:  # auth off, or an open route
        return ALWAYS

    async def check() -> str | None:
        try:
            authz = again()
        except (Unauthorized, Forbidden, UnknownTenant) as err:
            return str(err)
        decision = authz.may("read", scope) if scope is not None else Decision(True)
        return None if decision else decision.reason

    return check


async def job_scope(tenant: str, job_id: str, tracker: Any) -> Scope:
    """The scope reading a job needs: the job, within its cluster (a grant on either covers it)."""
    return Scope(tenant=tenant, kind="job", id=job_id, cluster=await job_cluster(tracker, tenant, job_id))


async def may_read_job(request: web.Request, tenant: str, job_id: str, tracker: Any) -> None:
    """A job is covered by grants on itself or on its cluster, found (only when it matters) in
    the index, else in the job's first event."""
    if request[AUTHZ].may("read", Scope(tenant=tenant, kind="job", id=job_id)):
        return
    cluster = await job_cluster(tracker, tenant, job_id)
    if cluster is None:
        return  # no such job in the tenant: the handler answers 404, as to anyone
    may_read(request, Scope(tenant=tenant, kind="job", id=job_id, cluster=cluster))


async def job_cluster(tracker: Any, tenant: str, job_id: str) -> str | None:
    """The job's cluster, from the index, else from the job's first event (None: no such job)."""
    return await _job_field(tracker, tenant, job_id, "cluster_id")


async def job_requester(tracker: Any, tenant: str, job_id: str) -> str | None:
    """Who asked for the job (None: no such job), found as `job_cluster` finds its cluster."""
    return await _job_field(tracker, tenant, job_id, "requested_by")


async def _job_field(tracker: Any, tenant: str, job_id: str, name: str) -> str | None:
    from muster.readmodel.locations import job_key

    record = tracker.index.mirror.get(job_key(tenant, job_id)) if tracker.index is not None else None
    value = record.get(name) if record else None
    if value is None:
        first = await tracker.store.read(subjects.job_events(tenant, job_id))
        value = getattr(first[0].event, name, None) if first else None
    return value


async def whoami(request: web.Request) -> web.Response:
    authz = request[AUTHZ]
    p = authz.principal
    grants = sorted(authz.state.grants_of(p.id), key=lambda g: (str(g.scope), g.permission)) if authz.state else []
    return web.json_response({"principal": p.id, "role": p.role, "tenant": p.tenant, "service": p.service,
                              "grants": [{"permission": g.permission, "scope": str(g.scope)} for g in grants]})


async def start_checking(nc: Any, holder: list[HttpAuth | None]) -> Any:
    """With auth on (the server authorizes connections), follow the identity events and
    check tokens; returns the view to stop, or None (auth off)."""
    from muster.bus.connect import auth_required
    from services.auth.backends import identity_backends
    from services.auth.view import IdentityView

    if not auth_required(nc):
        return None
    view = await IdentityView(nc).start()
    holder[0] = HttpAuth(view.state, identity_backends(view.state))
    return view
