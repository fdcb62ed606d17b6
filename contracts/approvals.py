"""A job's governance decisions, on the job's own subject (`muster.evt.<tenant>.job.<id>`), written
by the planner that owns the job (docs/governance.md), and the two commands that decide an
approval (`muster.ops.<tenant>.<principal>.approve|reject`).

A request that an approval rule matches is accepted at once; its job records its plan and then
`JobApprovalRequested`, and runs only after `JobApproved`. `JobRejected` and
`JobApprovalExpired` end it (a `JobFailed` follows with the reason). A request a policy denies
is refused, and the refusal recorded on `muster.evt.<tenant>.denied.<job-id>` (`RequestDenied`:
there is no job). An approval has the policies judge the plan again, as they are then: a denial
there is recorded the same way (with `approved_by`) and the job fails (decision 42). Policy warnings are recorded with the job (`PolicyWarned`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Event
from .layout import Layout


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class PolicyMessage(_Part):
    policy: str
    version: int = Field(ge=0, description="the policy's version in the log (0: a policy under test)")
    message: str


class PlanCost(_Part):
    """What a plan's machines cost, from the catalog's hardware `cost` fields (per hour)."""

    per_hour: float = Field(ge=0, description="the cluster once the job is done")
    before_per_hour: float = Field(default=0, ge=0, description="the cluster before the job")
    per_node: dict[str, float] = Field(default_factory=dict, description="node id -> cost per hour")
    by_hardware: dict[str, float] = Field(default_factory=dict, description="hardware type -> cost per hour of its nodes")
    before_by_hardware: dict[str, float] = Field(default_factory=dict, description="v2: hardware type -> cost per hour of its "
                                                 "nodes before the job (a v1 record has the total before only)")
    unknown: list[str] = Field(default_factory=list, description="hardware types without a cost for the provider")


class JobApprovalRequested(Event):
    """v2: its `cost` has `before_by_hardware` (each type's cost before the job); a v1 record's
    has the total before only, and is shown as it was (`muster.readmodel.priced`)."""

    type: Literal["JobApprovalRequested"] = "JobApprovalRequested"
    v: Literal[1, 2] = 2
    job_id: str
    rules: list[str] = Field(min_length=1, description="the approval rules the request matched")
    expires_at: datetime
    allow_self_approval: bool = False
    cluster_version: int = Field(ge=0, description="the cluster's version the plan was made on (0: a new cluster)")
    digest: str = Field(description="the plan's digest: what an approver saw is what runs")
    cost: PlanCost | None = None
    layout: Layout | None = Field(default=None, description="the solver's layout the plan was made from (runs as it is)")


class JobApproved(Event):
    """v2: its `cost` has `before_by_hardware`, as `JobApprovalRequested` v2."""

    type: Literal["JobApproved"] = "JobApproved"
    v: Literal[1, 2] = 2
    job_id: str
    by: str
    comment: str = ""
    request_id: str | None = None
    cost: PlanCost | None = Field(default=None, description="the plan's cost at the catalog's prices when it was approved, "
                                                            "as the tenant's policies judged it again then (decision 42)")


class JobRejected(Event):
    type: Literal["JobRejected"] = "JobRejected"
    v: Literal[1] = 1
    job_id: str
    by: str
    comment: str = ""
    request_id: str | None = None


class JobApprovalExpired(Event):
    type: Literal["JobApprovalExpired"] = "JobApprovalExpired"
    v: Literal[1] = 1
    job_id: str
    expires_at: datetime


class PolicyWarned(Event):
    type: Literal["PolicyWarned"] = "PolicyWarned"
    v: Literal[1] = 1
    job_id: str
    warnings: list[PolicyMessage] = Field(min_length=1)


class RequestDenied(Event):
    """A request the tenant's policies refused: at admission (no job was made; `job_id` is the one
    it would have had), or when its job was approved (`approved_by`: the policies judge the
    approved plan again, as they are then; the job fails, nothing ran: decision 42)."""

    type: Literal["RequestDenied"] = "RequestDenied"
    v: Literal[1] = 1
    job_id: str
    cluster_id: str = ""
    operation: str
    by: str
    denials: list[PolicyMessage] = Field(min_length=1)
    warnings: list[PolicyMessage] = Field(default_factory=list)
    approved_by: str | None = Field(default=None, description="the approver whose approval the policies refused; "
                                                               "null: refused at admission")


APPROVAL_EVENTS: tuple[type[Event], ...] = (JobApprovalRequested, JobApproved, JobRejected, JobApprovalExpired, PolicyWarned,
                                            RequestDenied)
