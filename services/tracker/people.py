"""What people read through the tracker besides jobs and clusters (docs/decisions/0016): a
cluster named by id or name, a replay, the catalog and its history, the live provisioners.

Every answer is scoped by the request's tenant and the principal's grants (`auth.py`); the routes
are declared in `people_api.py`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from contracts import subjects
from contracts.catalog import KINDS, Catalog
from contracts.identity import LOOKUP_PERMISSIONS, Permission, Scope
from muster.catalog.sensitive import redact
from muster.catalog.store import read_history, read_state
from muster.readmodel.clusters import fold_cluster
from muster.readmodel.locations import cluster_key
from muster.times import shown_time

from . import auth as auth_
from .app import Tracker
from .cost import get_cost, hidden_note, readable
from .params import TRACKER, UUID_RE, BadParameter, int_query, shown, tenant_of
from .people_api import CLUSTER_REF, MAX_SEQ
from .provisioner_view import info_for
from .story import Log, replay_cluster

_REF = re.compile(CLUSTER_REF)


def not_found(message: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(reason=message)


def flag(request: web.Request, name: str, default: bool) -> bool:
    raw = request.query.get(name)
    if raw is None:
        return default
    if raw not in ("true", "false"):
        raise BadParameter(name, f"{name} {shown(raw)} is not true or false")
    return raw == "true"


def time_query(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise BadParameter(name, f"{name} {shown(raw)} is not an ISO 8601 time (e.g. 2026-05-01T12:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# -- a cluster by id or name -------------------------------------------------------------------------


async def _status(tracker: Tracker, tenant: str, cluster_id: str) -> tuple[str, str] | None:
    """(name, status) of a cluster: from the index, else folded from its events."""
    record = tracker.index.mirror.get(cluster_key(tenant, cluster_id)) if tracker.index is not None else None
    if record is not None and record.get("status") is not None:
        return str(record.get("name") or ""), str(record.get("status"))
    state = fold_cluster(await tracker.store.read(subjects.cluster_events(tenant, cluster_id)))
    return (state.name, state.status) if state is not None else None


async def cluster_name(tracker: Tracker, tenant: str, cluster_id: str) -> str:
    """The cluster's name, "" if it has none (or is unknown): for answers that name it."""
    known = await _status(tracker, tenant, cluster_id)
    return known[0] if known is not None else ""


async def _named(tracker: Tracker, tenant: str, name: str) -> list[str]:
    """Every cluster that took this name, oldest first: the name's claims in the log, and any
    cluster of the index with it (clusters made before names were claimed)."""
    found = [str(r.event.cluster_id) for r in await tracker.store.read(subjects.cluster_name_events(tenant, name))
             if r.type == "ClusterNameClaimed"]
    if tracker.index is not None:
        for key in tracker.index.mirror.clusters_of_tenant.get(tenant, ()):
            record = tracker.index.mirror.get(key)
            if record is not None and record.get("name") == name and record.ident["cluster_id"] not in found:
                found.append(record.ident["cluster_id"])
    return list(dict.fromkeys(found))


async def resolve_cluster(request: web.Request, tenant: str, ref: str, parameter: str = "cluster",
                          needs: Permission = "read") -> tuple[str, str]:
    """(id, name) of the cluster `ref` names, which the principal may read: an id, or a name
    (the live one of that name, else the last deleted one). 404 when there is none, 400 when
    several live clusters share the name, 403 without `needs` on it. A name resolves among the
    clusters the principal may read: one it may not is answered as no cluster of that name, as
    the console and the 400 id hint do (a 403 named its id, docs/security.md). `needs`: what
    the read is for (`needs_query`), named by the refusal."""
    if not _REF.fullmatch(ref):
        raise BadParameter(parameter, f"{parameter} {shown(ref)} is neither a cluster id nor a cluster name")
    tracker = request.app[TRACKER]
    authz = request[auth_.AUTHZ]
    if UUID_RE.fullmatch(ref):
        cluster_id = ref.lower()
        known = await _status(tracker, tenant, cluster_id)
        if known is None:
            raise not_found(f"no cluster {cluster_id} in tenant {tenant}")
        _require(authz, needs, Scope(tenant=tenant, kind="cluster", id=cluster_id), known[0])
        return cluster_id, known[0]
    readable = [c for c in await _named(tracker, tenant, ref) if authz.may("read", Scope(tenant=tenant, kind="cluster", id=c))]
    states = {c: await _status(tracker, tenant, c) for c in readable}
    live = [c for c, s in states.items() if s is not None and s[1] != "deleted"]
    if len(live) > 1:
        raise BadParameter(parameter, f"{len(live)} live clusters are named {ref!r} ({', '.join(live)}): give the id")
    chosen = live or [c for c, s in states.items() if s is not None][-1:]
    if not chosen:
        raise not_found(f"no cluster named {ref!r} in tenant {tenant}")
    _require(authz, needs, Scope(tenant=tenant, kind="cluster", id=chosen[0]), ref)
    return chosen[0], ref


def _require(authz: auth_.Authz, needs: Permission, scope: Scope, name: str) -> None:
    """403 without `needs` on the cluster, naming that permission (an operation's lookup was
    refused for `read`, and once that was given the operation for `write`). The cluster is said
    by its name only to one who may read it (docs/security.md, "What a refusal names")."""
    decision = authz.may(needs, scope)
    if decision:
        return
    reason = decision.reason
    if name and needs != "read" and authz.may("read", scope):
        reason = reason.replace(f"cluster {scope.id} ", f"cluster {name} ({scope.id}) ", 1)
    raise auth_.Forbidden(reason)


