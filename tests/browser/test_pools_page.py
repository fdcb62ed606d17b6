"""The console's pool pages (docs/ui.md, docs/pools.md) in a real browser, on `muster up`'s own
pool service: hosts with their state and holder, and the waiting line in the pool's policy
order, another tenant's requests and holders shown without naming them."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from contracts.pool_commands import RequestHosts
from contracts.pools import NodeNeed, PoolRequest
from muster.bus.connect import connect, read_credentials_file
from services.pool import client as pools

from .conftest import Muster

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4"


def _request(rid: str, tenant: str, nodes: int, urgency: int) -> RequestHosts:
    return RequestHosts(request=PoolRequest(request_id=rid, pool="lab-ui", tenant=tenant, cluster_id=f"c-{rid}",
                                            job_id=rid, urgency=urgency,
                                            nodes=[NodeNeed(node_id=f"n{i}") for i in range(nodes)]))


async def _ask(url: str, token: str, requests: list[RequestHosts]) -> list[str]:
    nc = await connect(url, token=token)  # as muster up's super admin: pool commands are theirs
    try:
        return [(await pools.send(nc, "lab-ui", r)).state for r in requests]
    finally:
        await nc.close()


def test_a_pool_page_shows_hosts_their_holders_and_the_line_in_policy_order(muster: Muster, page: Any,
                                                                          tmp_path: Path) -> None:
    hosts = [{"id": f"h{i}", "address": f"10.9.0.{i}", "host_keys": [KEY], "cpu": 8, "memory": "16G", "labels": ["ssd"]}
             for i in (1, 2, 3)]
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    muster.cli("pool", "add-hosts", "lab-ui", str(tmp_path / "hosts.json"), "--data-dir", str(muster.data_dir))
    requests = [
        _request("mine", "default", 2, 50), _request("theirs", "someone", 1, 50),  # every host held
        _request("later", "default", 2, 10), _request("urgent", "someone", 1, 90),  # both wait
    ]
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API runs a loop in this one
        states = thread.submit(asyncio.run, _ask(muster.nats, read_credentials_file(muster.data_dir / "credentials"), requests)).result(60)
    assert states == ["granted", "granted", "waiting", "waiting"]

    page.goto("/ui/pools")
    row = page.get_by_test_id("pool").filter(has_text="lab-ui")
    expect(row).to_contain_text("3")
    row.get_by_role("link", name="lab-ui").click()
    expect(page.get_by_test_id("pool-name")).to_have_text("lab-ui")
    hosts_rows = page.get_by_test_id("host")
    expect(hosts_rows).to_have_count(3)
    expect(hosts_rows.filter(has_text="assigning")).to_have_count(3)  # granted, no node confirmed yet
    expect(hosts_rows.filter(has_text="c-mine")).to_have_count(2)
    expect(hosts_rows.filter(has_text="another tenant")).to_have_count(1)
    assert "someone" not in page.get_by_test_id("hosts").inner_text()
    line = page.get_by_test_id("waiting")
    expect(line).to_have_count(2)
    # Score = urgency x priority (1 for both tenants): the other tenant's urgent request first.
    expect(line.nth(0)).to_contain_text("another tenant")
    expect(line.nth(0)).to_contain_text("90")
    expect(line.nth(1)).to_contain_text("default")
    expect(line.nth(1)).to_contain_text("c-later")

    page.goto("/ui/pools/no-such-pool")
    expect(page.get_by_test_id("error")).to_have_text("There is no pool no-such-pool.")
