"""The tracker's write routes: one per bus request, their bodies, answers and OpenAPI document
(docs/tracker.md, "Writes").

A body is the command's own fields less what the route says elsewhere: the ids in the path,
`dry_run` in the query, the idempotency key and the cluster version in the `Idempotency-Key` and
`If-Match` headers, the requester in the token. So the bodies cannot drift from the bus contracts:
they are derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from contracts import commands as c
from contracts.catalog_requests import ApplyCatalog, CatalogAnswer, CatalogProblem, DeleteCatalogEntity
from contracts.governance import ApprovalRule, GovernanceAnswer, Policy, Schedule, Subscription
from contracts.layout import Layout

from . import api

NOT_IN_BODY = frozenset({"type", "v", "request_id", "requested_by", "dry_run", "if_version"})
IDEMPOTENCY_KEY = "Idempotency-Key"
MAX_KEY_LENGTH = 255


def body_of(command: type[BaseModel], *, path: tuple[str, ...] = (), name: str | None = None) -> type[BaseModel]:
    """The request body of a route: the command's fields that the path, query, headers and token
    do not carry, with the command's own types, bounds and validators."""
    fields: dict[str, Any] = {n: (f.annotation, f) for n, f in command.model_fields.items() if n not in NOT_IN_BODY | set(path)}
    return create_model(name or f"{command.__name__}Body", __config__=ConfigDict(extra="forbid"), __doc__=command.__doc__,
                        **fields)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobAccepted(_Out):
    """Accepted: the job runs; follow it at `job_url` (and its `/stream`)."""

    job_id: str
    cluster_id: str
    duplicate: bool = Field(description="true: this Idempotency-Key made this job before; nothing new was started")
    warnings: list[str]
    job_url: str
    cluster_url: str


class StageCount(_Out):
    stage: int
    tasks: int
    actions: dict[str, int]
    work: dict[str, int] = Field(default_factory=dict, description=(
        "its tasks by action and service (`stop zookeeper-server`: 1), as `--dry-run` prints each stage: a stop also "
        "stops what depends on the service, and this is where that shows"))


class Estimate(_Out):
    """Each task lasting a nominal time for its action (`nominal_s`), unlimited workers."""

    eager_s: float
    staged_s: float
    critical_path_s: float
    saving: float = Field(description="1 - eager / staged")
    nominal_s: dict[str, float]


class RollingCount(_Out):
    batches: int
    tolerance: int


class PlanSummary(_Out):
    tasks: int
    nodes: int
    actions: dict[str, int]
    stages: list[StageCount]
    estimate: Estimate | None
    rolling: RollingCount | None = None


class Preview(_Out):
    """A dry run: nothing was executed; the plan is saved. `POST plan_url + "/apply"` runs exactly
    this plan, or is refused (409) if the cluster or the catalog changed since."""

    operation: str
    plan_id: str | None = Field(default=None, description=(
        "the saved plan: POST plan_url + \"/apply\" runs it. Absent from `approve?dry_run=true`, which saves no "
        "plan (the approval runs the plan the job was requested with)"))
    plan_url: str | None = Field(default=None, description="/v1/plans/{plan_id}; absent with plan_id")
    cluster_version: int | None
    catalog_version: str | None
    layout: Layout | None
    plan: dict[str, Any] = Field(description="tasks, edges and stages, as `muster plan` prints them")
    summary: PlanSummary
    cost: dict[str, Any] | None = Field(default=None, description=(
        "per hour, from the catalog's hardware `cost` fields: per_hour (once done), before_per_hour, per_node, "
        "by_hardware, unknown (docs/governance.md)"))
    policy: dict[str, Any] | None = Field(default=None, description=(
        "what the tenant's governance would say: deny and warn (policy messages), approval (rules it would wait for)"))
    warnings: list[str] = Field(default_factory=list, description=(
        "what the request would be accepted with a note of (a cluster left outside its template's size range)"))


class SavedPlan(_Out):
    """A plan a dry run saved, and the job that ran it (if one did)."""

    plan_id: str
    operation: str
    cluster_id: str
    job_id: str = Field(description="the job applying it makes (or made)")
    applied: bool
    request: dict[str, Any]
    layout: Layout | None
    cluster_version: int
    catalog_version: str
    tasks: int
    by: str
    seq: int


class LeaseOut(_Out):
    cluster_id: str
    expires_at: str
    version: int


class RequestProblem(_Out):
    parameter: str | None = Field(description="the body's field at fault (a dotted path), when one is")
    message: str


class WriteErrorDetail(api.ErrorDetail):
    job_id: str | None = Field(default=None, description="409 for a reused Idempotency-Key: the job it made first")
    problems: list[CatalogProblem | RequestProblem] | None = Field(default=None, description=(
        "every problem: of a refused catalog (its entities'), or of a request refused for several (a create's "
        "template, nodes, provider, services, hardwaretype, imagetype, name; each with its `parameter`; the "
        "error's `message` says them all and its `parameter` is the first's)"))


