"""`GET /v1/cost` and the console's clusters page, with real tokens on a real nats-server: each
tenant sees what its own clusters cost at its own catalog's prices, the figures `muster cluster
cost` prints; another tenant's token is refused, and a reader without the catalog is told why a
price is missing."""

from __future__ import annotations

import html
import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from contracts import subjects
from contracts.events import CatalogEntityPut, ClusterLayoutChanged, ClusterRequested, ClusterStatus, ClusterStatusChanged
from contracts.layout import NodeSpec
from muster.bus.eventstore import Append, EventStore
from services.tracker import api
from tests import cli_in_process

from .conftest import Authed
from .test_http import Served, tracker_served

WEB, GONE, THEIRS = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())


async def get(served: Served, path: str, who: str | None, tenant: str | None = None) -> tuple[int, Any]:
    """The status and the body (JSON, else text) of a GET with `who`'s token."""
    headers = {"Authorization": f"Bearer {served.tokens[who]}"} if who is not None else {}
    resp = await served.http.get(path, headers=headers | ({api.TENANT_HEADER: tenant} if tenant is not None else {}))
    return resp.status, await resp.json() if resp.content_type == "application/json" else await resp.text()


async def _cluster(store: EventStore, tenant: str, cid: str, name: str, hardware: list[str], status: ClusterStatus = "active") -> None:
    nodes = [NodeSpec(id=f"n{i}", hardwaretype=h, imagetype="debian", services=[]) for i, h in enumerate(hardware)]
    events: list[Any] = [ClusterRequested(tenant=tenant, cluster_id=cid, name=name, template="t", provider="p", job_id=str(uuid.uuid4())),
                         ClusterLayoutChanged(cluster_id=cid, job_id="j", nodes=nodes),
                         ClusterStatusChanged(cluster_id=cid, status=status, job_id="j")]
    await store.append(subjects.cluster_events(tenant, cid), [Append(e, msg_id=f"{cid}-{i}") for i, e in enumerate(events)])


async def _price(store: EventStore, tenant: str, name: str, cost: str | None) -> None:
    put = CatalogEntityPut(kind="hardwaretypes", name=name, by="test",
                           entity={"name": name, "providermap": {"p": {"cost": cost} if cost else {"flavor": "f"}}})
    await store.append(subjects.catalog_events(tenant, "hardwaretypes", name), [Append(put, msg_id=f"{tenant}-{name}", version=1)])


@pytest_asyncio.fixture
async def served(authed: Authed) -> AsyncIterator[Served]:
    tokens = await authed.people({"alice": {"tenant": "a"}, "reader": {"tenant": "a"}, "onec": {"tenant": "a"}},
                                 (("alice", "read", "tenant"), ("reader", "read", "cluster:*"), ("onec", "read", f"cluster:{WEB}")))
    root = await authed.raw(authed.admin_token, "root")
    try:  # a tenant without clusters, and a reader of it
        assert (await authed.ask(root, "root", "tenant-create", tenant="c", description=""))["ok"]
    finally:
        await root.close()
    tokens |= await authed.people({"dee": {"tenant": "c"}}, (("dee", "read", "tenant"),), tenant="c")
    tokens |= await authed.people({"bob": {"tenant": "b"}, "tracker": {"role": "service", "service": "tracker"}},
                                  (("bob", "read", "tenant"),), tenant="b")
    tokens["root"] = authed.admin_token
    system = await authed.raw(authed.system_token, "sys")
    store = EventStore(system)
    await _price(store, "a", "small", "0.05")
    await _price(store, "a", "gpu", None)  # a type without a price: said so, counted as 0
    await _cluster(store, "a", WEB, "web", ["small", "small", "gpu"])
    await _cluster(store, "a", GONE, "gone", ["small"] * 9, status="deleted")
    await _price(store, "b", "small", "1.5")  # another tenant's prices for the same name
    await _cluster(store, "b", THEIRS, "theirs", ["small"] * 4)
    await system.close()
    async with tracker_served(authed, tokens) as served:
        yield served


async def test_each_tenant_sees_what_its_own_clusters_cost_at_its_own_prices(served: Served) -> None:
    status, mine = await get(served, "/v1/cost", "alice")
    assert status == 200, mine
    assert [(c["name"], c["id"], c["nodes"], c["per_hour"], c["unknown"]) for c in mine["clusters"]] == [("web", WEB, 3, 0.1, ["gpu"])]
    assert mine["clusters"][0]["by_hardware"] == {"gpu": {"nodes": 1, "each": 0.0, "per_hour": 0.0},
                                                  "small": {"nodes": 2, "each": 0.05, "per_hour": 0.1}}
    assert (mine["tenant"], mine["nodes"], mine["per_hour"], mine["unknown"], mine["note"]) == ("a", 3, 0.1, ["gpu"], None)
    status, theirs = await get(served, "/v1/cost", "bob")
    assert status == 200 and [(c["name"], c["per_hour"]) for c in theirs["clusters"]] == [("theirs", 6.0)], theirs
    assert WEB not in json.dumps(theirs) and THEIRS not in json.dumps(mine)
    assert await get(served, "/v1/cost", "root", tenant="a") == (200, mine)  # a super admin names the tenant


