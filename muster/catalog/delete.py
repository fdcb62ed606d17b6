"""`muster catalog delete KIND NAME`: remove an entity nothing uses.

Refused, with every reason, while something uses the entity:
- the rest of the catalog: deleting it must not make the catalog invalid (a template that
  names the provider, hardware, image or service, compatibility lists, a template that extends
  or includes it, a service that requires it...): `validate_catalog` of the catalog without it
  may find no error the catalog did not already have;
- a live cluster (any not deleted): its template, its provider, the hardware or image type of
  one of its nodes, a service on one of its nodes.

The delete is one `CatalogEntityDeleted` on the entity's subject, appended with the catalog's
expected last sequence (as an apply is), so a concurrent apply that re-used the entity makes
the delete fail rather than pass unseen. A cluster accepted between the check and the append
is not seen (the clusters are not in the catalog's fence): the planner reads the catalog per
request, so a create after the delete is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from contracts import subjects
from contracts.catalog import Catalog
from contracts.events import CatalogEntityDeleted
from muster.bus.eventstore import Append, Recorded
from muster.ports.eventlog import EventLog
from muster.readmodel.clusters import ClusterState, fold_cluster

from .files import CatalogFileError
from .plugins import PluginSpecs
from .problems import KIND_LABEL
from .store import append_fenced, read_state
from .validation import validate_catalog


class DeleteRefused(CatalogFileError):
    def __init__(self, kind: str, name: str, reasons: list[str]) -> None:
        self.reasons = reasons
        label = f"{KIND_LABEL.get(kind, kind)} {name!r}"
        super().__init__(f"{label} not deleted: {reasons[0]}" + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""))


class NotInCatalog(DeleteRefused):
    """Nothing to delete: not a refusal of an entity in use (a 404 over HTTP, not a 409)."""


def catalog_uses(catalog: Catalog, kind: str, name: str, plugins: PluginSpecs | None = None) -> list[str]:
    """What in the rest of the catalog needs the entity: the errors its absence would add."""
    before = {p.key() for p in validate_catalog(catalog, plugins) if p.is_error}
    without = catalog.model_copy(deep=True)
    without.entities(kind).pop(name, None)
    return [str(p) for p in validate_catalog(without, plugins) if p.is_error and p.key() not in before]


def cluster_uses(clusters: Iterable[ClusterState], kind: str, name: str) -> list[str]:
    """The live clusters that use the entity, and how."""
    out = []
    for c in sorted(clusters, key=lambda c: c.name):
        if c.status == "deleted":
            continue
        nodes = list(c.nodes.values())
        how = Counter[str]()
        if kind == "clustertemplates" and c.template == name:
            how["its template"] += 1
        if kind == "providers" and c.provider == name:
            how["its provider"] += 1
        for n in nodes:
            if kind == "hardwaretypes" and n.hardwaretype == name:
                how["the hardware type of"] += 1
            if kind == "imagetypes" and n.imagetype == name:
                how["the image type of"] += 1
            if kind == "services" and name in n.services:
                how["a service on"] += 1
        if how:
            words = [w if w.startswith("its") else f"{w} {count} node(s)" for w, count in how.items()]
            out.append(f"live cluster {c.name!r} ({c.id}) uses it: {', '.join(words)}")
    return out


async def read_clusters(store: EventLog, tenant: str) -> list[ClusterState]:
    by_subject: dict[str, list[Recorded]] = {}
    for r in await store.read(f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.cluster.*"):
        by_subject.setdefault(r.subject, []).append(r)
    return [c for c in (fold_cluster(h) for h in by_subject.values()) if c is not None]


async def delete_entity(store: EventLog, tenant: str, kind: str, name: str, by: str,
                        plugins: PluginSpecs | None = None) -> int:
    """Check and record the delete; returns its sequence. Raises DeleteRefused or CatalogConflict."""
    state = await read_state(store, tenant)
    if name not in state.catalog.entities(kind):
        raise NotInCatalog(kind, name, [f"there is no such entity in the catalog of tenant {tenant!r}"])
    reasons = catalog_uses(state.catalog, kind, name, plugins) + cluster_uses(await read_clusters(store, tenant), kind, name)
    if reasons:
        raise DeleteRefused(kind, name, reasons)
    event = CatalogEntityDeleted(kind=kind, name=name, by=by)
    item = Append(event, msg_id=f"catalog:{tenant}:{kind}:{name}:deleted-after:{state.last_seq}")
    [seq] = await append_fenced(store, tenant, [(subjects.catalog_events(tenant, kind, name), item)], state.last_seq, "delete")
    return seq
