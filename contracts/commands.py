"""Commands: requests in the imperative, sent request/reply to `muster.ops.<tenant>.<principal>.<verb>`.

Every request gets one reply: `Accepted` (with the job id) or `Rejected` (with a reason a person
can act on). A `request_id` is an idempotency key: the same key from the same tenant always maps
to the same job, so a retried request never creates a second job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from contracts.base import DEFERRED

from .layout import Layout
from .limits import MAX_CONFIG_BYTES, max_json_bytes
from .pools import Callback

MAX_CLUSTER_SIZE = 10_000
MAX_COMMENT_CHARS = 2000
"""An approval decision's comment at most (it is kept in the log, shown on the job's page)."""


def too_many_nodes(nodes: object) -> str:
    """The one sentence for a size past muster's own bound (whatever the template says): the
    CLI's, the HTTP API's and the console's."""
    return f"a cluster has at most {MAX_CLUSTER_SIZE:,} nodes (muster's limit, whatever the template says); {nodes} requested"
MAX_LEASE_S = 100 * 365 * 86400
"""The longest lease a create asks for, or an extension adds (a century): 99999999999d made the
planner's lease arithmetic overflow (an internal error for the requester); forever is 0, or a
template without a lease."""
MAX_RELAYOUTS = 5
RELAYOUT = ("after a task failed past its retries and the job was rolled back, ask the solver for up to this many other "
            "layouts, each excluding the ones tried (default: the template's `administration.relayout`, else 0)")
ID = r"^[A-Za-z0-9_\-]{1,128}$"


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic's lax mode reads true as 1: `"nodes": true` made one node
        raise ValueError("must be a whole number, not true or false")
    return value


NOT_A_BOOL = BeforeValidator(_not_a_bool)
"""For a number a person gives (nodes, batches, versions): a bool is refused, not read as 0 or 1.
After the bounds in an optional field's Annotated (`Annotated[int, Field(ge=0), NOT_A_BOOL]`):
before them, the JSON schema loses its minimum and maximum."""
Count = Annotated[int, NOT_A_BOOL]
Config = Annotated[dict[str, Any], AfterValidator(max_json_bytes(MAX_CONFIG_BYTES))]
"""A cluster config: at most `MAX_CONFIG_BYTES` as JSON (contracts/limits.py)."""


class Command(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    request_id: str | None = Field(default=None, pattern=ID, description="idempotency key")
    requested_by: str = Field(default="anonymous", max_length=128)


class PoolWait(BaseModel):
    """How a create or expand on a pool provider waits for hosts (docs/pools.md); ignored by
    other providers."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    urgency: Count = Field(default=50, ge=0, le=1000, description="Hedeby's urgency: higher is served first")
    wait_s: float | None = Field(default=None, gt=0, le=30 * 86400,
                                 description="fail the job if its hosts are not granted within this many seconds")
    callback: Callback | None = Field(default=None, description="told when the hosts are granted and when the job ends")


class CreateCluster(Command):
    type: Literal["CreateCluster"] = "CreateCluster"
    v: Literal[1] = 1
    name: str = Field(pattern=ID)
    template: str = Field(min_length=1, max_length=128)
    nodes: Count = Field(ge=1, le=MAX_CLUSTER_SIZE)
    services: list[Annotated[str, Field(max_length=128)]] | None = Field(default=None, max_length=1000)
    provider: str | None = Field(default=None, max_length=128)
    hardwaretype: str | None = Field(default=None, max_length=128)
    imagetype: str | None = Field(default=None, max_length=128)
    config: Config = Field(default_factory=dict)
    dry_run: bool = Field(default=False, description="answer with the layout and plan; execute nothing")
    pool: PoolWait = Field(default_factory=PoolWait)
    lease_s: float | None = Field(
        default=None, ge=0, le=MAX_LEASE_S,
        description="Coopr's initialLeaseDuration, in seconds: at most the template's initial lease (default: it)",
    )
    relayout: Annotated[int, Field(ge=0, le=MAX_RELAYOUTS), NOT_A_BOOL] | None = Field(default=None, description=RELAYOUT)


class Rolling(BaseModel):
    """A rolling change: `batch` nodes at a time (a count, or a percentage such as "25%"), the
    next batch only once the previous one is healthy; up to `tolerance` nodes may fail before
    the change stops and is rolled back."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    batch: Annotated[int, Field(ge=1), NOT_A_BOOL] | Annotated[str, Field(pattern=r"^\d+(\.\d+)?%$")]
    tolerance: Count = Field(default=0, ge=0, description="nodes that may fail without stopping the change")


class ClusterCommand(Command):
    cluster_id: str = Field(pattern=ID)
    dry_run: bool = Field(default=False, description="answer with the layout and plan; execute nothing")
    if_version: Annotated[int, Field(ge=1), NOT_A_BOOL] | None = Field(
        default=None,
        description="refuse unless the cluster is at this version (its count of events; `muster cluster show` shows it)",
    )


class DeleteCluster(ClusterCommand):
    type: Literal["DeleteCluster"] = "DeleteCluster"
    v: Literal[1] = 1


class ExpandCluster(ClusterCommand):
    """Grow to `nodes` nodes in total; existing nodes are not touched."""

    type: Literal["ExpandCluster"] = "ExpandCluster"
    v: Literal[1] = 1
    nodes: Count = Field(ge=1, le=MAX_CLUSTER_SIZE, description="the new total")
    pool: PoolWait = Field(default_factory=PoolWait)
    relayout: Annotated[int, Field(ge=0, le=MAX_RELAYOUTS), NOT_A_BOOL] | None = Field(default=None, description=RELAYOUT)


class ShrinkCluster(ClusterCommand):
    """Shrink to `nodes` nodes in total; only removes nodes."""

    type: Literal["ShrinkCluster"] = "ShrinkCluster"
    v: Literal[1] = 1
    nodes: Count = Field(ge=1, le=MAX_CLUSTER_SIZE, description="the new total")


ServiceList = list[Annotated[str, Field(max_length=128)]]
NodeList = list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]]
NODES = ("only these nodes of the cluster (their ids, as `muster cluster show` lists them; default: every node); the "
         "desired state is recorded per node")


