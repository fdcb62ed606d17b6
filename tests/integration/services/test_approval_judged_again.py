"""An approval has the tenant's policies as they are then judge the plan (decision 42), with the
real planner, solver, provisioner and tracker on a nats-server: a delete that waits for approval
while a policy refusing deletes is applied is denied at its approval, nothing runs, the cluster
stays, and the tracker lists the denial with its approver (the rules are unit tests on the
fakes)."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster
from contracts.events import JobFailed, JobSucceeded
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.catalog.store import apply_catalog
from muster.readmodel.cost import rate
from tests import cli_in_process

from .conftest import quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any
FREEZE = 'package muster.freeze\nimport rego.v1\n\ndeny contains "no deletes this week" if input.operation == "delete"\n'


async def _put(stack: Stack, kind: str, name: str, entity: dict[str, Any]) -> None:
    subject = subjects.governance_events(stack.tenant, kind, name)
    await stack.store.append(subject, [Append(GovernancePut(kind=kind, name=name, entity={"name": name, **entity},  # type: ignore[arg-type]
                                                            version=1, by="ada"), msg_id=f"{subject}:1")])


async def test_a_delete_approved_after_a_freeze_was_applied_is_denied_and_nothing_runs(stack: Stack) -> None:
    await _put(stack, "rule", "deletes", {"operations": ["delete"], "allow_self_approval": True, "expires_after_s": 600})
    created = await stack.client.request(CreateCluster(name="frozen", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted), created
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)
    waiting = await stack.client.request(DeleteCluster(cluster_id=created.cluster_id))
    assert isinstance(waiting, Accepted) and "waits for approval" in waiting.warnings[0], waiting

    await _put(stack, "policy", "freeze", {"source": FREEZE})  # applied while the delete waits
    look = await stack.http.post(f"/v1/jobs/{waiting.job_id}/approve?dry_run=true", json={})  # the approver looks first
    seen = await look.json()
    assert look.status == 200 and seen["policy"]["deny"] == ["no deletes this week (policy freeze)"], seen
    # It saves no plan: no plan_id or plan_url (they were empty strings), documented in docs/tracker.md.
    assert "plan_id" not in seen and "plan_url" not in seen and seen["cost"]["per_hour"] == 0, seen
    # the catalog the approved plan was made with (it answered null, as if there were none)
    assert re.fullmatch(r"[0-9a-f]{16}", seen["catalog_version"] or ""), seen
    assert (await (await stack.http.get(f"/v1/jobs/{waiting.job_id}")).json())["state"] == "waiting_for_approval"
    resp = await stack.http.post(f"/v1/jobs/{waiting.job_id}/approve", json={"comment": "go"})  # as the console does
    answer = await resp.json()
    assert resp.status == 403 and "the tenant's policies deny it now: no deletes this week" in answer["error"]["message"], answer
    final = await stack.client.wait(waiting.job_id, timeout=60)
    assert isinstance(final, JobFailed) and "no deletes this week (policy freeze)" in final.reason, final
    records = await stack.store.read_many(subjects.job_filters(stack.tenant, waiting.job_id))
    events = [r.type for r in records]
    assert events[-2:] == ["JobApproved", "JobFailed"] and "TaskQueued" not in events  # nothing of the plan ran
    approver = records[-2].event.by

    resp = await stack.http.get(f"/v1/clusters/{created.cluster_id}")
    assert resp.status == 200 and (await resp.json())["status"] == "active"
    denied = (await (await stack.http.get("/v1/governance/denied")).json())["items"]
    assert [(d["job_id"], d["approved_by"], d["denials"][0]["policy"]) for d in denied] == [(waiting.job_id, approver, "freeze")]
    job = await (await stack.http.get(f"/v1/jobs/{waiting.job_id}")).json()
    assert job["approval"]["decision"] == "approved" and job["approval"]["approved_cost"]["per_hour"] == 0



async def test_a_waiting_create_shows_its_cost_at_todays_prices_over_http_on_the_console_and_in_status(stack: Stack) -> None:
    """A price raised while a create waited: `GET /v1/jobs/{id}`, the console's job page and
    `muster status` showed the cost at the request until someone pressed Check first; they show
    the cost now, which the approval judges, and the request's beside it."""
    await _put(stack, "rule", "creates", {"operations": ["create"], "expires_after_s": 600})
    waiting = await stack.client.request(CreateCluster(name="priced", template="hadoop-small", nodes=2))
    assert isinstance(waiting, Accepted) and "waits for approval" in waiting.warnings[0], waiting
    asked = (await (await stack.http.get(f"/v1/jobs/{waiting.job_id}")).json())["approval"]
    assert asked["cost"]["per_hour"] > 0 and asked["cost_now"]["per_hour"] == asked["cost"]["per_hour"], asked

    dearer = quick_demo_catalog()
    for hardware in dearer.hardwaretypes.values():
        for fields in hardware.providermap.values():
            fields["cost"] = str(float(fields.get("cost", 0)) * 2)
    await apply_catalog(stack.store, "default", dearer)
    job = await (await stack.http.get(f"/v1/jobs/{waiting.job_id}")).json()
    then, now = job["approval"]["cost"]["per_hour"], job["approval"]["cost_now"]["per_hour"]
    assert (then, now) == (asked["cost"]["per_hour"], 2 * asked["cost"]["per_hour"]), job["approval"]
    shown = f"costs {rate(now)}/h once done at today's prices (now 0.00/h; {rate(then)}/h at the prices when it was requested)"
    page = await (await stack.http.get(f"/ui/jobs/{waiting.job_id}")).text()
    assert shown.replace("'", "&#39;") in page
    ran = await cli_in_process.ran(["status", waiting.job_id], os.environ, 60, catch_exceptions=False)
    assert ran.exit_code == 0 and shown in ran.output, ran.output


async def test_the_console_shows_a_rejected_jobs_page(stack: Stack) -> None:
    """The job page of a rejected (or expired) job answered 500: its template read the
    approval's `approved_cost`, which only an approval records (walk of session 26)."""
    await _put(stack, "rule", "creates", {"operations": ["create"], "expires_after_s": 600})
    waiting = await stack.client.request(CreateCluster(name="refused", template="hadoop-small", nodes=2))
    assert isinstance(waiting, Accepted) and "waits for approval" in waiting.warnings[0], waiting
    resp = await stack.http.post(f"/v1/jobs/{waiting.job_id}/reject", json={"comment": "not now"})
    assert resp.status == 202, await resp.text()
    job = await (await stack.http.get(f"/v1/jobs/{waiting.job_id}")).json()
    assert job["approval"]["decision"] == "rejected" and "approved_cost" not in job["approval"], job["approval"]
    page = await stack.http.get(f"/ui/jobs/{waiting.job_id}")
    text = await page.text()
    assert page.status == 200, text[-2000:]
    assert re.search(r"Approval: rejected by \S+: “not now”", text), text
