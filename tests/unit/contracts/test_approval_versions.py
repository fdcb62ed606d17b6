"""`JobApprovalRequested` and `JobApproved` v2 carry each hardware type's cost before the job
(`PlanCost.before_by_hardware`); a v1 record, with the total before only, still reads, and reads
with no figures before per type (shown as it was: `muster.readmodel.priced`)."""

from __future__ import annotations

import json

from contracts.approvals import JobApprovalRequested, JobApproved
from contracts.events import EVENT_ADAPTER

COST_V1 = {"per_hour": 0.3, "before_per_hour": 0.1, "per_node": {"n1": 0.1, "n2": 0.1, "n3": 0.1},
           "by_hardware": {"small": 0.3}, "unknown": []}


def test_a_v1_approval_request_and_approval_read_without_figures_before_per_type() -> None:
    asked = EVENT_ADAPTER.validate_json(json.dumps({
        "type": "JobApprovalRequested", "v": 1, "job_id": "j", "rules": ["big"], "expires_at": "2026-12-02T00:00:00+00:00",
        "cluster_version": 3, "digest": "d", "cost": COST_V1}))
    approved = EVENT_ADAPTER.validate_json(json.dumps({"type": "JobApproved", "v": 1, "job_id": "j", "by": "apo", "cost": COST_V1}))
    assert isinstance(asked, JobApprovalRequested) and asked.v == 1 and asked.cost is not None
    assert asked.cost.before_by_hardware == {} and asked.cost.before_per_hour == 0.1
    assert isinstance(approved, JobApproved) and approved.v == 1 and approved.cost == asked.cost


def test_a_v2_approval_carries_each_type_s_cost_before() -> None:
    cost = {**COST_V1, "before_by_hardware": {"small": 0.1}}
    e = JobApproved.model_validate({"job_id": "j", "by": "apo", "cost": cost})
    body = json.loads(e.model_dump_json())
    assert body["v"] == 2 and body["cost"]["before_by_hardware"] == {"small": 0.1}
    assert EVENT_ADAPTER.validate_json(e.model_dump_json()) == e
