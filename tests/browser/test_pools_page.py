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

from contracts import subjects
from contracts.pool_commands import RequestHosts, ShowPool
from contracts.pools import NodeNeed, PoolRequest
from muster.bus.connect import connect, read_credentials_file
from services.pool import client as pools

from .conftest import Muster

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4"


def _request(rid: str, tenant: str, nodes: int, urgency: int) -> RequestHosts:
    return RequestHosts(request=PoolRequest(request_id=rid, pool="lab-ui", tenant=tenant, cluster_id=f"c-{rid}",
                                            job_id=rid, urgency=urgency,
                                            nodes=[NodeNeed(node_id=f"n{i}") for i in range(nodes)]))


async def _ask(url: str, token: str, requests: list[RequestHosts], pool: str = "lab-ui") -> list[str]:
    nc = await connect(url, token=token)  # as muster up's super admin: pool commands are theirs
    try:
        return [(await pools.send(nc, pool, r)).state for r in requests]
    finally:
        await nc.close()


async def _until_in_line(url: str, token: str, pool: str, job_id: str) -> None:
    """Once the pool has put the job's request in line (the job's own events say it asked; the
    pool's, where it stands): checked now and after each event of the pool."""
    nc = await connect(url, token=token)
    try:
        sub = await nc.subscribe(subjects.pool_events(pool))
        while True:  # each turn waits for the pool's next event, with a deadline
            view = (await pools.send(nc, pool, ShowPool())).view or {}
            if any(q["job_id"] == job_id for q in view.get("queue", [])):
                return
            await sub.next_msg(timeout=30)
    finally:
        await nc.close()


def test_with_no_pool_made_a_pool_page_says_how_one_is_made_its_command_as_code(muster: Muster, page: Any) -> None:
    """Walk of session 28: the answer shared with `muster pool show` and GET /v1/pools/{pool}
    marks its command with backticks, and the console showed them as they are. First in this
    file, which alone makes pools in the package (`--dist loadfile` keeps a file on one worker)."""
    page.goto("/ui/pools")
    expect(page.get_by_test_id("no-pools")).to_be_visible()  # else a pool was made before this test
    answer = page.goto("/ui/pools/lab-none")
    assert answer is not None and answer.status == 404
    said = page.get_by_test_id("error")
    expect(said).to_have_text("There is no pool lab-none: there are no pools yet (muster pool add-hosts NAME FILE makes one).")
    expect(said.locator("code")).to_have_text("muster pool add-hosts NAME FILE")
    expect(page.get_by_test_id("pools")).to_have_count(0)  # no empty table under it
    # Not by the console alone: what a terminal shows keeps its backticks, the way commands are
    # marked in every answer of the CLI.
    shown = muster.cli("pool", "show", "lab-none", "--data-dir", str(muster.data_dir), check=False)
    assert shown.returncode == 2 and "there are no pools yet (`muster pool add-hosts NAME FILE` makes one)" in shown.stderr, shown


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



def test_a_pool_nobody_made_is_answered_with_the_pools_there_are(muster: Muster, page: Any, tmp_path: Path) -> None:
    """Walk of session 27: `muster pool show` of a mistyped pool named the pools there are, the
    console's page of it said "There is no pool lab-listd." alone (and linked to clusters and jobs)."""
    hosts = [{"id": f"l{i}", "address": f"10.9.2.{i}", "host_keys": [KEY], "cpu": 4} for i in (1, 2)]
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    muster.cli("pool", "add-hosts", "lab-listed", str(tmp_path / "hosts.json"), "--data-dir", str(muster.data_dir))

    answer = page.goto("/ui/pools/lab-listd")
    assert answer is not None and answer.status == 404
    said = page.get_by_test_id("error")
    expect(said).to_contain_text("There is no pool lab-listd: the pools are ")
    expect(said).to_contain_text("lab-listed")
    row = page.get_by_test_id("pool").filter(has_text="lab-listed")  # as /ui/pools lists them
    expect(row.locator("td").nth(0)).to_have_text("2")  # hosts
    expect(row).to_contain_text("unassigned 2")
    row.get_by_role("link", name="lab-listed").click()
    expect(page.get_by_test_id("pool-name")).to_have_text("lab-listed")
    expect(page.get_by_test_id("host")).to_have_count(2)
    page.get_by_role("link", name="All pools").click()
    expect(page.get_by_test_id("pool").filter(has_text="lab-listed")).to_have_count(1)


