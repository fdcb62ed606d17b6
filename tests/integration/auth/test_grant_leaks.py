"""Within a tenant, what a principal's grants do not let it read it is not told by the answers
to what it may ask (session 32's audit, docs/security.md "What a refusal names"): another
principal's request under a reused `--request-id`, a cluster named to one who may not read it
(the tracker's reads, a saved plan applied), the prices and tenant totals a dry run shows, and an
operator's command in a tenant's 404 for a pool; the prices in a waiting job's cost (session 33). Real processes as `muster up` starts them
(nats-server with authorization on, the auth service, planner, solver, provisioner, tracker)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from muster.readmodel.cost import rate
from muster.runtime.supervisor import Deployment

from .deployed import Ran, auth_requests, deployed, run_as

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def named(name: str, text: str) -> bool:
    """`name` as a word of `text` (an id's hex may hold `c1`)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@dataclass
class Tenant:
    deployment: Deployment
    tokens: dict[str, str] = field(repr=False)  # never in test output
    ids: dict[str, str] = field(default_factory=dict)
    """Cluster name -> id, of those alice made."""
    jobs: dict[str, str] = field(default_factory=dict)
    """Cluster name -> the id of the job that made it."""

    async def muster(self, who: str, *args: str) -> Ran:
        return await run_as(self.deployment, self.tokens[who], *args)

    async def get(self, who: str, path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as http, http.request(method, self.deployment.tracker_url + path, headers={
                "Authorization": f"Bearer {self.tokens[who]}"}) as resp:
            return resp.status, await resp.json()

    async def page(self, who: str, path: str) -> str:
        """A console page or a finite event stream as `who` reads it (a script's bearer token, as the console takes one)."""
        async with aiohttp.ClientSession() as http, http.get(self.deployment.tracker_url + path, headers={
                "Authorization": f"Bearer {self.tokens[who]}"}) as resp:
            assert resp.status == 200, resp.status
            return await resp.text()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def acme(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Tenant]:
    async with deployed(tmp_path_factory.mktemp("leaks"), ("acme",)) as (deployment, nc):  # nc: the system identity
        ask = auth_requests(nc)

        async def grant(user: str, permission: str, scope: str) -> None:
            await ask("grant", principal=user, permission=permission, scope=scope, tenant="acme")

        tokens = {"root": deployment.admin_token() or ""}
        for user in ("alice", "wanda", "dave", "tina", "apo"):  # dave: no grants
            tokens[user] = (await ask("user-create", principal=user, tenant="acme"))["token"]
        for user, permission, scope in (("alice", "write", "cluster:*"), ("alice", "read", "catalog:*"),
                                        ("wanda", "read", "catalog:*"), ("tina", "write", "cluster:*"),
                                        ("tina", "read", "catalog:clustertemplates/hadoop-small"),
                                        ("apo", "approve", "cluster:*"), ("apo", "read", "cluster:*")):  # apo: no catalog
            await grant(user, permission, scope)
        made = Tenant(deployment, tokens)
        for name in ("c1", "c2"):
            created = await made.muster("alice", "cluster", "create", name, "-t", "hadoop-small", "-n", "2", "--wait", "--timeout", "90")
            assert created.code == 0, created
            found = re.search(rf"cluster {name} \(({UUID.pattern})\)", created.out)
            assert found is not None, created.out
            made.ids[name] = found.group(1)
            made.jobs[name] = created.out.split("job ")[1].split(",")[0]
        await grant("wanda", "write", f"cluster:{made.ids['c1']}")  # c1 only
        yield made


async def test_a_request_id_another_principal_used_is_refused_naming_nothing_of_its_request(acme: Tenant) -> None:
    first = await acme.muster("alice", "cluster", "create", "r1", "-t", "hadoop-small", "-n", "2", "--request-id", "shared-1")
    assert first.code == 0, first
    job = first.out.split("job ")[1].split(",")[0].split()[0]
    reused = await acme.muster("wanda", "cluster", "expand", "c1", "--add", "1", "--request-id", "shared-1")
    assert reused.code != 0 and "request_id 'shared-1' was used already in tenant acme by another principal's request" in reused.err, reused
    assert job not in reused.out + reused.err and not named("r1", reused.err) and "create" not in reused.err, reused
    # Its requester is still told which job its key made.
    again = await acme.muster("alice", "cluster", "expand", "c2", "--add", "1", "--request-id", "shared-1")
    assert again.code != 0 and f"for job {job} (create of cluster" in again.err, again


async def test_a_cluster_one_may_not_read_is_answered_as_one_that_is_not_there(acme: Tenant) -> None:
    c1 = acme.ids["c1"]
    for args in (("cluster", "show", "{}"), ("events", "--cluster", "{}"), ("replay", "--cluster", "{}")):
        hidden = await acme.muster("dave", *(a.format("c1") for a in args))
        absent = await acme.muster("dave", *(a.format("nosuch") for a in args))
        assert hidden.code == absent.code == 2, (hidden, absent)
        assert hidden.err == absent.err.replace("nosuch", "c1") and "no cluster named 'c1' in tenant acme" in hidden.err, (hidden, absent)
        assert c1 not in hidden.out + hidden.err
    status, body = await acme.get("dave", "/v1/events?cluster=c1")
    assert (status, body["error"]["message"]) == (404, "no cluster named 'c1' in tenant acme"), body
    # By its id (which the asker gave), refused naming only that id, not its name.
    status, body = await acme.get("wanda", f"/v1/replay?cluster={acme.ids['c2']}")
    assert status == 403 and acme.ids["c2"] in body["error"]["message"] and "c2 (" not in body["error"]["message"], body
    shown = await acme.muster("wanda", "cluster", "show", "c1", "--json")  # its grant reads it
    assert shown.code == 0 and json.loads(shown.out)["id"] == c1, shown


async def test_a_plan_applied_by_one_who_may_not_read_its_cluster_does_not_name_the_cluster(acme: Tenant) -> None:
    dry = await acme.muster("alice", "cluster", "expand", "c2", "--add", "1", "--dry-run", "--json")
    assert dry.code == 0, dry
    plan_id = json.loads(dry.out)["plan_id"]
    applied = await acme.muster("dave", "cluster", "apply", plan_id)
    assert applied.code == 4 and "dave may not apply this plan: it has no write permission on the plan's cluster" in applied.err, applied
    assert acme.ids["c2"] not in applied.err and not named("c2", applied.err), applied
    # wanda may write (and so read) c1, not c2: the same.
    applied = await acme.muster("wanda", "cluster", "apply", plan_id)
    assert applied.code == 4 and acme.ids["c2"] not in applied.err, applied
    # Through the API (the console's Apply too), whose own check named the cluster by its name:
    # "expand refused: dave has no write permission on cluster c2 (<id>) ...".
    status, body = await acme.get("dave", f"/v1/plans/{plan_id}/apply", "POST")
    said = body["error"]["message"]
    assert status == 403 and said.startswith("expand refused: dave may not apply this plan"), body
    assert acme.ids["c2"] not in said and not named("c2", said), body
    status, body = await acme.get("dave", f"/v1/plans/{plan_id}")  # reading it, the same
    said = body["error"]["message"]
    assert status == 403 and said.startswith("dave may not read this plan") and acme.ids["c2"] not in said, body
    # A cluster's id given by the writer is named back, its name only to one who may read it.
    status, body = await acme.get("dave", f"/v1/clusters/{acme.ids['c2']}", "DELETE")
    assert status == 403 and acme.ids["c2"] in body["error"]["message"] and not named("c2", body["error"]["message"]), body


async def test_a_dry_run_shows_only_the_prices_and_totals_its_requester_may_read(acme: Tenant) -> None:
    cost = await acme.muster("tina", "cluster", "cost")
    assert cost.code == 0 and "no price" in cost.out, cost  # her grants read no hardware type
    created = await acme.muster("tina", "cluster", "create", "tp1", "-t", "hadoop-small", "-n", "2", "--hardwaretype", "large",
                                "--dry-run", "--json")
    assert created.code == 0, created
    said = json.loads(created.out)
    assert said["cost"]["unknown"] == ["large"] and said["cost"]["per_hour"] == 0, said["cost"]
    assert said["policy"]["input"]["cost"]["per_hour"] == 0
    text = await acme.muster("tina", "cluster", "create", "tp1", "-t", "hadoop-small", "-n", "2", "--hardwaretype", "large", "--dry-run")
    assert text.code == 0 and "0.20" not in text.out and "large 2 × no price" in text.out, text

    refused = await acme.muster("wanda", "cluster", "cost")
    assert refused.code == 4, refused
    grown = await acme.muster("wanda", "cluster", "expand", "c1", "--add", "1", "--dry-run", "--json")
    assert grown.code == 0, grown
    tenant = json.loads(grown.out)["policy"]["input"]["tenant"]
    assert tenant == {"name": "acme", "clusters": None, "nodes": None, "per_hour": None}, tenant
    assert json.loads(grown.out)["cost"]["per_hour"] > 0  # the hardware types she may read are priced
    # One who reads every cluster is shown the totals.
    grown = await acme.muster("alice", "cluster", "expand", "c1", "--add", "1", "--dry-run", "--json")
    tenant = json.loads(grown.out)["policy"]["input"]["tenant"]
    assert tenant["clusters"] >= 1 and tenant["nodes"] >= 2 and tenant["per_hour"] > 0, tenant
    # Its preview in words says what the expand does to its type's cost, before -> once done.
    grown = await acme.muster("alice", "cluster", "expand", "c1", "--add", "1", "--dry-run")
    assert grown.code == 0 and re.search(r"\n  \w+ \d+\.\d+/h → \d+\.\d+/h\n", grown.out), grown


async def test_a_pool_nobody_made_is_answered_to_a_tenants_user_in_its_own_terms(acme: Tenant) -> None:
    status, body = await acme.get("dave", "/v1/pools/nosuch")
    assert status == 404 and body["error"]["message"] == (
        "no pool 'nosuch': there are no pools yet (the deployment's operators make them: ask yours for one)"), body
    status, body = await acme.get("root", "/v1/pools/nosuch")
    assert status == 404 and "`muster pool add-hosts NAME FILE` makes one" in body["error"]["message"], body
    # The console's page says the same to each (its browser test reads the operator's words).
    for who, said in (("dave", "there are no pools yet (the deployment&#39;s operators make them: ask yours for one)."),
                      ("root", "there are no pools yet (<code>muster pool add-hosts NAME FILE</code> makes one).")):
        async with aiohttp.ClientSession() as http, http.get(acme.deployment.tracker_url + "/ui/pools/nosuch", headers={
                "Cookie": f"muster_session={acme.tokens[who]}"}) as resp:
            page = await resp.text()
        assert resp.status == 404 and f"There is no pool nosuch: {said}" in page, (who, page[-1500:])


async def test_a_job_refused_to_one_who_may_not_read_its_cluster_asks_for_a_grant_on_the_job(acme: Tenant) -> None:
    """A grant on a job's cluster covers the job, and a refusal asked for it by the cluster's id:
    to one who may not read that cluster, the job's own grant is named instead."""
    job, c1 = acme.jobs["c1"], acme.ids["c1"]
    for args, permission in ((("status", job), "read"), (("job", "cancel", job), "execute")):
        refused = await acme.muster("dave", *args)
        assert refused.code == 4 and f"muster grant dave {permission} --scope job:{job})" in refused.err, refused
        assert c1 not in refused.out + refused.err and not named("c1", refused.err), refused
    # wanda reads c1 (her write on it): asked on the cluster, which covers every later job too.
    refused = await acme.muster("wanda", "job", "cancel", job)
    assert refused.code == 4 and f"muster grant wanda execute --scope cluster:{c1})" in refused.err, refused


async def test_a_waiting_jobs_cost_shows_its_reader_only_the_prices_it_may_read(acme: Tenant) -> None:
    """An approver without `read` on the hardware types reads the waiting job's nodes and types
    with no price, as `muster cluster cost` shows it them; one with catalog read, the prices."""
    added = await acme.muster("root", "rule", "add", "grown", "-o", "expand", "--min-nodes", "6", "--tenant", "acme")
    assert added.code == 0, added
    job = ""
    try:
        waiting = await acme.muster("alice", "cluster", "expand", "c2", "--add", "4", "--json")
        assert waiting.code == 0 and "waits for approval" in waiting.out, waiting
        job = json.loads(waiting.out)["job_id"]
        status, seen = await acme.get("alice", f"/v1/jobs/{job}")
        assert status == 200 and seen["state"] == "waiting_for_approval", seen
        priced = seen["approval"]["cost"]
        types = sorted(priced["by_hardware"])
        assert priced["per_hour"] > 0 and priced["before_per_hour"] > 0 and not priced["unknown"], priced
        assert seen["approval"]["cost_now"]["per_hour"] == priced["per_hour"], seen["approval"]

        status, seen = await acme.get("apo", f"/v1/jobs/{job}")
        assert status == 200, seen
        for field in ("cost", "cost_now"):
            cost = seen["approval"][field]
            assert cost["per_hour"] == 0 and cost["before_per_hour"] == 0 and cost["unknown"] == types, (field, cost)
            assert set(cost["by_hardware"]) == set(types) and not any(cost["by_hardware"].values()), (field, cost)
        assert len(seen["approval"]["cost"]["per_node"]) == 6 and not any(seen["approval"]["cost"]["per_node"].values())
        status, page = await acme.get("apo", f"/v1/jobs/{job}/events")
        recorded = [e["event"]["cost"] for e in page["items"] if e["type"] == "JobApprovalRequested"]
        assert status == 200 and len(recorded) == 1 and recorded[0]["per_hour"] == 0, page

        streamed = await acme.page("apo", f"/v1/events?job={job}")  # the log's stream (`muster history`, `events`)
        costs = [json.loads(line[6:])["event"]["cost"] for line in streamed.splitlines()
                 if line.startswith("data: ") and '"JobApprovalRequested"' in line]
        assert len(costs) == 1 and costs[0]["per_hour"] == 0 and costs[0]["unknown"] == types, streamed

        said = await acme.muster("apo", "status", job)
        assert said.code == 0 and f"{types[0]} 6 × no price" in said.out, said
        assert rate_of(priced["per_hour"]) not in said.out and rate_of(priced["before_per_hour"]) not in said.out, said
        html = await acme.page("apo", f"/ui/jobs/{job}")
        assert f"{types[0]} 6 × no price" in html and rate_of(priced["per_hour"]) not in html, html  # the console's job page
        assert rate_of(priced["per_hour"]) in await acme.page("alice", f"/ui/jobs/{job}")
        spend = await acme.muster("apo", "cluster", "cost")
        assert spend.code == 0 and "no price" in spend.out, spend  # the same rule
        shown = await acme.muster("alice", "status", job)
        assert shown.code == 0 and f"costs {rate_of(priced['per_hour'])}" in shown.out and "no price" not in shown.out, shown
        # What the expand does to each type's cost (`before_by_hardware`, PlanCost v2), as each may read it.
        change = f"{types[0]} {rate_of(priced['before_by_hardware'][types[0]])} → {rate_of(priced['by_hardware'][types[0]])}"
        assert priced["before_by_hardware"][types[0]] > 0 and f"\n    {change}\n" in shown.out, shown
        # apo reads no type the expand moves: no line per type (its cost line says `no price` for each)
        assert "→" not in said.out and "→" not in html, said
        assert f"<li>{change}</li>" in await acme.page("alice", f"/ui/jobs/{job}")
        assert not any(seen["approval"]["cost"]["before_by_hardware"].values()), seen["approval"]
    finally:
        await acme.muster("root", "rule", "delete", "grown", "--tenant", "acme")
        if job:  # (the other tests expand no cluster this far)
            await acme.muster("root", "job", "reject", job, "--tenant", "acme")


def rate_of(value: float) -> str:
    return f"{rate(value)}/h"
