"""What a tenant's clusters cost now over HTTP and on the console (`services/tracker/cost.py`):
`muster cluster cost`'s figures (`spend`) from the clusters' own events and the catalog the
reader may read."""

from __future__ import annotations

from typing import Any

from contracts import subjects
from contracts.events import CatalogEntityPut, ClusterLayoutChanged, ClusterRequested, ClusterStatus, ClusterStatusChanged
from contracts.layout import NodeSpec
from contracts.records import Append
from muster.ports.memory import MemoryEventLog
from services.tracker.cost import tenant_cost

T = "acme"


async def cluster(log: MemoryEventLog, cid: str, name: str, hardware: list[str], status: ClusterStatus = "active",
                  tenant: str = T) -> None:
    nodes = [NodeSpec(id=f"{cid}-n{i}", hardwaretype=h, imagetype="debian", services=[]) for i, h in enumerate(hardware)]
    events: list[Any] = [ClusterRequested(tenant=tenant, cluster_id=cid, name=name, template="t", provider="sim", job_id="j"),
                         ClusterLayoutChanged(cluster_id=cid, job_id="j", nodes=nodes),
                         ClusterStatusChanged(cluster_id=cid, status=status, job_id="j")]
    await log.append(subjects.cluster_events(tenant, cid), [Append(e, msg_id=f"{cid}-{i}") for i, e in enumerate(events)])


async def price(log: MemoryEventLog, name: str, cost: str | None, tenant: str = T) -> None:
    providermap = {"sim": {"cost": cost} if cost else {"flavor": "x"}}
    put = CatalogEntityPut(kind="hardwaretypes", name=name, entity={"name": name, "providermap": providermap})
    await log.append(subjects.catalog_events(tenant, "hardwaretypes", name), [Append(put, msg_id=f"{tenant}-{name}", version=1)])


async def filled() -> MemoryEventLog:
    log = MemoryEventLog()
    await price(log, "small", "0.05")
    await price(log, "gpu", None)
    await cluster(log, "c1", "web", ["small"] * 3)
    await cluster(log, "c2", "ml", ["small", "gpu"])
    await cluster(log, "c3", "gone", ["small"] * 9, status="deleted")
    await price(log, "small", "7", tenant="other")  # another tenant's prices and clusters count for nothing here
    await cluster(log, "c4", "theirs", ["small"] * 5, tenant="other")
    return log


def everyone(*_: str) -> bool:
    return True


async def test_the_live_clusters_by_name_at_the_catalogs_prices_and_a_type_without_one_named() -> None:
    view = await tenant_cost(await filled(), T, everyone, everyone, "alice")
    assert [(c["name"], c["nodes"], c["per_hour"], c["unknown"]) for c in view["clusters"]] == [
        ("ml", 2, 0.05, ["gpu"]), ("web", 3, 0.15, [])]
    assert view["clusters"][1]["by_hardware"] == {"small": {"nodes": 3, "each": 0.05, "per_hour": 0.15}}
    assert (view["tenant"], view["nodes"], view["per_hour"], view["unknown"], view["note"]) == (T, 5, 0.2, ["gpu"], None)


async def test_a_reader_sees_the_clusters_and_prices_it_may_read_and_is_told_which_grant_shows_the_rest() -> None:
    view = await tenant_cost(await filled(), T, lambda cid: cid == "c1", lambda kind, name: name != "small", "onec")
    [web] = view["clusters"]
    assert (web["name"], web["per_hour"], web["unknown"]) == ("web", 0.0, ["small"])
    # The note names the prices it may not read (session 36: it was the catalog's, "1 of the catalog's
    # entities are not shown ...; a cluster is made only from a template its creator may read").
    assert view["note"] == ("onec may not read the price of small: prices need read on each hardware type "
                            "(catalog:hardwaretypes/<name>) or catalog:* (a tenant admin can give it: muster grant onec read "
                            "--scope 'catalog:*')")
    # Every price it needs read: nothing to explain, even with entities hidden.
    assert (await tenant_cost(await filled(), T, lambda cid: cid == "c1", lambda kind, name: name != "gpu", "onec"))["note"] is None


async def test_a_tenant_without_clusters_costs_nothing() -> None:
    assert await tenant_cost(MemoryEventLog(), T, everyone, everyone, "alice") == {
        "tenant": T, "clusters": [], "nodes": 0, "per_hour": 0.0, "unknown": [], "note": None}