async def test_another_tenants_token_and_a_reader_of_one_cluster_are_refused(served: Served) -> None:
    status, body = await get(served, "/v1/cost", "bob", tenant="a")
    assert status == 403 and "belongs to tenant b" in body["error"]["message"] and WEB not in json.dumps(body), body
    status, body = await get(served, "/v1/cost", "onec")  # the sum of every cluster needs read on every cluster
    assert status == 403 and "onec has no read permission on every cluster of tenant a" in body["error"]["message"], body
    status, body = await get(served, "/v1/cost?tenant=a", "bob")  # not how a tenant is chosen: said so, not ignored
    assert status == 400 and body["error"]["parameter"] == "tenant" and "chosen with the X-Muster-Tenant header" in body["error"]["message"]
    status, body = await get(served, "/v1/cost", None)
    assert status == 401 and "needs a token" in body["error"]["message"]


async def test_a_reader_without_the_catalog_is_told_which_grant_shows_the_prices(served: Served) -> None:
    status, body = await get(served, "/v1/cost", "reader")
    assert status == 200 and body["per_hour"] == 0.0 and body["unknown"] == ["gpu", "small"], body
    assert "muster grant reader read --scope 'catalog:*'" in body["note"]


async def test_the_cli_the_api_and_the_console_say_the_same_figures(served: Served) -> None:
    _, api_said = await get(served, "/v1/cost", "alice")
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["alice"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": ""}
    ran = await cli_in_process.ran(["cluster", "cost", "--json"], env, 60, catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    cli_said = json.loads(ran.output)
    assert {k: v for k, v in cli_said.items() if k != "note"} == {k: v for k, v in api_said.items() if k != "note"}
    ran = await cli_in_process.ran(["cluster", "cost"], {**env, "COLUMNS": "200"}, 60, catch_exceptions=False)
    assert "total: 0.10/h for 3 nodes in 1 cluster; no price for gpu (counted as 0)\n" in ran.output, ran.output
    page = await served.http.get("/ui/clusters", cookies={"muster_session": served.tokens["alice"]})
    text = " ".join(html.unescape(await page.text()).split())
    assert page.status == 200 and "0.10/h</span> <span class=\"dim\">(no price: gpu)</span>" in text, text
    assert "Together 0.10/h for 3 nodes in 1 live cluster, at the catalog's prices now; no price for gpu (counted as 0)." in text
    page = await served.http.get("/ui/clusters", cookies={"muster_session": served.tokens["bob"]})
    text = " ".join(html.unescape(await page.text()).split())
    assert "Together 6.00/h for 4 nodes in 1 live cluster" in text and WEB not in text


async def test_a_super_admin_without_clusters_in_default_is_told_which_tenant_has_none(served: Served) -> None:
    """`muster cluster cost` said just "no clusters" there, without naming the tenant (walk of session 26)."""
    assert await get(served, "/v1/cost", "root") == (200, {"tenant": "default", "clusters": [], "nodes": 0, "per_hour": 0.0,
                                                          "unknown": [], "note": None})
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["root"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": "", "MUSTER_TENANT": ""}
    ran = await cli_in_process.ran(["cluster", "cost"], env, 60, catch_exceptions=False)
    assert (ran.exit_code, ran.output) == (0, "no clusters in tenant 'default': nothing to pay for\n")


async def test_a_super_admin_without_clusters_in_default_is_told_which_tenants_have_them(served: Served, authed: Authed) -> None:
    """`muster cluster list` as the super admin said "no clusters" in tenant default while tenants
    a and b had clusters, as if the deployment had none (walk of session 26): it names them, with
    how many live clusters each has (a's deleted one is not counted), and the command that lists them."""
    env = {**os.environ, "MUSTER_TOKEN": served.tokens["root"], "MUSTER_TRACKER_URL": str(served.http.make_url("")).rstrip("/"),
           "MUSTER_CREDENTIALS": "", "MUSTER_TENANT": "", "NATS_URL": authed.url}
    ran = await cli_in_process.ran(["cluster", "list"], env, 60, catch_exceptions=False)
    said = " ".join(ran.stdout.split())  # the command's own (what the auth service logs meanwhile is not in it)
    assert (ran.exit_code, said) == (0, "no clusters in tenant 'default'; other tenants have clusters: "
                                                               "a (1), b (1); list them with `muster cluster list --tenant a`"), ran.stdout
    ran = await cli_in_process.ran(["cluster", "list", "--tenant", "b"], {**env, "MUSTER_TOKEN": served.tokens["bob"]}, 60,
                                   catch_exceptions=False)
    assert ran.exit_code == 0 and "theirs" in ran.output and "other tenants" not in ran.output, ran.output
    # Named with --tenant, the tenant it names (it said only "no clusters in tenant 'default'" there).
    ran = await cli_in_process.ran(["cluster", "list", "--tenant", "default"], env, 60, catch_exceptions=False)
    assert (ran.exit_code, " ".join(ran.stdout.split())) == (0, "no clusters in tenant 'default'; other tenants have clusters: "
                                                                "a (1), b (1); list them with `muster cluster list --tenant a`")
    # Anyone else is told nothing of other tenants: a reader of the whole of its own, empty, tenant.
    for named in (["--tenant", "c"], []):
        ran = await cli_in_process.ran(["cluster", "list", *named], {**env, "MUSTER_TOKEN": served.tokens["dee"]}, 60,
                                       catch_exceptions=False)
        assert (ran.exit_code, ran.stdout) == (0, "no clusters in tenant 'c'\n"), ran.output
