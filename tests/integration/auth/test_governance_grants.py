"""The governance service under its own identity, on a server with authorization on: people
change policies, rules, subscriptions and schedules with their own tokens over raw nats-py
connections; the service checks their rights, validates, and records them as `by`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest_asyncio

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.streams import ensure_streams
from services.governance.entrypoint import start_governance

from .conftest import Authed
from .test_isolation import Raw, raw

NODES = """package muster.nodes
import rego.v1

deny contains msg if {
    input.request.nodes > 10
    msg := sprintf("at most 10 nodes per cluster; %d asked", [input.request.nodes])
}
"""
PEOPLE: dict[str, dict[str, Any]] = {
    "gov": {"role": "service", "service": "governance"},
    "ada": {"tenant": "a", "role": "tenant_admin"},
    "uma": {"tenant": "a"},
    "apo": {"tenant": "a"},
    "eve": {"tenant": "b", "role": "tenant_admin"},
}
GRANTS = (("uma", "read", "tenant"), ("uma", "execute", "cluster:*"), ("apo", "approve", "tenant"))


@dataclass
class People:
    authed: Authed
    tokens: dict[str, str]
    raw: dict[str, Raw]


@pytest_asyncio.fixture
async def people(authed: Authed) -> AsyncIterator[People]:
    root = await authed.raw(authed.admin_token, "root")
    tokens: dict[str, str] = {}
    for pid, fields in PEOPLE.items():
        made = await authed.ask(root, "root", "user-create", principal=pid, **fields)
        assert made["ok"], made
        tokens[pid] = made["data"]["token"]
    for pid, permission, scope in GRANTS:
        assert (await authed.ask(root, "root", "grant", principal=pid, permission=permission, tenant="a", scope=scope))["ok"]
    await root.close()
    conns = {pid: await raw(authed, tokens[pid], pid) for pid in PEOPLE if pid != "gov"}
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
        await ensure_streams(nc.jetstream())
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
    assert "line 5" in broken["problems"][0], broken  # the line and the reason

    user = await ask(served, "uma", "put", kind="policy", entities=[{"name": "mine", "source": NODES}])
    assert not user["ok"] and "administrators" in user["reason"], user
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


async def test_a_schedule_needs_its_operations_permission_and_its_owner_is_its_author(served: People) -> None:
    schedule = {"name": "nightly", "cron": "0 3 * * *", "verb": "check", "command": {"type": "CheckCluster", "cluster_id": "c1"}}
    refused = await ask(served, "apo", "put", kind="schedule", entities=[schedule])
    assert not refused["ok"] and "execute" in refused["reason"], refused
    made = await ask(served, "uma", "put", kind="schedule", entities=[schedule])
    assert made["ok"], made
    listed = await ask(served, "uma", "list", kind="schedule")
    assert listed["items"][0]["entity"]["owner"] == "uma"
    bad = await ask(served, "uma", "put", kind="schedule", entities=[{**schedule, "name": "bad", "cron": "0 3 * *"}])
    assert not bad["ok"] and "cron" in bad["problems"][0]
    wrong = await ask(served, "uma", "put", kind="schedule", entities=[{**schedule, "name": "wrong", "verb": "delete"}])
    assert not wrong["ok"] and "CheckCluster" in wrong["problems"][0]