class WriteError(_Out):
    error: WriteErrorDetail


@dataclass(frozen=True)
class WriteRoute:
    method: str
    path: str
    name: str
    summary: str
    verb: str
    """The bus request's verb (`muster.ops.<tenant>.<principal>.<verb>`)."""
    command: type[BaseModel]
    body: type[BaseModel] | None
    ids: tuple[str, ...] = ()
    """Path parameters that are command fields."""
    dry_run: bool = False
    if_match: bool = False
    answer: type[BaseModel] = JobAccepted
    status: int = 202


CLUSTER_VERBS: tuple[tuple[str, type[c.Command], str], ...] = (
    ("expand", c.ExpandCluster, "Grow to `nodes` nodes in total (existing nodes are not touched)."),
    ("shrink", c.ShrinkCluster, "Shrink to `nodes` nodes in total."),
    ("add-services", c.AddServices, "Add services (the solver places them)."),
    ("remove-services", c.RemoveServices, "Stop and remove services."),
    ("configure", c.ConfigureCluster, "Replace the config; with `restart`, services are stopped and started around it."),
    ("start", c.StartServices, "Start services (default: all) and what they depend on."),
    ("stop", c.StopServices, "Stop services (default: all) and what depends on them."),
    ("restart", c.RestartServices, "Restart services (default: all) and what depends on them."),
    ("upgrade", c.UpgradeService, "Run a service's current catalog definition on its nodes."),
    ("rollback", c.RollbackCluster, "Back to the layout and config before job `to_job`."),
    ("check", c.CheckCluster, "Ask every node for the state of its services."),
    ("repair", c.RepairCluster, "Re-run what the last check says is missing; with `rolling`, a batch of nodes at a time, "
                                "those where it only brings services up first."),
)
JOB_VERBS: tuple[tuple[str, type[c.Command], str], ...] = (
    ("pause", c.PauseJob, "Dispatch nothing new; tasks in flight finish."),
    ("resume", c.ResumeJob, "Resume a paused job."),
    ("cancel", c.CancelJob, "Stop the job and roll back what it did."),
    ("retry", c.RetryJob, "Run a failed job's remaining tasks again."),
)

DECISIONS: tuple[tuple[str, type[c.Command], str], ...] = (
    ("approve", c.ApproveJob, "Let a job that waits for approval run its plan, with a comment (`approve` permission; "
                              "docs/governance.md). `?dry_run=true` decides nothing: 200 with the plan, its cost at "
                              "today's prices and what the tenant's policies say now."),
    ("reject", c.RejectJob, "Refuse a job that waits for approval, with a comment: it ends, nothing ran."),
)


def _routes() -> tuple[WriteRoute, ...]:
    routes = [
        WriteRoute("post", "/v1/clusters", "create_cluster", "Create a cluster from a template.", "create", c.CreateCluster,
                   body_of(c.CreateCluster), dry_run=True),
        WriteRoute("delete", "/v1/clusters/{cluster_id}", "delete_cluster", "Delete every node of the cluster.", "delete",
                   c.DeleteCluster, None, ("cluster_id",), dry_run=True, if_match=True),
    ]
    for verb, command, summary in CLUSTER_VERBS:
        routes.append(WriteRoute("post", f"/v1/clusters/{{cluster_id}}/{verb}", verb.replace("-", "_") + "_cluster", summary, verb,
                                 command, body_of(command, path=("cluster_id",)), ("cluster_id",), dry_run=True, if_match=True))
    routes.append(WriteRoute("post", "/v1/clusters/{cluster_id}/extend-lease", "extend_lease",
                             "Move the lease's expiry later, within the template's step and max.", "extend-lease", c.ExtendLease,
                             body_of(c.ExtendLease, path=("cluster_id",)), ("cluster_id",), if_match=True, answer=LeaseOut,
                             status=200))
    for verb, command, summary in JOB_VERBS:
        routes.append(WriteRoute("post", f"/v1/jobs/{{job_id}}/{verb}", f"{verb}_job", summary, verb, command, None, ("job_id",)))
    for verb, command, summary in DECISIONS:  # `?dry_run=true` on approve: what an approval now would find (decision 42)
        routes.append(WriteRoute("post", f"/v1/jobs/{{job_id}}/{verb}", f"{verb}_job", summary, verb, command,
                                 body_of(command, path=("job_id",)), ("job_id",), dry_run=command is c.ApproveJob))
    routes.append(WriteRoute("post", "/v1/plans/{plan_id}/apply", "apply_plan",
                             "Run a saved plan exactly as its preview showed it; 409 if the cluster or catalog changed since.",
                             "apply", c.ApplyPlan, None, ("plan_id",)))
    routes.append(WriteRoute("put", "/v1/catalog", "apply_catalog",
                             "Apply catalog entities (all or nothing); unchanged ones need no grant.", "catalog-apply",
                             ApplyCatalog, body_of(ApplyCatalog), dry_run=True, answer=CatalogAnswer, status=200))
    return tuple(routes)