def _pool_catalog(folder: Path, pool: str) -> Path:
    """A static-pool provider on `pool` and a template on it (the rest of the demo catalog is in
    the log already): a cluster of it asks the pool for one host per node."""
    entities = {
        "providers": {"name": pool, "description": f"hosts of pool {pool}", "providertype": "static-pool",
                      "provisioner": {"pool": pool}},
        "hardwaretypes": {"name": f"{pool}-host", "description": "any host", "providermap": {pool: {"flavor": "host", "requires": "cpu >= 1"}}},
        "imagetypes": {"name": f"{pool}-image", "description": "as installed", "providermap": {pool: {"image": "as-installed"}}},
        "clustertemplates": {"name": f"on-{pool}", "description": f"base on hosts of pool {pool}",
                             "defaults": {"services": ["base"], "provider": pool, "hardwaretype": f"{pool}-host",
                                          "imagetype": f"{pool}-image", "config": {}},
                             "compatibility": {"services": ["base"], "hardwaretypes": [f"{pool}-host"], "imagetypes": [f"{pool}-image"]},
                             "constraints": {"size": {"min": 1, "max": 5}}},
    }
    for kind, entity in entities.items():
        (folder / kind).mkdir(parents=True)
        (folder / kind / f"{entity['name']}.json").write_text(json.dumps(entity))
    return folder


def test_a_job_waiting_for_hosts_says_for_what_and_its_place_and_the_pool_shows_the_tenants_terms(
        muster: Muster, page: Any, tmp_path: Path) -> None:
    """What `muster status` and GET /v1/jobs/{id} say of a waiting job (docs/pools.md) is on its
    page too, and the pool's page shows the viewer's terms and what counts against them, as
    `muster pool show` and GET /v1/pools/{pool} do: they did not, so a person refused by a
    quota or waiting for hosts could not see why in the console."""
    hosts = [{"id": f"w{i}", "address": f"10.9.1.{i}", "host_keys": [KEY], "cpu": 2} for i in (1, 2)]
    (tmp_path / "hosts.json").write_text(json.dumps(hosts))
    data = ("--data-dir", str(muster.data_dir))
    muster.cli("pool", "add-hosts", "lab-wait", str(tmp_path / "hosts.json"), *data)
    muster.cli("pool", "configure", "lab-wait", "--max-nodes", "default=4", "--job-limit", "3", *data)
    muster.cli("catalog", "apply", str(_pool_catalog(tmp_path / "catalog", "lab-wait")), "--tenant", "default", *data)
    held = RequestHosts(request=PoolRequest(request_id="holds-all", pool="lab-wait", tenant="someone", cluster_id="c-holds",
                                            job_id="holds-all", nodes=[NodeNeed(node_id=f"n{i}") for i in range(2)]))
    with ThreadPoolExecutor(1) as thread:
        token = read_credentials_file(muster.data_dir / "credentials")
        assert thread.submit(asyncio.run, _ask(muster.nats, token, [held], "lab-wait")).result(60) == ["granted"]
    # The job asks the pool only once it is approved, so its page is rendered before it waits for
    # hosts and the live update must say so (as the console's Create opens a job that is still
    # being solved). Only clusters named pool-gated-*: the package's other tests share the tenant.
    muster.cli("rule", "add", "pool-gated", "-o", "create", "--cluster", "pool-gated-*", "--allow-self-approval", *data)
    try:
        waiting = muster.create("pool-gated-1", "on-lab-wait", 2)
    finally:
        muster.cli("rule", "delete", "pool-gated", *data)
    page.goto(f"/ui/jobs/{waiting['job_id']}")
    expect(page.get_by_test_id("job-state")).to_have_text("waiting for approval")
    line = page.get_by_test_id("job-resources")
    expect(line).to_have_count(0)
    muster.cli("job", "approve", waiting["job_id"], *data)  # elsewhere: this page goes on live
    expect(page.get_by_test_id("job-state")).to_have_text("waiting for resources")
    expect(line).to_contain_text("Waiting for 2 hosts of pool lab-wait")
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, _until_in_line(muster.nats, token, "lab-wait", waiting["job_id"])).result(60)
    page.reload()
    expect(line).to_contain_text("Waiting for 2 hosts of pool lab-wait: 1st in line")
    line.get_by_role("link").click()
    expect(page.get_by_test_id("pool-name")).to_have_text("lab-wait")
    expect(page.get_by_test_id("terms-hosts")).to_have_text("holds 0, waits for 2; quota: 4")
    expect(page.get_by_test_id("terms-clusters")).to_have_text("1 holding or waiting for hosts; quota: none")
    expect(page.get_by_test_id("terms-job")).to_have_text("at most 3 hosts")

    page.goto(f"/ui/jobs/{waiting['job_id']}")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("job-state")).to_have_text("rolled back", timeout=60_000)
    expect(line).to_be_hidden()  # it waits no longer: the live page does not say it does
