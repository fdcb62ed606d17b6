"""Catalog grants reach the bus (#19.3): a real planner under its own identity takes catalog
changes from raw nats-py connections, checks the requester's `write` on each entity it changes,
and writes the requester as `by`; nobody appends the catalog's events directly."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest_asyncio

from contracts import subjects
from contracts.catalog_requests import ApplyCatalog, DeleteCatalogEntity
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore
from muster.bus.streams import ensure_streams
from muster.catalog.store import catalog_filter
from services.planner.app import PlannerConfig
from services.planner.entrypoint import start_planner
from tests import cli_in_process

from .conftest import Authed
from .test_isolation import Raw, raw

PEOPLE: dict[str, dict[str, Any]] = {
    "pln": {"role": "service", "service": "planner"},
    "ada": {"tenant": "a", "role": "tenant_admin"},
    "rita": {"tenant": "a"},  # read on the whole catalog
    "wes": {"tenant": "a"},  # write on one service
    "cat": {"tenant": "a"},  # write on the whole catalog
    "eve": {"tenant": "b", "role": "tenant_admin"},
}
GRANTS = (("rita", "read", "catalog:*"), ("wes", "write", "catalog:services/web"), ("cat", "write", "catalog:*"))


def services(**descriptions: str) -> dict[str, Any]:
    return {"services": {name: {"name": name, "description": text} for name, text in descriptions.items()}}


@dataclass
class Served:
    authed: Authed
    people: dict[str, Raw]
    tokens: dict[str, str]

    async def ask(self, who: str, request: Any, tenant: str = "a", as_principal: str | None = None) -> dict[str, Any]:
        verb = "catalog-apply" if isinstance(request, ApplyCatalog) else "catalog-delete"
        subject = subjects.operation(tenant, as_principal or who, verb)
        reply = await self.people[who].nc.request(subject, request.model_dump_json().encode(), timeout=10)
        return dict(json.loads(reply.data))


@pytest_asyncio.fixture
async def served(authed: Authed) -> AsyncIterator[Served]:
    tokens = await authed.people(PEOPLE, GRANTS)
    async with AsyncExitStack() as stack:
        nc = await connect(authed.url, name="planner", token=tokens["pln"])
        stack.push_async_callback(nc.close)
        await ensure_streams(nc.jetstream())
        await start_planner(nc, stack, PlannerConfig(instance="planner-catalog", shards=2))
        people = {pid: await raw(authed, tokens[pid], pid) for pid in PEOPLE if pid != "pln"}
        for r in people.values():
            stack.push_async_callback(r.nc.close)
        yield Served(authed, people, tokens)


async def test_catalog_writes_need_a_write_grant_on_what_they_change_and_record_the_requester(served: Served) -> None:
    # A tenant admin writes its tenant's catalog; what the body says about who asks is ignored.
    first = await served.ask("ada", ApplyCatalog(catalog=services(base="base", web="web"), requested_by="mallory"))
    assert first["type"] == "CatalogAnswer" and first["ok"] and len(first["seqs"]) == 2, first
    # Read-only cannot write.
    refused = await served.ask("rita", ApplyCatalog(catalog=services(web="web v2")))
    assert refused == {"type": "Rejected", "v": 1, "reason": "catalog not applied: rita has no write permission on catalog services/web of tenant a"
                       " (a tenant admin can give it: muster grant rita write --scope catalog:services/web)", "code": "forbidden"}
    # A grant on one entity writes that one, not another; unchanged entities of a whole folder need none.
    assert (await served.ask("wes", ApplyCatalog(catalog=services(base="base", web="web v2"))))["ok"]
    other = await served.ask("wes", ApplyCatalog(catalog=services(base="base v2")))
    assert other["type"] == "Rejected" and "wes has no write permission on catalog services/base" in other["reason"]
    assert (await served.ask("cat", ApplyCatalog(catalog=services(base="base v2"))))["ok"]  # catalog:* covers it
    # Another tenant's admin: the server refuses it tenant a's subjects, in its name or anyone's.
    await served.people["eve"].denied_publish(subjects.operation("a", "eve", "catalog-apply"))
    await served.people["eve"].denied_publish(subjects.operation("a", "ada", "catalog-apply"))
    # Nobody appends the catalog's events directly, not even a tenant admin.
    await served.people["ada"].denied_publish(subjects.catalog_events("a", "services", "web"))
    # Deletes need the same grant.
    no = await served.ask("rita", DeleteCatalogEntity(kind="services", name="web"))
    assert no["type"] == "Rejected" and "rita has no write permission on catalog services/web" in no["reason"]
    assert no["reason"].endswith("(a tenant admin can give it: muster grant rita write --scope catalog:services/web)"), no  # (session 34)
    assert (await served.ask("wes", DeleteCatalogEntity(kind="services", name="web", requested_by="mallory")))["ok"]
    # Bad input gets a reason, and nothing is written.
    for body, verb, reason in ((b"{not json", "catalog-apply", "not a catalog request"),
                               (ApplyCatalog(catalog={"services": {"x": {"name": 1}}}).model_dump_json().encode(), "catalog-apply",
                                "catalog not applied: services.x.name"),
                               (DeleteCatalogEntity(kind="services", name="web").model_dump_json().encode(), "catalog-apply",
                                "DeleteCatalogEntity goes to muster.ops.<tenant>.<principal>.catalog-delete"),
                               (b'{"type": "DeleteCatalogEntity", "kind": "widgets", "name": "w"}', "catalog-delete", "unknown kind 'widgets'")):
        bad = json.loads((await served.people["ada"].nc.request(subjects.operation("a", "ada", verb), body, timeout=10)).data)
        assert bad["type"] == "Rejected" and reason in bad["reason"], bad
    # The log says who did what: the principal each request's subject named.
    system = await served.authed.raw(served.authed.system_token, "sys")
    try:
        recorded = await EventStore(system).read(catalog_filter("a"))
    finally:
        await system.close()
    assert [(r.type, r.event.name, r.event.by) for r in recorded] == [
        ("CatalogEntityPut", "base", "ada"), ("CatalogEntityPut", "web", "ada"), ("CatalogEntityPut", "web", "wes"),
        ("CatalogEntityPut", "base", "cat"), ("CatalogEntityDeleted", "web", "wes")]


async def test_muster_catalog_apply_goes_through_the_planner_with_the_users_token(served: Served, tmp_path: Any) -> None:
    folder = tmp_path / "services"  # a kind folder: every entity in it is a service
    folder.mkdir()
    (folder / "web.json").write_text(json.dumps({"name": "web", "description": "from the CLI"}))
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS")}
    env.update(NATS_URL=served.authed.url, MUSTER_TOKEN=served.tokens["wes"])
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "catalog", "apply", str(folder), "--tenant", "a", "--json",
                                                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    answer = json.loads(out)
    assert answer["applied"] == 1 and answer["changes"][0]["name"] == "web"


async def test_catalog_apply_dry_run_says_what_would_change_and_writes_nothing(served: Served, tmp_path: Any) -> None:
    """Walk of session 22: every changing command previews with `--dry-run` but `catalog apply`.
    Its dry run is checked as the apply (the requester's grants, the catalog it would leave) and
    answered with what would change; nothing reaches the log. Bus and CLI (HTTP: writes/)."""
    assert (await served.ask("ada", ApplyCatalog(catalog=services(base="base", web="web"))))["ok"]
    dry = await served.ask("ada", ApplyCatalog(catalog=services(base="base", web="web v2", extra="new"), dry_run=True))
    assert dry["ok"] and dry["dry_run"] and dry["seqs"] == [], dry
    assert sorted((c["name"], c["action"]) for c in dry["changes"]) == [("extra", "add"), ("web", "change")], dry
    refused = await served.ask("wes", ApplyCatalog(catalog=services(base="base v2"), dry_run=True))
    assert refused["type"] == "Rejected" and refused["reason"].startswith("catalog would not be applied (dry run): wes has no write "), refused

    folder = tmp_path / "services"
    folder.mkdir()
    (folder / "web.json").write_text(json.dumps({"name": "web", "description": "from the CLI"}))
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS")}

    async def cli(who: str, *args: str) -> tuple[int, str, str]:  # in the test's process (tests/cli_in_process.py)
        return await cli_in_process.run(["catalog", "apply", str(folder), "--tenant", "a", "--dry-run", *args],
                                        {**env, "NATS_URL": served.authed.url, "MUSTER_TOKEN": served.tokens[who]}, 30)

    code, out, err = await cli("wes")
    assert code == 0 and "~ service web (v2): description" in out, (out, err)
    assert "dry run: would apply 1 change(s) for tenant 'a'; nothing was written" in out, out
    code, out, err = await cli("wes", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True and json.loads(out)["applied"] == 0, out
    code, out, err = await cli("rita")
    assert code == 4 and "catalog would not be applied (dry run): rita has no write permission" in err, (code, out, err)
    system = await served.authed.raw(served.authed.system_token, "sys")
    try:
        recorded = await EventStore(system).read(catalog_filter("a"))
    finally:
        await system.close()
    assert [(r.event.name, r.event.by) for r in recorded] == [("base", "ada"), ("web", "ada")]  # the first apply alone
