"""A policy's own messages are shown only to a reader who may read what the policy read
(docs/security.md, "What a refusal names"; services/governance/domain/disclosure.py): a budget
policy's `deny` that prints the tenant's total spend said it to a requester that `GET /v1/cost`
refuses (session 33). Over the CLI, HTTP and raw NATS, at admission and in a dry run; in the
job's record; the tenant's administrators read the words in `muster history --governance`.
Real processes as `muster up` starts them (nats-server with authorization on, the auth service,
planner, solver, provisioner, tracker)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from contracts import subjects
from contracts.commands import ExpandCluster
from muster.bus.connect import connect
from muster.runtime.supervisor import Deployment

from .deployed import Ran, auth_requests, deployed, run_as

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

BUDGET = """# The tenant's spend has a ceiling.
package budget

import rego.v1

deny contains msg if {
    input.operation == "expand"
    spend := input.tenant.per_hour + input.cost.per_hour - input.cost.before_per_hour
    spend > 0.0001
    msg := sprintf("tenant would spend SPEND=%v an hour over NODES=%v nodes", [spend, input.tenant.nodes])
}
"""
ASKED = """# Say what is asked.
package asked

import rego.v1

warn contains msg if {
    msg := sprintf("operation %v asked", [input.operation])
}
"""
SHRINKS = """# A shrink says what is left.
package shrinks

import rego.v1

warn contains msg if {
    input.operation == "shrink"
    msg := sprintf("TOTAL=%v", [input.tenant.nodes])
}
"""
SEALED = "a deny rule holds whose message is not shown to wanda: the policy reads the tenant's totals"


@dataclass
class Tenant:
    deployment: Deployment
    tokens: dict[str, str] = field(repr=False)  # never in test output
    ids: dict[str, str] = field(default_factory=dict)

    async def muster(self, who: str, *args: str) -> Ran:
        return await run_as(self.deployment, self.tokens[who], *args)

    async def http(self, who: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as http, http.request(method, self.deployment.tracker_url + path, json=body, headers={
                "Authorization": f"Bearer {self.tokens[who]}"}) as resp:
            return resp.status, await resp.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def acme(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Tenant]:
    base = tmp_path_factory.mktemp("messages")
    async with deployed(base, ("acme",)) as (deployment, nc):
        ask = auth_requests(nc)
        tokens = {"root": deployment.admin_token() or ""}
        for user in ("alice", "wanda"):
            tokens[user] = (await ask("user-create", principal=user, tenant="acme"))["token"]
        for user, permission, scope in (("alice", "write", "cluster:*"), ("alice", "read", "catalog:*"),
                                        ("wanda", "read", "catalog:*")):
            await ask("grant", principal=user, permission=permission, scope=scope, tenant="acme")
        made = Tenant(deployment, tokens)
        created = await made.muster("alice", "cluster", "create", "c1", "-t", "hadoop-small", "-n", "3", "--wait", "--timeout", "90", "--json")
        assert created.code == 0, created
        made.ids["c1"] = json.loads(created.out.splitlines()[0])["cluster_id"]
        await ask("grant", principal="wanda", permission="write", scope=f"cluster:{made.ids['c1']}", tenant="acme")
        for name, source in (("budget", BUDGET), ("asked", ASKED), ("shrinks", SHRINKS)):
            (base / f"{name}.rego").write_text(source)
            applied = await made.muster("root", "policy", "apply", str(base / f"{name}.rego"), "--tenant", "acme")
            assert applied.code == 0, applied
        yield made


def _hidden(text: str) -> bool:
    """Nothing of the budget's message: its figures' labels are in its words only."""
    return "SPEND=" not in text and "NODES=" not in text


async def test_a_requester_that_may_not_read_the_totals_is_told_the_policy_not_its_words(acme: Tenant) -> None:
    refused = await acme.muster("wanda", "cluster", "expand", "c1", "--add", "1")
    assert refused.code == 4 and SEALED in refused.err and "(policy budget)" in refused.err, refused
    assert "`read` on cluster:*" in refused.err and _hidden(refused.err), refused
    # Who may read the totals is told the policy's words.
    told = await acme.muster("alice", "cluster", "expand", "c1", "--add", "1")
    assert told.code == 4 and "SPEND=" in told.err and "NODES=3 nodes" in told.err, told


async def test_the_same_over_http_and_raw_nats(acme: Tenant) -> None:
    status, body = await acme.http("wanda", "POST", f"/v1/clusters/{acme.ids['c1']}/expand", {"nodes": 4})
    assert status == 403 and SEALED in body["error"]["message"] and _hidden(json.dumps(body)), body
    nc = await connect(acme.deployment.nats_url or "", name="wanda", token=acme.tokens["wanda"])
    try:
        command = ExpandCluster(cluster_id=acme.ids["c1"], nodes=4, requested_by="wanda")
        reply = await nc.request(subjects.operation("acme", "wanda", "expand"), command.model_dump_json().encode(), timeout=30)
    finally:
        await nc.close()
    answer = json.loads(reply.data)
    assert answer["type"] == "Rejected" and SEALED in answer["reason"] and _hidden(reply.data.decode()), answer


async def test_a_dry_run_names_the_policy_its_requester_may_not_read_the_words_of(acme: Tenant) -> None:
    dry = await acme.muster("wanda", "cluster", "expand", "c1", "--add", "1", "--dry-run", "--json")
    assert dry.code == 0, dry
    policy = json.loads(dry.out)["policy"]
    assert len(policy["deny"]) == 1 and policy["deny"][0].startswith(SEALED) and _hidden(dry.out), policy
    dry = await acme.muster("alice", "cluster", "expand", "c1", "--add", "1", "--dry-run", "--json")
    assert "SPEND=" in json.loads(dry.out)["policy"]["deny"][0], dry


async def test_the_tenants_administrators_read_the_words_in_its_governance_history(acme: Tenant) -> None:
    history = await acme.muster("root", "history", "--governance", "--tenant", "acme")
    assert history.code == 0 and "SPEND=" in history.out, history
    # A message whose policy reads nothing withheld is said to anyone.
    dry = await acme.muster("wanda", "cluster", "expand", "c1", "--add", "1", "--dry-run", "--json")
    assert json.loads(dry.out)["policy"]["warn"] == ["operation expand asked (policy asked)"], dry


async def test_the_jobs_record_keeps_such_a_warning_from_every_reader(acme: Tenant) -> None:
    dry = await acme.muster("alice", "cluster", "shrink", "c1", "--remove", "1", "--dry-run", "--json")
    assert dry.code == 0 and "TOTAL=3 (policy shrinks)" in json.loads(dry.out)["policy"]["warn"], dry  # she may read the totals
    shrunk = await acme.muster("wanda", "cluster", "shrink", "c1", "--remove", "1", "--json")
    assert shrunk.code == 0, shrunk
    answer = json.loads(shrunk.out.splitlines()[0])
    said = [w for w in answer["warnings"] if "(policy shrinks)" in w]
    assert len(said) == 1 and said[0].startswith("a warn rule holds whose message is kept from the job's record"), answer
    assert "TOTAL=" not in shrunk.out + shrunk.err, shrunk
    # Whoever reads the job reads its record: alice, who may read the totals, too (a dry run tells her).
    status = await acme.muster("alice", "status", answer["job_id"], "--json")
    warned = {w["policy"]: w["message"] for w in json.loads(status.out)["policy_warnings"]}
    assert warned["shrinks"].startswith("a warn rule holds whose message is kept") and warned["asked"] == "operation shrink asked", warned
