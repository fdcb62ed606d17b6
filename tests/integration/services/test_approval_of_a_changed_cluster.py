"""An approved plan is exactly the plan that runs, with the real planner, solver, provisioner
and tracker on a nats-server: a delete that waits for approval while the cluster's lease is
extended is refused when approved, not planned again, and the cluster stays (docs/governance.md;
the rules are unit tests on the fakes)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects
from contracts.catalog import Catalog
from contracts.commands import Accepted, ApproveJob, CreateCluster, DeleteCluster, ExtendLease, LeaseExtended, Rejected
from contracts.events import JobFailed, JobSucceeded
from contracts.governance import GovernancePut
from contracts.records import Append
from muster.catalog.store import apply_catalog, read_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any


async def test_an_approved_delete_is_refused_when_the_cluster_changed_while_it_waited(stack: Stack) -> None:
    catalog = await read_catalog(stack.store, stack.tenant)  # a template with a lease, so that it can be extended
    template = catalog.clustertemplates["hadoop-small"].model_dump()
    template["administration"] = {"leaseduration": {"initial": 3600, "max": 0, "step": 0}}
    await apply_catalog(stack.store, stack.tenant, Catalog.model_validate({"clustertemplates": {"hadoop-small": template}}))
    subject = subjects.governance_events(stack.tenant, "rule", "deletes")
    rule = {"name": "deletes", "operations": ["delete"], "allow_self_approval": True, "expires_after_s": 600}
    await stack.store.append(subject, [Append(GovernancePut(kind="rule", name="deletes", entity=rule, version=1, by="ada"),
                                              msg_id=f"{subject}:1")])
    created = await stack.client.request(CreateCluster(name="gated", template="hadoop-small", nodes=2))
    assert isinstance(created, Accepted), created
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)

    waiting = await stack.client.request(DeleteCluster(cluster_id=created.cluster_id))
    assert isinstance(waiting, Accepted) and "waits for approval" in waiting.warnings[0], waiting
    extended = await stack.client.request(ExtendLease(cluster_id=created.cluster_id, by_s=600))
    assert isinstance(extended, LeaseExtended), extended  # the cluster moved on while the delete waited

    answer = await stack.client.request(ApproveJob(job_id=waiting.job_id))
    assert isinstance(answer, Rejected) and "changed since the plan was approved" in answer.reason, answer
    final = await stack.client.wait(waiting.job_id, timeout=60)
    assert isinstance(final, JobFailed) and "changed since the plan was approved" in final.reason, final
    events = [r.type for r in await stack.store.read_many(subjects.job_filters(stack.tenant, waiting.job_id))]
    assert events[-2:] == ["JobApproved", "JobFailed"] and "TaskQueued" not in events  # nothing of the plan ran
    resp = await stack.http.get(f"/v1/clusters/{created.cluster_id}")
    assert resp.status == 200 and (await resp.json())["status"] == "active"