ROUTES = _routes()
BY_NAME = {r.name: r for r in ROUTES}
CATALOG_DELETE = WriteRoute("delete", "/v1/catalog/{kind}/{name}", "delete_catalog_entity",
                            "Delete one catalog entity (refused while clusters use it).", "catalog-delete", DeleteCatalogEntity, None,
                            ("kind", "name"), answer=CatalogAnswer, status=200)
GOVERNANCE_KINDS: dict[type[BaseModel], tuple[str, str, str, str]] = {
    Policy: ("policy", "policies", "muster policy apply", "the tenant's administrators"),
    ApprovalRule: ("rule", "rules", "muster rule add", "the tenant's administrators"),
    Subscription: ("subscription", "subscriptions", "muster notify add", "`read` on the tenant; a webhook is checked by the notifier"),
    Schedule: ("schedule", "schedules", "muster schedule create", "the permission its operation needs on its cluster"),
}
"""The governance entities written over HTTP as the CLI writes them: entity -> (its kind on the
bus, its list in `GET /v1/governance/{what}`, the command, who may)."""


def schedule_body() -> type[BaseModel]:
    """A schedule's body over HTTP: its operation is the command as the bus takes it (`{"type":
    "CheckCluster", "cluster_id": "..."}`, no request_id), as `muster schedule create ... --`
    builds it; its verb is the command's unless given; its owner is the requester, never the body's."""
    fields: dict[str, Any] = {n: (f.annotation, f) for n, f in Schedule.model_fields.items() if n not in ("name", "owner", "verb")}
    fields["command"] = (dict[str, Any], Field(description=(
        "the operation, as a command on the bus: its `type` (CheckCluster, RestartServices, ExtendLease, ...) and fields, "
        "a cluster by its id; no request_id (each tick gets its own) and no dry_run (docs/asyncapi.json has every command)")))
    fields["verb"] = (str | None, Field(default=None, pattern=r"^[a-z][a-z\-]{1,31}$", description=(
        "the operation's verb (`check`, `restart`, `extend-lease`...); default: the command's")))
    return create_model("ScheduleBody", __config__=ConfigDict(extra="forbid"), __doc__=Schedule.__doc__, **fields)


def _governance_routes() -> tuple[WriteRoute, ...]:
    routes: list[WriteRoute] = []
    for entity, (kind, what, cli, who) in GOVERNANCE_KINDS.items():
        path = f"/v1/governance/{what}/{{name}}"
        body = schedule_body() if entity is Schedule else body_of(entity, path=("name",), name=f"{entity.__name__}Body")
        routes.append(WriteRoute("put", path, f"put_{kind}",
                                 f"Add or change the tenant's {kind} `name` ({who}; as `{cli}`, docs/governance.md): 200 with "
                                 "what was written, 422 with every problem found, nothing written.", "governance-put", entity,
                                 body, ("name",),
                                 answer=GovernanceAnswer, status=200))
        routes.append(WriteRoute("delete", path, f"delete_{kind}", f"Delete the tenant's {kind} `name` ({who}).",
                                 "governance-delete", entity, None, ("name",), answer=GovernanceAnswer, status=200))
    for verb, who in (("pause", "its owner, or who may run its operation"), ("resume", "who may run its operation")):
        routes.append(WriteRoute("post", f"/v1/governance/schedules/{{name}}/{verb}", f"{verb}_schedule",
                                 f"{verb.capitalize()} the tenant's schedule `name` ({who}; as `muster schedule {verb}`, "
                                 "docs/governance.md): no body, no `read` on the tenant needed.", f"governance-{verb}",
                                 Schedule, None, ("name",), answer=GovernanceAnswer, status=200))
    routes.append(WriteRoute("post", "/v1/governance/subscriptions/{name}/test", "test_subscription",
                             "Send the tenant's subscription `name` a test notification now (`read` on the tenant; as `muster "
                             "notify test`, docs/governance.md): 200 with its one attempt (`items[0].status`, the receiver's), "
                             "503 with why it failed (the receiver's error; a failed test is not tried again).", "governance-notify-test",
                             Subscription, None, ("name",), answer=GovernanceAnswer, status=200))
    return tuple(routes)


GOVERNANCE_WRITES = _governance_routes()
GET_PLAN = api.Route("/v1/plans/{plan_id}", "get_plan", "A plan a dry run saved: what it would run, on which versions, and "
                     "whether it ran.", SavedPlan)
"""A read, documented here with the writes it belongs to."""
