"""What a tenant's clusters cost an hour at today's prices, over HTTP (`GET /v1/cost`) and on the
console's clusters page: the figures `muster cluster cost` prints, from the same pure function.

Both read as the CLI does: the clusters' own events, the catalog the reader may read, through
`muster.readmodel.cost.spend`.

A hardware type the reader may not read has no price for it, as in `muster cluster cost`: the
figure says which types it counts as 0, and the note which grant would show their prices
(`hidden_prices_note`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from aiohttp import web

from contracts import subjects
from contracts.catalog import KINDS, Catalog
from contracts.identity import Scope
from muster.catalog.store import CatalogState, read_state
from muster.ports.eventlog import EventLog
from muster.readmodel.clusters import ClusterState, fold_cluster
from muster.readmodel.cost import hidden_prices_note, spend

from . import auth as auth_
from .params import TRACKER, tenant_of

MayRead = Callable[[str, str], bool]
"""(kind, name) -> whether the reader may read that catalog entity."""


def readable(catalog: Catalog, may: MayRead) -> int:
    """Drops from `catalog` (a copy of the log's) the entities the reader may not read: how many."""
    hidden = 0
    for kind in KINDS:
        entities = catalog.entities(kind)
        for name in [n for n in entities if not may(kind, n)]:
            del entities[name]
            hidden += 1
    return hidden


def hidden_note(principal: str, hidden: int) -> str | None:
    """Which grant shows the entities a reader may not read (as `muster catalog get` and the console say it)."""
    if not hidden:
        return None
    return (f"{hidden} of the catalog's entities are not shown: they need read on catalog:<kind>/<name> or catalog:* (a tenant "
            f"admin can give it: muster grant {principal} read --scope 'catalog:*'); a cluster is made only "
            "from a template its creator may read")


def cost_view(tenant: str, histories: Iterable[Sequence[Any]], catalog: Catalog, note: str | None) -> dict[str, Any]:
    """The tenant's live clusters (each one's own events, in log order) at `catalog`'s prices:
    `spend`'s figures with the tenant, and `note` where a price may be missing for want of a grant."""
    live: list[tuple[ClusterState, str]] = []
    for history in histories:
        c = fold_cluster(history)
        if c is not None and c.status != "deleted":
            live.append((c, history[-1].time.isoformat()))
    live.sort(key=lambda pair: (pair[0].name, pair[1]))  # as `muster cluster list` orders them
    report = spend(((c.name, c.id, c.provider, [n.hardwaretype for n in c.nodes.values()]) for c, _ in live), catalog.hardwaretypes)
    return {"tenant": tenant, **report, "note": note if report["unknown"] else None}


async def tenant_cost(store: EventLog, tenant: str, may_cluster: Callable[[str], bool], may_catalog: MayRead,
                      principal: str) -> dict[str, Any]:
    """`cost_view` of the clusters the reader may read, at the prices of the catalog it may read."""
    by_subject: dict[str, list[Any]] = defaultdict(list)
    for r in await store.read(f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.cluster.*"):
        by_subject[r.subject].append(r)
    state: CatalogState = await read_state(store, tenant)
    catalog = state.catalog.model_copy(deep=True)
    kept = [name for name in catalog.hardwaretypes if not may_catalog("hardwaretypes", name)]
    readable(catalog, may_catalog)
    view = cost_view(tenant, (h for s, h in by_subject.items() if may_cluster(s.rsplit(".", 1)[-1])), catalog, None)
    return {**view, "note": hidden_prices_note(principal, [t for t in view["unknown"] if t in kept])}


async def get_cost(request: web.Request) -> web.Response:
    """GET /v1/cost: needs read on every cluster of the tenant, as `GET /v1/clusters`."""
    tenant = tenant_of(request)
    auth_.may_read(request, Scope(tenant=tenant, kind="cluster", id="*"))
    may = request[auth_.AUTHZ].may

    def may_catalog(kind: str, name: str) -> bool:
        return bool(may("read", Scope(tenant=tenant, kind="catalog", id=f"{kind}/{name}")))

    return web.json_response(await tenant_cost(request.app[TRACKER].store, tenant, lambda _: True, may_catalog,
                                               request[auth_.PRINCIPAL].id))