def needs_query(request: web.Request) -> Permission:
    """`needs`: the permission a cluster's read is for (an operation's lookup asks for the
    operation's own: contracts/identity.py LOOKUP_PERMISSIONS); default `read`."""
    raw = request.query.get("needs", "read")
    if raw not in LOOKUP_PERMISSIONS:
        raise BadParameter("needs", f"needs {shown(raw)} is not one of {', '.join(LOOKUP_PERMISSIONS)}")
    return raw


# -- handlers ----------------------------------------------------------------------------------------


async def get_replay(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    raw_seq = int_query(request, "seq", -1, 0, MAX_SEQ)
    seq = raw_seq if raw_seq >= 0 else None
    at = time_query(request, "at")
    ref = request.query.get("cluster")
    if ref is None:
        raise BadParameter("cluster", "name the cluster (its id or its name)")
    cluster_id, name = await resolve_cluster(request, tenant, ref)
    tracker = request.app[TRACKER]
    later = await tracker.not_yet(seq, at)
    if later is not None:  # a point that does not exist yet, as one before the cluster is a 404
        raise not_found(f"{later}; without a point, the cluster as it is now")
    state = await replay_cluster(tracker.store, tenant, cluster_id, seq, at, tracker.stories)
    if state is None:
        raise not_found(f"cluster {name} ({cluster_id}) did not exist yet at that point"
                        f"{await _since(tracker.store, tenant, cluster_id)}")
    return web.json_response(state)


async def _since(store: Log, tenant: str, cluster_id: str) -> str:
    """When a cluster began, for a point asked before it (an error path: its own events read): its
    time as people read times, and its seq, which names the point exactly (a point in that second
    but before the event is before it too)."""
    first = (await store.read(subjects.cluster_events(tenant, cluster_id)))[:1]
    return f": its first event is #{first[0].seq}, at {shown_time(first[0].time)} (a replay at seq {first[0].seq} shows it)" if first else ""


async def get_catalog(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    from services.provisioner.plugins.specs import catalog_plugins

    state = await read_state(request.app[TRACKER].store, tenant)
    shown_catalog: Catalog = redact(state.catalog, catalog_plugins())
    may = request[auth_.AUTHZ].may
    hidden = readable(shown_catalog, lambda kind, name: bool(may("read", Scope(tenant=tenant, kind="catalog", id=f"{kind}/{name}"))))
    versions = [{"kind": k, "name": n, "version": v} for (k, n), v in sorted(state.versions.items())
                if n in shown_catalog.entities(k)]
    # An empty catalog read as "none applied yet" where the reader may see none of it: say so (as the CLI and console do).
    note = hidden_note(request[auth_.PRINCIPAL].id, hidden)
    return web.json_response({"tenant": tenant, "catalog": shown_catalog.model_dump(mode="json", exclude_defaults=True),
                              "versions": versions, "last_seq": state.last_seq, "complete": not hidden, "hidden": hidden,
                              "note": note})


async def get_catalog_history(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    name = request.query.get("name")
    if name is None or not subjects.TOKEN.fullmatch(name):
        raise BadParameter("name", f"name {shown(name or '')} is not a catalog entity's name")
    kind = request.query.get("kind")
    if kind is not None and kind not in KINDS:
        raise BadParameter("kind", f"kind {shown(kind)} is not one of {', '.join(KINDS)}")
    from services.provisioner.plugins.specs import catalog_plugins

    versions = [v for v in await read_history(request.app[TRACKER].store, tenant) if v.name == name and kind in (None, v.kind)]
    if not versions:
        raise not_found(f"no catalog entity {name!r} in the log of tenant {tenant}")
    authz, specs, items = request[auth_.AUTHZ], catalog_plugins(), []
    for v in versions:
        decision = authz.may("read", Scope(tenant=tenant, kind="catalog", id=f"{v.kind}/{v.name}"))
        if not decision:
            continue
        entity = v.entity
        if v.kind == "providers":
            entity = redact(Catalog.model_validate({"providers": {v.name: v.entity}}), specs).providers[v.name].model_dump(mode="json")
        items.append({**v.to_json(), "entity": entity})
    if not items:
        authz.require("read", Scope(tenant=tenant, kind="catalog", id=f"{versions[0].kind}/{name}"))
    return web.json_response({"items": items})


async def list_provisioners(request: web.Request) -> web.Response:
    from services.provisioner.presence import live_provisioners

    tenant = tenant_of(request)
    klass = request.query.get("class")
    if klass is not None and not subjects.TOKEN.fullmatch(klass):
        raise BadParameter("class", f"class {shown(klass)} is not a provisioner class name")
    principal = request[auth_.PRINCIPAL]
    operator = principal.is_super_admin or principal.role == "service"
    every = flag(request, "all", False)
    if every and not operator:
        raise auth_.Forbidden(f"{principal.id} sees the provisioners of its tenant only (all is for super admins and services)")
    records = await live_provisioners(request.app[TRACKER].nc, tenant=None if every else tenant, provisioner_class=klass)
    items = []
    for r in records:
        data: dict[str, Any] = r.model_dump(mode="json")
        if not operator:  # other tenants are counted, not named (as on the console)
            data["info"], data["others"] = info_for(data["info"], tenant)
        items.append(data)
    return web.json_response({"items": items})


HANDLERS = {"get_replay": get_replay, "get_catalog": get_catalog, "get_catalog_history": get_catalog_history,
            "list_provisioners": list_provisioners, "get_cost": get_cost}