class AddServices(ClusterCommand):
    type: Literal["AddServices"] = "AddServices"
    v: Literal[1] = 1
    services: ServiceList = Field(min_length=1, max_length=1000)


class RemoveServices(ClusterCommand):
    type: Literal["RemoveServices"] = "RemoveServices"
    v: Literal[1] = 1
    services: ServiceList = Field(min_length=1, max_length=1000)


class ConfigureCluster(ClusterCommand):
    """Replace the cluster's config; with `restart`, services are stopped and started again."""

    type: Literal["ConfigureCluster"] = "ConfigureCluster"
    v: Literal[1] = 1
    config: Config
    restart: bool = False
    rolling: Rolling | None = Field(default=None, description="do it a batch of nodes at a time")
    nodes: NodeList | None = Field(default=None, min_length=1, max_length=MAX_CLUSTER_SIZE, description=NODES)


class StartServices(ClusterCommand):
    type: Literal["StartServices"] = "StartServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")
    nodes: NodeList | None = Field(default=None, min_length=1, max_length=MAX_CLUSTER_SIZE, description=NODES)


class StopServices(ClusterCommand):
    type: Literal["StopServices"] = "StopServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")
    nodes: NodeList | None = Field(default=None, min_length=1, max_length=MAX_CLUSTER_SIZE, description=NODES)


class RestartServices(ClusterCommand):
    type: Literal["RestartServices"] = "RestartServices"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")
    rolling: Rolling | None = Field(default=None, description="do it a batch of nodes at a time")
    nodes: NodeList | None = Field(default=None, min_length=1, max_length=MAX_CLUSTER_SIZE, description=NODES)


class UpgradeService(ClusterCommand):
    """Run the service's current catalog definition on its nodes: stop, install, configure,
    start."""

    type: Literal["UpgradeService"] = "UpgradeService"
    v: Literal[1] = 1
    service: str = Field(max_length=128)
    rolling: Rolling | None = Field(default=None, description="do it a batch of nodes at a time")


class CheckCluster(ClusterCommand):
    """Ask each node for the state of its services (the `status` action of services that define
    one); recorded as `ServiceStateObserved`. Drift from the desired state is then listed."""

    type: Literal["CheckCluster"] = "CheckCluster"
    v: Literal[1] = 1
    services: ServiceList | None = Field(default=None, description="default: all")


