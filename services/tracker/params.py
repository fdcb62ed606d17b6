"""The vocabulary of the tracker's routes: the app's keys, a request's parameters checked (a
bad one is a 400 naming it), and the error answers, always JSON
`{"error": {"status", "message", "parameter"}}` (docs/tracker.md)."""

from __future__ import annotations

import re

from aiohttp import web

from contracts import subjects

from . import api
from .app import Page, Tracker
from .metrics import TrackerMetrics

TRACKER = web.AppKey("tracker", Tracker)
METRICS = web.AppKey("metrics", TrackerMetrics)
UUID_RE = re.compile(api.UUID_PATTERN)


class BadParameter(Exception):
    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def error(status: int, message: str, parameter: str | None = None) -> web.Response:
    body = {"error": {"status": status, "message": message, "parameter": parameter}}
    return web.json_response(body, status=status)


def shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "…")


# -- parameters --------------------------------------------------------------------------------


def tenant_of(request: web.Request) -> str:
    """The tenant of the request: the principal's own (auth on; services/tracker/auth.py), or
    the one `X-Muster-Tenant` names for a super admin, a service or an anonymous caller."""
    from .auth import AUTHZ  # auth imports api only; params is imported by http, which auth serves

    authz = request.get(AUTHZ)
    tenant = authz.tenant if authz is not None else request.headers.get(api.TENANT_HEADER, api.DEFAULT_TENANT)
    if not subjects.TOKEN.fullmatch(tenant):
        raise BadParameter(api.TENANT_HEADER, f"{api.TENANT_HEADER} {shown(tenant)} is not a tenant name: use 1-128 letters, digits, '-' or '_'")
    return tenant


LISTED_AT = {"cluster": "GET /v1/clusters lists each cluster's id with its name", "job": "GET /v1/jobs lists them",
             "plan": "a dry run (?dry_run=true) answers with its plan_id"}
"""Where a caller finds the id it gave wrong: a cluster's name (what the CLI takes) is no id here."""


def not_an_id(what: str, value: str, request: web.Request | None = None) -> str:
    """`cluster 'web' is not a cluster id (a UUID: GET /v1/clusters lists ...)`: the problem and
    where the right id is, as the CLI's `(a UUID: muster job list lists them)`; with `request`,
    the id itself when `value` names a cluster the caller may read."""
    kind = what.removesuffix(" id")
    where = LISTED_AT.get(kind)
    said = f"{kind} {shown(value)} is not a {kind} id (a UUID{': ' + where if where else ''})"  # (a path's read "cluster id 'web' is not a cluster id")
    ident = named_cluster(request, value) if request is not None and kind == "cluster" else None
    return said + (f"; cluster {shown(value)} is {ident}" if ident else "")


def uuid_of(request: web.Request, name: str, what: str) -> str:
    value = request.match_info[name]
    if not UUID_RE.fullmatch(value):
        raise BadParameter(name, not_an_id(what, value, request))
    return value.lower()


def named_cluster(request: web.Request, name: str) -> str | None:
    """The id of the caller's tenant's cluster called `name` (its newest), if the caller may read
    that cluster: told to one who gave the name where the id goes, and to nobody else (another
    tenant's, or a cluster it may not read, is not named)."""
    from contracts.identity import Scope

    from .auth import AUTHZ

    tracker = request.app.get(TRACKER)
    if tracker is None or tracker.index is None:
        return None
    try:
        tenant = tenant_of(request)
    except BadParameter:
        return None
    authz = request.get(AUTHZ)
    for item in reversed(tracker.list_clusters(tenant, 0, api.MAX_LIMIT, name=name).items):
        if authz is None or authz.may("read", Scope(tenant=tenant, kind="cluster", id=item["id"])):
            return str(item["id"])
    return None


def int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(name, f"{name} {shown(raw)} is not an integer") from None
    if not low <= value <= high:
        raise BadParameter(name, f"{name} must be between {low} and {high}, not {value}")
    return value


def last_event_id(request: web.Request) -> int:
    """The `Last-Event-ID` an SSE client sends when it opens a stream again: the last event it
    had (0 without one)."""
    raw = request.headers.get("Last-Event-ID")
    if not raw:
        return 0
    if not re.fullmatch(r"[0-9]{1,18}", raw):
        raise BadParameter("Last-Event-ID", f"Last-Event-ID {shown(raw)} is not a log sequence")
    return int(raw)


def paging(request: web.Request) -> tuple[int, int]:
    return (int_query(request, "after", 0, 0, api.MAX_SEQ), int_query(request, "limit", api.DEFAULT_LIMIT, 1, api.MAX_LIMIT))


def known_query(request: web.Request, known: tuple[str, ...]) -> None:
    """A parameter the route does not take is a 400 naming it: ignored, `?name=web` listed every
    cluster as if it had filtered. So is one given twice (every parameter takes one value): the
    first was taken and the rest ignored, `?dry_run=true&dry_run=false` a dry run."""
    unknown = sorted(set(request.query) - set(known))
    if unknown:
        tenant = f" (the tenant is chosen with the {api.TENANT_HEADER} header)" if "tenant" in unknown else ""
        raise BadParameter(unknown[0], f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                                       f"{', '.join(shown(u) for u in unknown)}: this route takes {', '.join(known) or 'none'}{tenant}")
    for name in request.query:
        given = request.query.getall(name)
        if len(given) > 1:
            raise BadParameter(name, f"{name} is given {len(given)} times ({', '.join(shown(v) for v in given[:5])}): "
                                     "give it once")


SECRET_HEADERS = frozenset({"authorization", "cookie"})
"""Headers whose values an answer never shows (a token, a session cookie)."""


def once_each(request: web.Request, names: tuple[str, ...]) -> None:
    """A header muster reads, given twice, is a 400 naming it, as a query parameter given twice:
    `X-Muster-Tenant: a` and `X-Muster-Tenant: b` chose tenant a (aiohttp's `headers.get` takes
    the first) and the second said nothing."""
    for name in names:
        given = request.headers.getall(name, [])
        if len(given) > 1:
            values = "" if name.lower() in SECRET_HEADERS else f" ({', '.join(shown(v) for v in given[:5])})"
            raise BadParameter(name, f"header {name} is given {len(given)} times{values}: give it once")


def page_json(page: Page) -> web.Response:
    return web.json_response({"items": page.items, "next_after": page.next_after})


def not_found(what: str, ident: str, tenant: str) -> web.Response:
    return error(404, f"no {what} {ident} in tenant {tenant}")
