"""The governance service under its own identity, on a server with authorization on: people
change policies, rules, subscriptions and schedules with their own tokens over raw nats-py
connections; the service checks their rights, validates, and records them as `by`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from contracts import subjects
from contracts.commands import VERB_OF, ApproveJob, CreateCluster
from contracts.events import ClusterRequested
from contracts.records import Append
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.files import load_catalog
from muster.catalog.store import apply_catalog
from services.governance.entrypoint import start_governance
from services.notifier.domain.secrets import NotifierSecrets
from services.notifier.entrypoint import start_notifier
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from services.solver.entrypoint import start_solver
from services.tracker.http import make_app

from .conftest import Authed
from .test_cli import muster
from .test_isolation import Raw, raw

DEMO = Path(__file__).parents[3] / "muster" / "demo" / "catalog"
NODES = """package muster.nodes
import rego.v1

deny contains msg if {
    input.request.nodes > 10
    msg := sprintf("at most 10 nodes per cluster; %d asked", [input.request.nodes])
}
"""
PEOPLE: dict[str, dict[str, Any]] = {
    "gov": {"role": "service", "service": "governance"},
    "notifier": {"role": "service", "service": "notifier"},
    "ada": {"tenant": "a", "role": "tenant_admin"},
    "uma": {"tenant": "a"},
    "apo": {"tenant": "a"},
    "rex": {"tenant": "a"},
    "sam": {"tenant": "a"},
    "eve": {"tenant": "b", "role": "tenant_admin"},
}
GRANTS = (("uma", "read", "tenant"), ("uma", "execute", "cluster:*"), ("uma", "write", "cluster:*"), ("uma", "approve", "cluster:*"),
          ("apo", "approve", "tenant"), ("rex", "read", "tenant"), ("rex", "write", "cluster:*"), ("rex", "execute", "cluster:*"),
          ("sam", "execute", "cluster:*"))


@dataclass
class People:
    authed: Authed
    tokens: dict[str, str]
    raw: dict[str, Raw]


@pytest_asyncio.fixture
async def people(authed: Authed) -> AsyncIterator[People]:
    tokens = await authed.people(PEOPLE, GRANTS)
    conns = {pid: await raw(authed, tokens[pid], pid) for pid in PEOPLE if pid not in ("gov", "notifier")}
    try:
        yield People(authed, tokens, conns)
    finally:
        for r in conns.values():
            await r.nc.close()


BROKEN = "package muster.broken\nimport rego.v1\n\ndeny contains msg if {\n    input.request.nodes >\n    msg := \"x\"\n}\n"


@pytest_asyncio.fixture
async def served(people: People) -> AsyncIterator[People]:
    async with AsyncExitStack() as stack:
        nc = await connect(people.authed.url, name="governance", token=people.tokens["gov"])
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream(), tasks=False)  # what its start declares (muster.runtime.service)
        await start_governance(nc, stack, "governance-test")
        yield people


async def ask(p: People, who: str, verb: str, tenant: str = "a", **body: Any) -> dict[str, Any]:
    reply = await p.raw[who].nc.request(subjects.governance_request(tenant, who, verb), json.dumps(body).encode(), timeout=10)
    return dict(json.loads(reply.data))


async def test_policies_are_written_by_administrators_only_compiled_and_recorded_with_their_author(served: People) -> None:
    put = await ask(served, "ada", "put", kind="policy", entities=[{"name": "nodes", "source": NODES}])
    assert put["ok"], put
    assert put["items"][0]["version"] == 1 and put["items"][0]["action"] == "add"
    again = await ask(served, "ada", "put", kind="policy", entities=[{"name": "nodes", "source": NODES}])
    assert again["ok"] and again["items"] == []  # the same put twice writes nothing

    broken = await ask(served, "ada", "put", kind="policy", entities=[{"name": "broken", "source": BROKEN}])
    assert not broken["ok"]
    assert "line 5" in broken["problems"][0] and broken["code"] == "invalid", broken  # the line and the reason

    user = await ask(served, "uma", "put", kind="policy", entities=[{"name": "mine", "source": NODES}])
    assert not user["ok"] and "administrators" in user["reason"] and user["code"] == "forbidden", user
    # A tenant's people can ask only in their own tenant and name: the server refuses the rest.
    await served.raw["eve"].denied_publish(subjects.governance_request("a", "eve", "put"))

    listed = await ask(served, "uma", "list", kind="policy")
    assert [i["name"] for i in listed["items"]] == ["nodes"] and listed["items"][0]["by"] == "ada"
    assert (await ask(served, "ada", "delete", kind="policy", name="nodes"))["ok"]
    assert (await ask(served, "uma", "list", kind="policy"))["items"] == []


async def test_subscriptions_keep_secrets_out_and_stay_on_the_tenants_subjects(served: People) -> None:
    clear = await ask(served, "uma", "put", kind="subscription", entities=[
        {"name": "hook", "events": ["job_failed"], "webhook": {"url": "http://127.0.0.1:9/x", "secret": "hunter2"}}])
    assert not clear["ok"] and "secret://" in clear["problems"][0] and "hunter2" not in json.dumps(clear)
    other = await ask(served, "uma", "put", kind="subscription", entities=[
        {"name": "bus", "events": ["job_failed"], "subject": "muster.cb.b.spy"}])
    assert not other["ok"] and "muster.cb.a." in other["problems"][0]
    ok = await ask(served, "uma", "put", kind="subscription", entities=[
        {"name": "bus", "events": ["job_failed", "needs_approval"], "subject": "muster.cb.a.ops"}])
    assert ok["ok"], ok
    # Listed with each one's last delivery, read from its notification subject: the service's
    # rights must allow that read (a scoped direct get), else `muster notify list` timed out
    # as an internal error whenever the tenant had a subscription (walk of session 26).
    listed = await ask(served, "uma", "list", kind="subscription")
    assert listed["ok"], listed
    assert [(i["name"], i["delivery"]) for i in listed["items"]] == [("bus", None)]


async def test_a_schedule_needs_its_operations_permission_and_its_owner_is_its_author(served: People) -> None:
    schedule = {"name": "nightly", "cron": "0 3 * * *", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    refused = await ask(served, "apo", "put", kind="schedule", entities=[schedule])
    assert not refused["ok"] and "execute" in refused["reason"], refused
    nowhere = await ask(served, "uma", "put", kind="schedule", entities=[schedule])  # the governance service reads the log
    assert not nowhere["ok"] and nowhere["problems"] == [
        "schedule 'nightly': there is no cluster 'c1' in tenant 'a': its operation could never run"], nowhere
    await _cluster_web(served)
    made = await ask(served, "uma", "put", kind="schedule", entities=[schedule])
    assert made["ok"], made
    listed = await ask(served, "uma", "list", kind="schedule")
    assert listed["items"][0]["entity"]["owner"] == "uma"
    bad = await ask(served, "uma", "put", kind="schedule", entities=[{**schedule, "name": "bad", "cron": "0 3 * *"}])
    assert not bad["ok"] and "cron" in bad["problems"][0]
    wrong = await ask(served, "uma", "put", kind="schedule", entities=[{**schedule, "name": "wrong", "verb": "delete"}])
    assert not wrong["ok"] and "CheckCluster" in wrong["problems"][0]


# -- with a planner and a solver of their own identities ------------------------------------------

PLANNER_PEOPLE = {"pln": {"role": "service", "service": "planner"}, "slv": {"role": "service", "service": "solver"}}


@pytest_asyncio.fixture
async def planned(served: People) -> AsyncIterator[People]:
    served.tokens.update(await served.authed.people(PLANNER_PEOPLE))
    async with AsyncExitStack() as stack:
        planner_nc = await connect(served.authed.url, name="planner", token=served.tokens["pln"])
        solver_nc = await connect(served.authed.url, name="solver", token=served.tokens["slv"])
        stack.push_async_callback(planner_nc.close)
        stack.push_async_callback(solver_nc.close)
        await start_planner(planner_nc, stack, PlannerConfig(instance="planner-gov", shards=2))
        await start_solver(solver_nc, stack, "solver-gov")
        system = await connect(served.authed.url, name="system", token=served.authed.system_token)
        stack.push_async_callback(system.close)
        await apply_catalog(EventStore(system), "a", load_catalog(DEMO))
        yield served


async def operate(p: People, who: str, command: Any, tenant: str = "a") -> dict[str, Any]:
    subject = subjects.operation(tenant, who, VERB_OF[command.type])
    reply = await p.raw[who].nc.request(subject, command.model_dump_json().encode(), timeout=30)
    return dict(json.loads(reply.data))


async def test_a_policy_denies_a_50_node_create_and_allows_a_5_node_one(planned: People) -> None:
    assert (await ask(planned, "ada", "put", kind="policy", entities=[{"name": "nodes", "source": NODES}]))["ok"]
    big = await operate(planned, "uma", CreateCluster(name="big", template="hadoop-small", nodes=50))
    assert big["type"] == "Rejected" and "at most 10 nodes per cluster; 50 asked" in big["reason"], big
    small = await operate(planned, "uma", CreateCluster(name="small", template="hadoop-small", nodes=5))
    assert small["type"] == "Accepted", small


async def test_an_approver_in_another_tenant_cannot_approve(planned: People) -> None:
    assert (await ask(planned, "ada", "put", kind="rule", entities=[{"name": "creates", "operations": ["create"]}]))["ok"]
    waiting = await operate(planned, "uma", CreateCluster(name="gated", template="hadoop-small", nodes=3))
    assert waiting["type"] == "Accepted" and "waits for approval" in waiting["warnings"][0], waiting
    job = waiting["job_id"]
    # Another tenant's admin: the server refuses its request in tenant a, and in its own tenant the job is unknown.
    await planned.raw["eve"].denied_publish(subjects.operation("a", "eve", "approve"))
    other = await operate(planned, "eve", ApproveJob(job_id=job), tenant="b")
    assert other["type"] == "Rejected" and "unknown job" in other["reason"], other
    own = await operate(planned, "uma", ApproveJob(job_id=job))
    # the reason alone: each client says which verb was refused ("approve rejected: approve refused: ..." before)
    assert own["type"] == "Rejected" and own["reason"].startswith(f"uma may not approve job {job}: uma asked for it"), own  # it holds `approve`
    ok = await operate(planned, "apo", ApproveJob(job_id=job, comment="fine"))
    assert ok["type"] == "Accepted", ok
    again = await operate(planned, "apo", ApproveJob(job_id=job))
    assert again["type"] == "Rejected" and again["reason"] == "the job was decided already (by apo)", again


@asynccontextmanager
async def tracker_http(planned: People) -> AsyncIterator[tuple[TestClient, EventStore]]:
    """A tracker (its own service identity) serving HTTP to the test, and its store."""
    planned.tokens.update(await planned.authed.people({"trk": {"role": "service", "service": "tracker"}}))
    nc = await connect(planned.authed.url, name="tracker", token=planned.tokens["trk"])
    store = EventStore(nc)
    http = TestClient(TestServer(make_app(store, index=False, planner_metrics=False)))
    await http.start_server()
    try:
        yield http, store
    finally:
        await http.close()
        await nc.close()


async def test_approve_over_http_with_a_token_and_never_from_another_site(planned: People) -> None:
    assert (await ask(planned, "ada", "put", kind="rule", entities=[{"name": "creates", "operations": ["create"]}]))["ok"]
    waiting = await operate(planned, "uma", CreateCluster(name="viahttp", template="hadoop-small", nodes=3))
    job = waiting["job_id"]
    async with tracker_http(planned) as (http, store):
        async def post(who: str, path: str, **headers: str) -> tuple[int, dict[str, Any]]:
            auth = {"Authorization": f"Bearer {planned.tokens[who]}"} if who else {}
            async with http.post(path, json={"comment": "ok by http"}, headers={**auth, **headers}) as resp:
                return resp.status, await resp.json()

        status, body = await post("eve", f"/v1/jobs/{job}/approve", **{"X-Muster-Tenant": "a"})
        assert status == 403 and "belongs to tenant b" in body["error"]["message"]
        http.session.cookie_jar.update_cookies({"muster_session": planned.tokens["apo"]})
        status, body = await post("", f"/v1/jobs/{job}/approve")  # the console's cookie alone, no CSRF header
        assert status == 403 and "CSRF" in body["error"]["message"]
        http.session.cookie_jar.clear()
        status, body = await post("uma", f"/v1/jobs/{job}/approve")  # the requester, which holds `approve` too
        assert status == 403 and f"uma may not approve job {job}: uma asked for it" in body["error"]["message"], body
        status, body = await post("apo", f"/v1/jobs/{job}/approve")
        assert status == 202 and body["job_id"] == job, body
        approved = [r.event for r in await store.read(subjects.job_events("a", job)) if r.type == "JobApproved"]
        assert [(e.by, e.comment) for e in approved] == [("apo", "ok by http")]
        async with http.get("/v1/governance/rules", headers={"Authorization": f"Bearer {planned.tokens['uma']}"}) as resp:
            assert resp.status == 200 and [i["name"] for i in (await resp.json())["items"]] == ["creates"]


async def test_a_requester_without_approve_rejects_its_own_job_over_http(planned: People) -> None:
    """docs/governance.md: "a requester may always reject its own job". The tracker (and behind
    it the planner) asked for `approve` first, and refused the requester that lacked it: 403."""
    assert (await ask(planned, "ada", "put", kind="rule", entities=[{"name": "creates", "operations": ["create"]}]))["ok"]
    waiting = await operate(planned, "rex", CreateCluster(name="mine", template="hadoop-small", nodes=3))
    assert waiting["type"] == "Accepted" and "waits for approval" in waiting["warnings"][0], waiting
    job = waiting["job_id"]
    async with tracker_http(planned) as (http, store):
        async def post(who: str, verb: str) -> tuple[int, dict[str, Any]]:
            async with http.post(f"/v1/jobs/{job}/{verb}", json={"comment": "changed my mind"},
                                 headers={"Authorization": f"Bearer {planned.tokens[who]}"}) as resp:
                return resp.status, await resp.json()

        status, body = await post("rex", "approve")
        # Why it may not, not a grant to ask for that would not help (it said `rex has no approve
        # permission ... (a tenant admin can give it: muster grant rex approve ...)`).
        said = body["error"]["message"]
        assert status == 403 and said.startswith(f"rex may not approve job {job}: rex asked for it") and "muster grant" not in said, body
        status, body = await post("rex", "reject")
        assert status == 202 and body["job_id"] == job, body
        rejected = [r.event for r in await store.read(subjects.job_events("a", job)) if r.type == "JobRejected"]
        assert [(e.by, e.comment) for e in rejected] == [("rex", "changed my mind")]


async def test_an_approval_refused_for_who_asks_is_one_sentence_on_the_bus_over_http_and_in_the_cli(planned: People) -> None:
    """Session 34: the requester approving its own job and a user without `approve` were refused
    in two shapes (`uma asked for the job and may not approve it ...` from the planner; `approve
    refused: rex has no approve permission ...` from the tracker's own check over HTTP). Now
    `<who> may not approve job <id>: <why>` for both, the same words on every surface."""
    assert (await ask(planned, "ada", "put", kind="rule", entities=[{"name": "creates", "operations": ["create"]}]))["ok"]
    waiting = await operate(planned, "uma", CreateCluster(name="oneword", template="hadoop-small", nodes=3))
    job = waiting["job_id"]
    why = {"uma": "uma asked for it, and not every rule that matched allows self-approval: another principal with approve "
                  "on its cluster decides (uma may reject it)",
           "rex": f"rex has no approve permission on job {job} of tenant a (a tenant admin can give it: muster grant rex "
                  f"approve --scope cluster:{waiting['cluster_id']})"}
    async with tracker_http(planned) as (http, _):
        for who, reason in why.items():
            sentence = f"{who} may not approve job {job}: {reason}"
            bus = await operate(planned, who, ApproveJob(job_id=job))
            assert bus["type"] == "Rejected" and bus["reason"] == sentence, bus
            async with http.post(f"/v1/jobs/{job}/approve", json={}, headers={"Authorization": f"Bearer {planned.tokens[who]}"}) as resp:
                body = await resp.json()
            assert resp.status == 403 and body["error"]["message"] == sentence, body
            code, _, err = await muster(planned.authed, "job", "approve", job, token=planned.tokens[who])
            assert code != 0 and f"approve rejected: {sentence}" in err, err


async def test_a_tenant_admin_types_governance_commands_without_tenant(served: People) -> None:
    """As with every other command, a tenant's user names no --tenant: the token's own is used;
    another tenant is refused at once, not after the request's timeout."""
    token = served.tokens["ada"]
    code, out, err = await muster(served.authed, "rule", "add", "big", "-o", "create", "--min-nodes", "5", token=token)
    assert code == 0 and "rule big: version 1 (add)" in out, err
    code, out, err = await muster(served.authed, "rule", "list", "--json", token=token)
    assert code == 0 and [i["name"] for i in json.loads(out.splitlines()[0])["items"]] == ["big"], err
    code, out, err = await muster(served.authed, "rule", "list", "--tenant", "b", token=token)
    assert code == 4 and "ada may not send list requests in tenant b" in err, (code, err)
    assert token not in out + err


async def test_a_webhook_is_checked_by_the_notifier_in_the_requesters_name_and_tenant(served: People) -> None:
    """Each service under its own identity: the governance service may ask the notifier, which
    answers with the secrets of the requester's tenant only (a name another tenant has is as
    missing as one nobody has) and refuses a destination inside the deployment."""
    async with AsyncExitStack() as stack:
        nc = await connect(served.authed.url, name="notifier", token=served.tokens["notifier"])
        stack.push_async_callback(nc.close)
        await start_notifier(nc, stack, NotifierSecrets.of({"@secrets": {"hook": "k"}, "@tenants": {"b": {"b-hook": "kb"}}}))
        webhook = {"url": "https://hooks.invalid/x", "secret": "secret://b-hook"}
        hook: dict[str, Any] = {"name": "hook", "events": ["job_failed"], "webhook": webhook}
        others = await ask(served, "uma", "put", kind="subscription", entities=[hook])
        assert not others["ok"] and others["problems"] == [
            "subscription 'hook': webhook.secret: secret 'b-hook' is not in the notifier's secrets file "
            "(under '@secrets', or '@tenants' → 'a')"], others
        theirs = await ask(served, "eve", "put", tenant="b", kind="subscription", entities=[hook])
        assert theirs["ok"] and "not checked" not in json.dumps(theirs), theirs
        inside = {**hook, "webhook": {"url": "http://127.0.0.1:9/x", "secret": "secret://hook"}}
        loopback = await ask(served, "uma", "put", kind="subscription", entities=[inside])
        assert not loopback["ok"] and "127.0.0.1 is a loopback address" in loopback["problems"][0], loopback
        shared = await ask(served, "uma", "put", kind="subscription", entities=[{**hook, "webhook": {**webhook, "secret": "secret://hook"}}])
        (warning,) = shared["warnings"]
        assert shared["ok"] and warning.startswith("subscription 'hook': hooks.invalid does not resolve to a public address now: "), shared


async def test_policies_rules_and_subscriptions_over_http_as_the_cli_writes_them_and_never_in_another_tenant(served: People) -> None:
    """Policies, rules and subscriptions were written by `muster policy|rule|notify` alone; over
    HTTP a tenant's people put and delete them with their own tokens, in their own names, and the
    governance service checks them as it checks the CLI's requests. Another tenant's token reads
    and writes only its own."""
    async with tracker_http(served) as (http, store):
        async def call(method: str, who: str, path: str, body: Any = None, **headers: str) -> tuple[int, dict[str, Any]]:
            async with http.request(method, path, json=body, headers={"Authorization": f"Bearer {served.tokens[who]}", **headers}) as resp:
                return resp.status, await resp.json()

        status, body = await call("PUT", "ada", "/v1/governance/policies/nodes", {"source": NODES, "description": "size"})
        assert status == 200 and body["ok"] and body["items"][0]["version"] == 1, body
        puts = [r.event for r in await store.read(subjects.governance_events("a", "policy", "nodes"))]
        assert [(e.type, e.by) for e in puts] == [("GovernancePut", "ada")]
        status, body = await call("GET", "uma", "/v1/governance/policies/nodes")  # `read` on the tenant
        assert status == 200 and body["entity"]["source"] == NODES and body["by"] == "ada" and body["version"] == 1, body

        status, body = await call("PUT", "uma", "/v1/governance/policies/mine", {"source": NODES})
        assert status == 403 and "administrators" in body["error"]["message"], body
        status, body = await call("PUT", "ada", "/v1/governance/policies/broken", {"source": BROKEN})
        assert status == 422 and "line 5" in body["error"]["message"], body
        # A name that is not one is refused as `muster policy apply Bad-Name!.rego` refuses it (it stored `Bad-Name-`).
        status, body = await call("PUT", "ada", "/v1/governance/policies/Bad-Name!", {"source": NODES})
        assert status == 400 and body["error"]["message"] == "name 'Bad-Name!' is not a name: use 1 to 64 letters, digits, " \
            "'-' and '_' (character 9 is '!')", body
        status, body = await call("PUT", "ada", "/v1/governance/policies/nodes", {"source": NODES, "nodes": 3})
        assert status == 422 and body["error"]["parameter"] == "nodes", body
        status, body = await call("PUT", "ada", "/v1/governance/rules/big", {"operations": ["create"], "min_nodes": 5})
        assert status == 200 and body["items"][0]["kind"] == "rule", body

        # Another tenant's administrator: its own tenant has no such policy; tenant a is not its to name.
        for method, body_ in (("GET", None), ("PUT", {"source": NODES}), ("DELETE", None)):
            status, body = await call(method, "eve", "/v1/governance/policies/nodes", body_, **{"X-Muster-Tenant": "a"})
            assert status == 403 and "belongs to tenant b" in body["error"]["message"], (method, body)
        status, body = await call("GET", "eve", "/v1/governance/policies/nodes")
        assert status == 404, body
        status, body = await call("DELETE", "eve", "/v1/governance/policies/nodes")
        assert status == 404, body
        assert [e.type for e in (r.event for r in await store.read(subjects.governance_events("a", "policy", "nodes")))] == ["GovernancePut"]

        status, body = await call("DELETE", "uma", "/v1/governance/policies/nodes")
        assert status == 403, body
        served.tokens["root"] = served.authed.admin_token  # a super admin names the tenant, as with --tenant
        status, body = await call("PUT", "root", "/v1/governance/policies/nodes", {"source": NODES, "description": "v2"},
                                  **{"X-Muster-Tenant": "a"})
        assert status == 200 and body["items"][0]["version"] == 2, body
        status, body = await call("DELETE", "ada", "/v1/governance/policies/nodes")
        assert status == 200 and body["items"][0]["deleted"], body
        status, body = await call("GET", "uma", "/v1/governance/policies/nodes")
        assert status == 404, body

        # Subscriptions: anyone with `read` on the tenant, on the tenant's own subjects, no secret in clear.
        bus = {"events": ["job_failed"], "subject": "muster.cb.a.jobs"}
        status, body = await call("PUT", "uma", "/v1/governance/subscriptions/jobs", bus)
        assert status == 200 and body["items"][0]["kind"] == "subscription", body
        status, body = await call("PUT", "uma", "/v1/governance/subscriptions/theirs", {**bus, "subject": "muster.cb.b.jobs"})
        assert status == 422 and "muster.cb.a." in body["error"]["message"], body
        clear = {"events": ["job_failed"], "webhook": {"url": "https://hooks.example/x", "secret": "hunter2"}}
        status, body = await call("PUT", "uma", "/v1/governance/subscriptions/hook", clear)
        assert status == 422 and "hunter2" not in json.dumps(body), body
        status, body = await call("PUT", "eve", "/v1/governance/subscriptions/jobs", bus, **{"X-Muster-Tenant": "a"})
        assert status == 403, body
        status, body = await call("DELETE", "eve", "/v1/governance/subscriptions/jobs")
        assert status == 404, body
        status, body = await call("DELETE", "uma", "/v1/governance/subscriptions/jobs")
        assert status == 200 and body["items"][0]["deleted"], body


async def test_a_super_admin_s_governance_writes_in_a_tenant_no_one_made_are_refused_as_its_reads_are(served: People) -> None:
    """`muster rule add ... --tenant acmee` (a typo) wrote a rule in a tenant the tracker then
    said did not exist; now the CLI, the bus and HTTP refuse it in the words of the reads."""
    unmade = "no tenant 'acmee' (`muster tenant list` lists them; `muster tenant create` makes one)"
    root = served.authed.admin_token
    code, out, err = await muster(served.authed, "rule", "add", "big", "-o", "create", "--tenant", "acmee", token=root)
    assert (code, err) == (2, f"Error: rule add refused: {unmade}\n"), (code, out, err)
    served.raw["root"] = await raw(served.authed, root, "root")
    for verb, body in (("put", {"kind": "policy", "entities": [{"name": "nodes", "source": NODES}]}),
                       ("delete", {"kind": "rule", "name": "big"}), ("list", {"kind": "schedule"})):
        answer = await ask(served, "root", verb, tenant="acmee", **body)
        assert (answer["ok"], answer["code"], answer["reason"]) == (False, "invalid", unmade), (verb, answer)
    async with tracker_http(served) as (http, store):
        headers = {"Authorization": f"Bearer {root}", "X-Muster-Tenant": "acmee"}
        async with http.put("/v1/governance/rules/big", json={"operations": ["create"]}, headers=headers) as resp:
            assert (resp.status, (await resp.json())["error"]["message"]) == (400, unmade)
        assert not await store.read(subjects.governance_filter("acmee", "rule"))
    code, out, err = await muster(served.authed, "rule", "add", "big", "-o", "create", "--tenant", "a", token=root)
    assert code == 0 and "rule big: version 1 (add)" in out, err  # a tenant someone made


async def test_schedules_over_http_with_the_rights_of_their_operation_and_never_in_another_tenant(served: People) -> None:
    """Schedules were made by `muster schedule create` alone; over HTTP one is put with the
    operation's command as the bus takes it, by whoever may run that operation, owned by its
    author; another tenant's token neither reads nor writes it."""
    await _cluster_web(served)
    async with tracker_http(served) as (http, store):
        async def call(method: str, who: str, path: str, body: Any = None, **headers: str) -> tuple[int, dict[str, Any]]:
            async with http.request(method, path, json=body, headers={"Authorization": f"Bearer {served.tokens[who]}", **headers}) as resp:
                return resp.status, await resp.json()

        nightly = {"cron": "0 3 * * *", "command": {"type": "CheckCluster", "cluster_id": "c1"}, "text": "cluster check web"}
        status, body = await call("PUT", "apo", "/v1/governance/schedules/nightly", nightly)  # `approve` runs no check
        assert status == 403 and "execute" in body["error"]["message"], body
        status, body = await call("PUT", "uma", "/v1/governance/schedules/nightly", nightly)
        assert status == 200 and body["items"][0]["kind"] == "schedule" and body["items"][0]["version"] == 1, body
        status, body = await call("GET", "rex", "/v1/governance/schedules/nightly")
        assert status == 200 and (body["entity"]["owner"], body["entity"]["verb"], body["by"]) == ("uma", "check", "uma"), body
        status, body = await call("PUT", "uma", "/v1/governance/schedules/nightly", {**nightly, "paused": True})
        assert status == 200 and body["items"][0]["version"] == 2, body

        for wrong, says in (({**nightly, "owner": "ada"}, "owner"),  # the owner is the requester, never the body's
                            ({**nightly, "command": {"type": "CheckCluster", "cluster_id": "gone"}}, "there is no cluster 'gone'"),
                            ({**nightly, "verb": "delete"}, "CheckCluster"),
                            ({**nightly, "every_s": 60}, "exactly one of cron and every_s"),
                            ({**nightly, "command": {"type": "CheckCluster", "cluster_id": "c1", "request_id": "r"}}, "request_id")):
            status, body = await call("PUT", "uma", "/v1/governance/schedules/other", wrong)
            assert status == 422 and says in body["error"]["message"], (wrong, body)

        for method, body_ in (("GET", None), ("PUT", nightly), ("DELETE", None)):
            status, body = await call(method, "eve", "/v1/governance/schedules/nightly", body_, **{"X-Muster-Tenant": "a"})
            assert status == 403 and "belongs to tenant b" in body["error"]["message"], (method, body)
        for method in ("GET", "DELETE"):
            status, body = await call(method, "eve", "/v1/governance/schedules/nightly")
            assert status == 404, (method, body)
        status, body = await call("DELETE", "apo", "/v1/governance/schedules/nightly")
        assert status == 403 and "execute" in body["error"]["message"], body
        status, body = await call("DELETE", "uma", "/v1/governance/schedules/nightly")
        assert status == 200 and body["items"][0]["deleted"], body
        status, body = await call("GET", "uma", "/v1/governance/schedules/nightly")
        assert status == 404, body
        kinds = [(r.event.type, r.event.by) for r in await store.read(subjects.governance_events("a", "schedule", "nightly"))]
        assert kinds == [("GovernancePut", "uma"), ("GovernancePut", "uma"), ("GovernanceDeleted", "uma")]


async def test_a_schedules_owner_pauses_resumes_and_deletes_it_without_read_on_the_tenant(served: People) -> None:
    """sam may run checks on the tenant's clusters, so sam may schedule one; `muster schedule
    pause` read the schedule first (a `list`), and sam, without `read` on the tenant, was refused
    pausing a schedule of its own. The service now pauses and resumes by name, over the bus, the
    CLI and HTTP alike: its owner or who may run its operation; never one who may not."""
    await _cluster_web(served)
    schedule = {"name": "mine", "cron": "0 3 * * *", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    assert (await ask(served, "sam", "put", kind="schedule", entities=[schedule]))["ok"]
    assert [i["name"] for i in (await ask(served, "sam", "list", kind="schedule"))["items"]] == ["mine"]  # its own

    code, out, err = await muster(served.authed, "schedule", "pause", "mine", token=served.tokens["sam"])
    assert (code, out.strip()) == (0, "schedule mine: version 2 (change)"), err
    paused = await ask(served, "rex", "list", kind="schedule", name="mine")
    assert paused["items"][0]["entity"]["paused"] is True and paused["items"][0]["entity"]["owner"] == "sam", paused
    code, out, err = await muster(served.authed, "schedule", "resume", "mine", token=served.tokens["sam"])
    assert (code, out.strip()) == (0, "schedule mine: version 3 (change)"), err
    refused = await ask(served, "apo", "pause", kind="schedule", name="mine")  # `approve` runs no check
    assert (refused["ok"], refused["code"]) == (False, "forbidden") and "execute" in refused["reason"], refused
    code, _, err = await muster(served.authed, "schedule", "pause", "nobody", token=served.tokens["sam"])
    assert code == 2 and "schedule pause refused: no schedule 'nobody' in tenant 'a'" in err, err

    async with tracker_http(served) as (http, _):
        async def post(who: str, path: str) -> tuple[int, dict[str, Any]]:
            async with http.post(path, headers={"Authorization": f"Bearer {served.tokens[who]}"}) as resp:
                return resp.status, await resp.json()

        assert (await post("apo", "/v1/governance/schedules/mine/pause"))[0] == 403
        status, body = await post("rex", "/v1/governance/schedules/mine/pause")  # not its owner: may run its operation
        assert status == 200 and body["items"][0]["version"] == 4, body
        status, body = await post("sam", "/v1/governance/schedules/mine/resume")
        assert status == 200 and body["items"][0]["version"] == 5, body
        status, body = await post("sam", "/v1/governance/schedules/nobody/pause")
        assert status == 404, body
        async with http.delete("/v1/governance/schedules/mine", headers={"Authorization": f"Bearer {served.tokens['sam']}"}) as resp:
            assert resp.status == 200, await resp.text()


async def test_a_schedule_put_over_http_without_text_lists_what_it_will_run(served: People) -> None:
    """`muster schedule list` showed `restart` for a schedule put over HTTP without `text` (the
    CLI keeps the words typed): not what it would restart, nor on which cluster. The governance
    service writes the text from its command, the cluster by its name."""
    await _cluster_web(served)
    body = {"every_s": 600, "command": {"type": "RestartServices", "cluster_id": "c1", "services": ["hbase"], "rolling": {"batch": 1}}}
    said = 'cluster restart web --services hbase --rolling {"batch":1}'
    async with tracker_http(served) as (http, _):
        headers = {"Authorization": f"Bearer {served.tokens['uma']}"}
        async with http.put("/v1/governance/schedules/roll", json=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        async with http.put("/v1/governance/schedules/roll", json=body, headers=headers) as resp:
            assert resp.status == 200 and (await resp.json())["items"] == []  # the same put twice writes nothing
        async with http.get("/v1/governance/schedules", headers=headers) as resp:
            (item,) = (await resp.json())["items"]
    assert (item["entity"]["text"], item["operation"]) == (said, said), item
    code, out, err = await muster(served.authed, "schedule", "list", token=served.tokens["uma"])
    row = next(line for line in out.splitlines() if line.startswith("roll "))
    assert code == 0 and said in row, (out, err)


async def test_who_may_make_schedules_lists_those_it_owns_or_may_run_without_read_on_the_tenant(served: People) -> None:
    """Walk of session 22: sam may run checks on the tenant's clusters, so sam makes a schedule,
    and `muster schedule list` was refused it (`read` on the tenant). Without that read one is
    shown the schedules one may pause or delete (one's own, or one whose operation one may run),
    said to be only those; the CLI, the bus and HTTP alike. The tenant's other lists stay refused."""
    await _cluster_web(served)
    mine = {"name": "mine", "cron": "0 3 * * *", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    grow = {"name": "grow", "cron": "0 4 * * *", "verb": "expand", "command": {"type": "ExpandCluster", "cluster_id": "c1", "nodes": 3}}
    assert (await ask(served, "sam", "put", kind="schedule", entities=[mine]))["ok"]
    assert (await ask(served, "uma", "put", kind="schedule", entities=[grow]))["ok"]  # sam may not expand: not shown to sam
    shown = "only the schedules sam owns or may run are listed: every schedule of tenant a needs read on the tenant"

    listed = await ask(served, "sam", "list", kind="schedule")
    assert listed["ok"] and [i["name"] for i in listed["items"]] == ["mine"] and listed["warnings"] == [shown], listed
    every = await ask(served, "rex", "list", kind="schedule")  # `read` on the tenant: all, nothing said
    assert [i["name"] for i in every["items"]] == ["grow", "mine"] and every["warnings"] == [], every
    assert (await ask(served, "sam", "list", kind="rule"))["code"] == "forbidden"
    code, out, err = await muster(served.authed, "schedule", "list", token=served.tokens["sam"])
    assert code == 0 and "mine" in out and "grow" not in out and f"note: {shown}" in out, (out, err)

    async with tracker_http(served) as (http, _):
        async def get(who: str, path: str) -> tuple[int, dict[str, Any]]:
            async with http.get(path, headers={"Authorization": f"Bearer {served.tokens[who]}"}) as resp:
                return resp.status, await resp.json()

        status, body = await get("sam", "/v1/governance/schedules")
        assert status == 200 and [i["name"] for i in body["items"]] == ["mine"] and body["warnings"] == [shown], body
        assert (await get("sam", "/v1/governance/schedules/mine"))[0] == 200
        assert (await get("sam", "/v1/governance/schedules/grow"))[0] == 404  # as one the tenant has not
        assert (await get("sam", "/v1/governance/rules"))[0] == 403
        # A mistyped list is said to be one, not answered with a grant sam would not need (session 34).
        for path, says in (("/v1/governance/schedule", "no governance list 'schedule': one of rules, policies, subscriptions, schedules, denied"),
                           ("/v1/governance/schedule/mine", "no governance kind 'schedule': one of rules, policies, subscriptions, schedules")):
            status, body = await get("sam", path)
            assert (status, body["error"]["message"], body["error"]["parameter"]) == (404, says, "what"), body
        status, body = await get("rex", "/v1/governance/schedules")
        assert status == 200 and [i["name"] for i in body["items"]] == ["grow", "mine"] and "warnings" not in body, body


async def _cluster_web(served: People) -> None:
    """Cluster `web` (c1) of tenant a, as its request's event: what a schedule's command names."""
    system = await connect(served.authed.url, name="system", token=served.authed.system_token)
    try:
        requested = ClusterRequested(tenant="a", cluster_id="c1", name="web", template="t", provider="sim", job_id="j1")
        await EventStore(system).append(subjects.cluster_events("a", "c1"), [Append(requested, msg_id="c1")])
    finally:
        await system.close()