class RepairCluster(ClusterCommand):
    """Re-run what the last observed states say is missing: start services that should run and
    do not (install and configure again where they failed), stop those that should not run,
    restart the outdated, configure and restart the stale, reconnect a node whose state is
    unknown (its provider's confirm, then start and check). With `rolling`, a batch of nodes at
    a time, the nodes where it only brings services up first (docs/planner.md, "Rolling changes")."""

    type: Literal["RepairCluster"] = "RepairCluster"
    v: Literal[1] = 1
    rolling: Rolling | None = Field(default=None, description="do it a batch of nodes at a time")


class RollbackCluster(ClusterCommand):
    """Bring the cluster back to its layout and config as they were before job `to_job`."""

    type: Literal["RollbackCluster"] = "RollbackCluster"
    v: Literal[1] = 1
    to_job: str = Field(pattern=ID)


class ApplyPlan(Command):
    """Run a plan a dry run saved (its `plan_id`), exactly as it was shown: refused if the
    cluster or the catalog changed since."""

    type: Literal["ApplyPlan"] = "ApplyPlan"
    v: Literal[1] = 1
    plan_id: str = Field(pattern=ID)


class ExtendLease(Command):
    """Move a cluster's lease expiry later, within the template's `step` and `max`. Answered
    `LeaseExtended`; no job."""

    type: Literal["ExtendLease"] = "ExtendLease"
    v: Literal[1] = 1
    cluster_id: str = Field(pattern=ID)
    by_s: float | None = Field(default=None, gt=0, le=MAX_LEASE_S, description="extend by this long (default: the template's step)")
    until: datetime | None = Field(default=None, description="extend until then (ISO 8601, with a time zone)")
    if_version: Annotated[int, Field(ge=1), NOT_A_BOOL] | None = Field(default=None, description="refuse unless the cluster is at this version")


class JobCommand(Command):
    job_id: str = Field(pattern=ID)


class PauseJob(JobCommand):
    """Dispatch nothing new; tasks in flight finish."""

    type: Literal["PauseJob"] = "PauseJob"
    v: Literal[1] = 1


class ResumeJob(JobCommand):
    type: Literal["ResumeJob"] = "ResumeJob"
    v: Literal[1] = 1


class CancelJob(JobCommand):
    """Stop the job and roll back what it did."""

    type: Literal["CancelJob"] = "CancelJob"
    v: Literal[1] = 1


class RetryJob(JobCommand):
    """Run a failed job's remaining tasks again (fresh attempts)."""

    type: Literal["RetryJob"] = "RetryJob"
    v: Literal[1] = 1


class ApproveJob(JobCommand):
    """Let a job that waits for approval run its plan (needs `approve` on the job; docs/governance.md)."""

    type: Literal["ApproveJob"] = "ApproveJob"
    v: Literal[1] = 1
    comment: str = Field(default="", max_length=MAX_COMMENT_CHARS)
    dry_run: bool = Field(default=False, description=(
        "decide nothing: answer (a `DryRun`) what an approval now would find: the plan that would run, its cost at "
        "the catalog's prices now, and what the tenant's policies say now (decision 42)"))


class RejectJob(JobCommand):
    """Refuse a job that waits for approval: it ends, nothing ran."""

    type: Literal["RejectJob"] = "RejectJob"
    v: Literal[1] = 1
    comment: str = Field(default="", max_length=MAX_COMMENT_CHARS)


AnyCommand = Annotated[
    CreateCluster | DeleteCluster | ExpandCluster | ShrinkCluster | AddServices | RemoveServices | ConfigureCluster
    | StartServices | StopServices | RestartServices | UpgradeService | RollbackCluster | ApplyPlan | ExtendLease
    | CheckCluster | RepairCluster
    | PauseJob | ResumeJob | CancelJob | RetryJob | ApproveJob | RejectJob,
    Field(discriminator="type"),
]
COMMAND_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyCommand, config=DEFERRED)

VERB_OF: dict[str, str] = {
    "CreateCluster": "create", "DeleteCluster": "delete", "ExpandCluster": "expand", "ShrinkCluster": "shrink",
    "AddServices": "add-services", "RemoveServices": "remove-services", "ConfigureCluster": "configure",
    "StartServices": "start", "StopServices": "stop", "RestartServices": "restart", "UpgradeService": "upgrade",
    "RollbackCluster": "rollback", "ApplyPlan": "apply", "ExtendLease": "extend-lease", "CheckCluster": "check",
    "RepairCluster": "repair", "PauseJob": "pause", "ResumeJob": "resume", "CancelJob": "cancel", "RetryJob": "retry",
    "ApproveJob": "approve", "RejectJob": "reject",
}
JOB_VERBS = frozenset(VERB_OF[c.__name__] for c in JobCommand.__subclasses__())
"""The verbs whose request names a job, not a cluster: the job's cluster is the one it is for."""


