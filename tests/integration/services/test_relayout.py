"""Another layout after a failure, with the real planner, solver and provisioner on a nats-server:
a create whose first layout fails past its retries is rolled back, asks the solver for another
layout than the one tried, and succeeds on it (docs/planner.md, "Another layout"); a job that
needed approval is not given another layout: nobody approved its plan (docs/governance.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, ApproveJob, CreateCluster
from contracts.events import JobRolledBack, JobSucceeded
from contracts.governance import GovernancePut
from muster.catalog.store import apply_catalog
from muster.ports.eventlog import Append
from services.solver.domain.outcome import canonical

from .conftest import quick_demo_catalog

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120),
              pytest.mark.parametrize("stack", [{"http": False, "max_attempts": 2}], indirect=True)]
Stack = Any


async def _failing_first_creates(stack: Stack) -> None:
    catalog = quick_demo_catalog()
    sim = catalog.providers["sim"]
    # The cloud refuses the first two creates of every node (out of machines for a while): the
    # first layout's creates fail past their 2 attempts; the next layout's creates, numbered on, pass.
    catalog.providers["sim"] = sim.model_copy(update={"provisioner": {**sim.provisioner, "fail_first_attempts_create": "2"}})
    await apply_catalog(stack.store, stack.tenant, catalog)


async def test_a_create_failing_past_its_retries_is_rolled_back_and_succeeds_on_another_layout(stack: Stack) -> None:
    await _failing_first_creates(stack)
    created = await stack.client.send(stack.tenant, CreateCluster(name="relaid", template="hadoop-small", nodes=3, relayout=1))
    assert isinstance(created, Accepted)
    assert isinstance(await stack.client.wait(created.job_id, timeout=60), JobSucceeded)

    job = [r.type for r in await stack.store.read(subjects.job_events(stack.tenant, created.job_id))]
    assert job.index("RollbackPlanned") < job.index("JobLayoutRetried") < job.index("JobSucceeded")
    assert "JobRolledBack" not in job
    layouts = [r.event for r in await stack.store.read(subjects.layout_events(stack.tenant, created.job_id))]
    asked = [e for e in layouts if e.type == "LayoutRequested"]
    solved = [e for e in layouts if e.type == "LayoutSolved"]
    assert [e.round for e in asked] == [0, 1] and [e.round for e in solved] == [0, 1]
    assert [canonical(x) for x in asked[1].exclude] == [canonical(solved[0].layout)]
    assert canonical(solved[1].layout) != canonical(solved[0].layout)

    # The cluster stands on the second layout.
    cluster = stack.planner.clusters[created.cluster_id]
    assert cluster.status == "active" and len(cluster.nodes) == 3
    groups = Counter((n.hardwaretype, n.imagetype, tuple(sorted(n.services))) for n in cluster.nodes.values())
    assert groups == Counter({(g.hardwaretype, g.imagetype, tuple(sorted(g.services))): g.count for g in solved[1].layout.layout})


async def test_a_create_that_needed_approval_is_rolled_back_without_another_layout(stack: Stack) -> None:
    await _failing_first_creates(stack)
    subject = subjects.governance_events(stack.tenant, "rule", "creates")
    rule = GovernancePut(kind="rule", name="creates", by="ada", version=1,
                         entity={"name": "creates", "operations": ["create"], "allow_self_approval": True})
    await stack.store.append(subject, [Append(rule, msg_id=f"{subject}:1")])
    created = await stack.client.send(stack.tenant, CreateCluster(name="approved", template="hadoop-small", nodes=3, relayout=1))
    assert isinstance(created, Accepted) and any(w.startswith("relayout 1 is off for this job") for w in created.warnings)
    assert isinstance(await stack.client.request(ApproveJob(job_id=created.job_id)), Accepted)
    final = await stack.client.wait(created.job_id, timeout=60)
    assert isinstance(final, JobRolledBack) and "the job's plan was approved" in final.reason
    job = [r.type for r in await stack.store.read(subjects.job_events(stack.tenant, created.job_id))]
    assert "JobApproved" in job and "JobLayoutRetried" not in job
