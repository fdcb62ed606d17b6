"""A principal named "anonymous": on a bus without authorization every request comes from
"anonymous" and the services take the body's `requested_by` instead. With authorization that
name was a principal like any other (a tenant admin could make it), and its requests named whom
they pleased as `by`: a schedule's owner, whom every tick runs as (`root`, the super admin, whose
ticks went on after "anonymous" was disabled), or a catalog change's author. Now the name is
reserved, and one made by an older version is its own requester like everyone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import pytest_asyncio

from contracts import subjects
from contracts.catalog_requests import ApplyCatalog
from contracts.events import ClusterRequested
from contracts.records import Append
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.store import catalog_filter
from services.auth.domain import admin
from services.governance.entrypoint import start_governance
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner

from .conftest import Authed
from .test_isolation import Raw, raw


async def test_nobody_may_take_the_id_anonymous(authed: Authed) -> None:
    root = await authed.raw(authed.admin_token, "root")
    try:
        for fields in ({"tenant": "a"}, {"tenant": "a", "role": "tenant_admin"}, {"role": "super_admin"}):
            made = await authed.ask(root, "root", "user-create", principal="anonymous", **fields)
            assert not made["ok"] and "'anonymous' is reserved" in made["reason"], made
    finally:
        await root.close()


@pytest_asyncio.fixture
async def anonymous(authed: Authed, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, Raw]]:
    """"anonymous" of tenant a, as an older version let a tenant admin make it, with `execute`
    and catalog `write`; governance and a planner under their own identities."""
    monkeypatch.setattr(admin, "RESERVED_PRINCIPALS", frozenset(), raising=False)
    tokens = await authed.people({"anonymous": {"tenant": "a"}, "gov": {"role": "service", "service": "governance"},
                                  "pln": {"role": "service", "service": "planner"}},
                                 (("anonymous", "execute", "cluster:*"), ("anonymous", "write", "catalog:*")))
    async with AsyncExitStack() as stack:
        gov = await connect(authed.url, name="governance", token=tokens["gov"])
        stack.push_async_callback(gov.close)
        await ensure_streams(gov.jetstream(), tasks=False)  # what its start declares (muster.runtime.service)
        await start_governance(gov, stack, "governance-anon")
        pln = await connect(authed.url, name="planner", token=tokens["pln"])
        stack.push_async_callback(pln.close)
        await start_planner(pln, stack, PlannerConfig(instance="planner-anon", shards=2))
        system = await connect(authed.url, name="system", token=authed.system_token)
        stack.push_async_callback(system.close)
        requested = ClusterRequested(tenant="a", cluster_id="c1", name="web", template="t", provider="sim", job_id="j1")
        await EventStore(system).append(subjects.cluster_events("a", "c1"), [Append(requested, msg_id="c1")])
        conn = await raw(authed, tokens["anonymous"], "anonymous")
        stack.push_async_callback(conn.nc.close)
        yield {"anonymous": conn}


async def _ask(conn: Raw, subject: str, body: Any) -> dict[str, Any]:
    data = body.model_dump_json().encode() if hasattr(body, "model_dump_json") else json.dumps(body).encode()
    return dict(json.loads((await conn.nc.request(subject, data, timeout=10)).data))


async def test_a_principal_named_anonymous_cannot_name_another_as_its_requests_author(anonymous: dict[str, Raw],
                                                                                    authed: Authed) -> None:
    conn = anonymous["anonymous"]
    schedule = {"name": "tick", "every_s": 60, "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    put = await _ask(conn, subjects.governance_request("a", "anonymous", "put"),
                     {"kind": "schedule", "entities": [schedule], "requested_by": "root"})
    assert put["ok"], put
    catalog = await _ask(conn, subjects.operation("a", "anonymous", "catalog-apply"),
                         ApplyCatalog(catalog={"services": {"web": {"name": "web", "description": "w"}}}, requested_by="root"))
    assert catalog["type"] == "CatalogAnswer" and catalog["ok"], catalog
    system = await authed.raw(authed.system_token, "sys")
    try:
        store = EventStore(system)
        [schedule_put] = await store.read(subjects.governance_events("a", "schedule", "tick"))
        [catalog_put] = await store.read(catalog_filter("a"))
    finally:
        await system.close()
    # Its ticks run as itself (refused once it is disabled), not as the super admin it named.
    assert schedule_put.event.entity["owner"] == "anonymous" and schedule_put.event.by == "anonymous", schedule_put.event
    assert catalog_put.event.by == "anonymous", catalog_put.event
