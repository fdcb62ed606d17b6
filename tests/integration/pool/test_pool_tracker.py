"""The tracker's pool routes and live stream, fed by a real pool service through the log."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pool_env import PoolEnv, hosts

from contracts.pool_commands import AddHosts, ReportNodes, RequestHosts
from contracts.pools import NodeNeed, PoolRequest
from muster.bus.eventstore import EventStore
from services.pool import client as pools
from services.tracker.http import make_app

pytestmark = pytest.mark.nats


def req(rid: str, n: int, tenant: str) -> PoolRequest:
    return PoolRequest(request_id=rid, pool="lab", tenant=tenant, cluster_id=f"c-{rid}", job_id=rid,
                       nodes=[NodeNeed(node_id=f"n{i}") for i in range(n)])


async def _next_event(resp: Any) -> tuple[str, dict[str, Any]]:
    name = ""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            return name, json.loads(line[6:])
    raise AssertionError("the stream ended")


async def test_pools_are_read_and_followed_live_and_other_tenants_stay_hidden(env: PoolEnv) -> None:
    await pools.send(env.nc, "lab", AddHosts(hosts=hosts(2)))
    await pools.send(env.nc, "lab", RequestHosts(request=req("mine", 1, "acme")))
    await pools.send(env.nc, "lab", RequestHosts(request=req("theirs", 1, "globex")))
    await pools.send(env.nc, "lab", RequestHosts(request=req("waits", 1, "globex")))
    # The tracker requires a bearer token on /v1 and /ui (docs/security.md); the tenant header picks
    # the tenant for a super admin's token.
    http = TestClient(TestServer(make_app(EventStore(env.nc), index=False, planner_metrics=False)),
                      headers={"Authorization": f"Bearer {os.environ['MUSTER_TOKEN']}"})
    await http.start_server()
    try:
        acme = {"X-Muster-Tenant": "acme"}
        listing = await (await http.get("/v1/pools", headers=acme)).json()
        assert [(p["pool"], p["hosts"], p["free"], p["waiting"]) for p in listing["items"]] == [("lab", 2, 0, 1)]
        detail = await (await http.get("/v1/pools/lab", headers=acme)).json()
        holders = {h["id"]: h["holder"] for h in detail["hosts_detail"]}
        assert holders["h0"]["cluster_id"] == "c-mine" and holders["h1"] == {
            "tenant": None, "cluster_id": None, "node_id": None, "request_id": None}
        assert detail["queue"][0]["position"] == 1 and detail["queue"][0]["tenant"] is None  # globex's, hidden
        globex = await (await http.get("/v1/pools/lab?hosts=false", headers={"X-Muster-Tenant": "globex"})).json()
        assert globex["queue"][0]["request_id"] == "waits" and globex["hosts_detail"] == []
        nowhere = await http.get("/v1/pools/nowhere", headers=acme)  # pools are every tenant's: no "in tenant acme"
        assert nowhere.status == 404 and (await nowhere.json())["error"]["message"] == "no pool 'nowhere': the pools are lab"
        assert (await http.get("/v1/pools/lab?hosts=maybe", headers=acme)).status == 400
        assert (await http.get("/v1/pools/a.b", headers=acme)).status in (400, 404)

        # The console's pages (docs/ui.md) show the same view, scoped the same way.
        listed = await (await http.get("/ui/pools", headers={"Cookie": "muster_tenant=acme"})).text()
        assert 'href="/ui/pools/lab"' in listed
        page = await http.get("/ui/pools/lab", headers={"Cookie": "muster_tenant=acme"})
        shown = await page.text()
        assert page.status == 200 and "c-mine" in shown and shown.count('data-testid="host"') == 2
        assert "globex" not in shown and "theirs" not in shown and "another tenant" in shown
        missing = await http.get("/ui/pools/nowhere", headers={"Cookie": "muster_tenant=acme"})
        said = await missing.text()
        assert missing.status == 404 and "There is no pool nowhere: the pools are lab." in said and 'href="/ui/pools/lab"' in said

        stream = await http.get("/v1/pools/lab/stream", headers={"X-Muster-Tenant": "globex"})
        first, view = await asyncio.wait_for(_next_event(stream), 15)
        assert first == "pool" and view["waiting"] == 1
        await pools.send(env.nc, "lab", ReportNodes(tenant="acme", request_id="mine", cluster_id="c-mine",
                                                    status="released", node_ids=["n0"]))
        _, released = await asyncio.wait_for(_next_event(stream), 15)  # the release and its grant, one event
        assert released["type"] == "HostsReleased" and released["hosts"][0]["id"] == "h0"
        assert released["hosts"][0]["holder"]["cluster_id"] == "c-waits"
        assert released["summary"]["waiting"] == 0
        stream.close()
    finally:
        await http.close()
