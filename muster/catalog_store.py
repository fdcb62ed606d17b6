"""The catalog lives in the log: one subject per entity, one `CatalogEntityPut` per version."""

from __future__ import annotations

import hashlib
import json

from contracts import subjects
from contracts.catalog import KINDS, Catalog
from contracts.events import CatalogEntityPut

from .bus.eventstore import Append, EventStore


def _digest(body: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


async def read_catalog(store: EventStore, tenant: str) -> Catalog:
    catalog = Catalog()
    prefix = f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.catalog.>"
    for recorded in await store.read(prefix):
        put = recorded.event
        if isinstance(put, CatalogEntityPut) and put.kind in KINDS:
            catalog.entities(put.kind)[put.name] = KINDS[put.kind].model_validate(put.entity)
    return catalog


async def apply_catalog(store: EventStore, tenant: str, catalog: Catalog, by: str = "anonymous") -> int:
    """Append a version of every entity that differs from what the log holds; returns how
    many were appended. Applying the same catalog twice appends nothing."""
    current = await read_catalog(store, tenant)
    appended = 0
    for kind in KINDS:
        for name, entity in sorted(catalog.entities(kind).items()):
            body = entity.model_dump(mode="json")
            old = current.entities(kind).get(name)
            if old is not None and old.model_dump(mode="json") == body:
                continue
            subject = subjects.catalog_events(tenant, kind, name)
            event = CatalogEntityPut(kind=kind, name=name, entity=body, by=by)
            await store.append(subject, [Append(event, msg_id=f"catalog:{tenant}:{kind}:{name}:{_digest(body)}")])
            appended += 1
    return appended