class Accepted(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["Accepted"] = "Accepted"
    v: Literal[1] = 1
    job_id: str
    cluster_id: str
    duplicate: bool = Field(default=False, description="true if this request_id was seen before")
    warnings: list[str] = Field(default_factory=list, description="accepted, with a note: the job may wait (no live "
                                "provisioner serves the tenant and class of its tasks), or the cluster stays outside its "
                                "template's size range")


class DryRun(BaseModel):
    """The answer to a dry run: what would be built and how; nothing was executed or logged.
    v2 adds `warnings`."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["DryRun"] = "DryRun"
    v: Literal[1, 2] = 2
    layout: Layout | None = None
    plan: dict[str, Any] = Field(description="tasks, edges and stages, as `muster plan` prints them")
    plan_id: str | None = Field(default=None, description="the saved plan: `ApplyPlan {plan_id}` runs exactly this")
    cluster_version: int | None = Field(default=None, description="the cluster's version the plan was made on")
    catalog_version: str | None = Field(default=None, description="digest of the catalog the plan was made with")
    cost: dict[str, Any] | None = Field(default=None, description=(
        "per hour, from the catalog's hardware `cost` fields: `per_hour` (the cluster once done), `before_per_hour`, "
        "`per_node`, `by_hardware`, `unknown` (hardware types without a cost)"))
    policy: dict[str, Any] | None = Field(default=None, description=(
        "what the tenant's governance would say: `deny` and `warn` (policy messages), `approval` (the approval rules "
        "the request matches: it would wait for an approver), `input` (the document the policies were evaluated on: "
        "`muster policy test FILE --input` takes it, or this whole answer)"))
    warnings: list[str] = Field(default_factory=list, description=(
        "v2: what the request would be accepted with a note of (a cluster left outside its template's size range)"))


class LeaseExtended(BaseModel):
    """The answer to `ExtendLease`: the lease's new expiry (recorded as `ClusterLeaseChanged`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["LeaseExtended"] = "LeaseExtended"
    v: Literal[1] = 1
    cluster_id: str
    expires_at: datetime
    version: int = Field(description="the cluster's version after the change")


RejectionCode = Literal["invalid", "forbidden", "not_found", "conflict", "precondition", "stale", "unavailable"]
"""What kind of refusal (the tracker's HTTP status follows it, docs/tracker.md "Writes"): the
request is wrong (`invalid`), not allowed (`forbidden`), names nothing there (`not_found`),
collides with the state or an earlier request (`conflict`), its `if_version` no longer holds
(`precondition`), its saved plan is out of date (`stale`), or nobody could decide (`unavailable`)."""


class RejectedProblem(BaseModel):
    """One of several problems a request was refused for."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    field: str | None = Field(default=None, max_length=256, description="the request's field at fault, when one is")
    reason: str


class Rejected(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: Literal["Rejected"] = "Rejected"
    v: Literal[1] = 1
    reason: str
    retry: bool = Field(default=False, description=(
        "true when nothing was decided: no planner could act for the cluster just then (its shard "
        "between owners). Send the same request again (same request_id); `MusterClient.request` does. "
        "Left out of the JSON when false"))
    code: RejectionCode | None = Field(default=None, description="what kind of refusal; left out when not known")
    field: str | None = Field(default=None, max_length=256,
                              description="the request's field at fault (a dotted path), when one is; left out otherwise")
    job_id: str | None = Field(default=None, description="a request_id used before for another request: the job it made")
    problems: list[RejectedProblem] = Field(default_factory=list, description=(
        "a request refused for several problems (a create: its template, node count, provider, services, hardware "
        "and image types, name are each checked): every one, each with its field; `reason` says them all, `field` "
        "is the first's. Left out when there are fewer than two"))

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.problems:
            data.pop("problems", None)
        if not self.retry:
            data.pop("retry", None)
        for name in ("code", "field", "job_id"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


Reply = Annotated[Accepted | Rejected | DryRun | LeaseExtended, Field(discriminator="type")]
REPLY_ADAPTER: TypeAdapter[Any] = TypeAdapter(Reply, config=DEFERRED)
