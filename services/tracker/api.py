"""The tracker's HTTP contract: response models and the OpenAPI 3.1 document built from them.

The routes are declared once, here; `http.py` registers exactly these, so the document and
the server cannot drift apart (a test checks every documented route answers).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from contracts import subjects
from contracts.events import ServiceLife, TaskState
from contracts.layout import Layout

from . import people_api
from .api_base import DEFAULT_LIMIT as DEFAULT_LIMIT
from .api_base import DEFAULT_TENANT as DEFAULT_TENANT
from .api_base import LAST_EVENT_ID, MAX_LIMIT, MAX_SEQ, TENANT, TENANT_HEADER, UUID_PATTERN, Route, _Out, _param

JOB_STATES = ("running", "waiting_for_resources", "waiting_for_approval", "paused", "succeeded", "failed", "rolling_back", "rolled_back",
              "needs_attention")
class ErrorDetail(_Out):
    status: int
    message: str
    parameter: str | None = None


class Error(_Out):
    error: ErrorDetail


class TaskStatus(_Out):
    id: str
    node: str | None
    action: str | None
    service: str | None
    state: TaskState = Field(description=(
        "planned (not queued yet), queued, claimed (a worker runs it), succeeded, failed (its last attempt failed), "
        "timed_out (its last attempt had no outcome within the attempt timeout), cancelled (never queued: the job was "
        "cancelled first)"))
    attempt: int
    provisioner: str | None
    worker: str | None


class Stage(_Out):
    current: int | None
    total: int


class JobResources(_Out):
    """Hosts the job asked of a pool (docs/pools.md); `position` 1 = next to be served."""

    pool: str
    request_id: str
    hosts: int
    granted: bool
    position: int | None = None


class JobStatus(_Out):
    id: str
    tenant: str
    cluster_id: str
    operation: str
    state: str
    error: str | None
    owner: str | None
    requested_by: str | None
    mode: str | None
    started_at: str | None
    finished_at: str | None
    counts: dict[str, int]
    tasks_total: int
    stage: Stage
    layout: Layout | None
    tasks: list[TaskStatus]
    source: Literal["owner", "log"]
    resources: JobResources | None = None
    warnings: list[str] = Field(default_factory=list, description="why a running job may not move (no live provisioner serves its tenant)")
    approval: dict[str, Any] | None = Field(default=None, description=(
        "a job an approval rule matched (docs/governance.md): rules, expires_at, cost (at the prices when it was requested), "
        "cluster_version, digest, and the decision (null while it waits; approved, rejected, expired), by and comment; "
        "cost_now: while it waits, the plan's cost at the catalog's prices now, as an approval now would judge it (per_hour, "
        "before_per_hour, by_hardware, unknown; absent when the job's planner did not answer); approved_cost: the cost at "
        "the prices of its approval, which judged it again (decision 42); each without the price of a hardware type the reader "
        "may not read (0, listed in unknown: docs/governance.md, \"Who sees a waiting job's cost\")"))
    policy_warnings: list[dict[str, Any]] = Field(default_factory=list, description="what the tenant's policies warned of: policy, version, message")
    trace_id: str | None = Field(default=None, description=(
        "the job's trace (32 hex digits) in the tracing UI, when tracing was on at its request (docs/tracing.md); null "
        "otherwise"))


class TaskLocation(_Out):
    task_id: str
    node: str | None
    attempt: int
    state: str | None
    provisioner: str | None
    worker: str | None
    since: str | None
    seq: int


class JobLocation(_Out):
    job_id: str
    cluster_id: str | None
    owner: str | None
    owner_seq: int
    source: Literal["index", "log"]
    tasks: list[TaskLocation]


class EventItem(_Out):
    seq: int
    subject: str
    time: str
    type: str
    aggregate_id: str | None
    version: int | None
    event: dict[str, Any]


class EventPage(_Out):
    items: list[EventItem]
    next_after: int | None


class JobSummary(_Out):
    id: str
    cluster_id: str | None
    operation: str | None
    state: str
    owner: str | None
    requested_by: str | None
    started_at: str | None
    finished_at: str | None
    error: str | None
    tasks_total: int
    seq: int


class JobPage(_Out):
    items: list[JobSummary]
    next_after: int | None


class ServiceOnNode(_Out):
    state: ServiceLife
    outdated: bool = Field(description="it runs with a config older than the cluster's: restart it to take the new one")


class ClusterNode(_Out):
    id: str
    hostname: str
    hardwaretype: str
    imagetype: str
    services: list[str]
    ipaddresses: dict[str, str]
    desired: dict[str, Literal["running", "stopped"]] = Field(default_factory=dict, description=(
        "service -> the state it is meant to be in on this node: stopped where a stop job stopped it, else running"))
    observed: dict[str, str] = Field(default_factory=dict,
                                     description="service -> the state its last `status` check found (running, stopped, failed, unknown)")
    machine: dict[str, str] = Field(default_factory=dict,
                                    description="what its provider said of the machine: providerid, ssh_host_key_fingerprint")
    lifecycle: dict[str, ServiceOnNode] = Field(default_factory=dict, description=(
        "service -> its state machine on this node (docs/planner.md, \"Services on nodes\"); services whose state "
        "is not known yet (a cluster from before states were kept) are absent"))


class DriftItem(_Out):
    """A service on a node whose observed state is not the desired one."""

    node: str
    service: str
    desired: str
    observed: str
    repair: str = Field(description="what `muster cluster repair` re-runs there with the tenant's catalog now: start, "
                                    "reinstall (install, configure and start), stop, restart (observed `outdated`: it "
                                    "runs with an older config), reconfigure (observed `stale`: configured with another "
                                    "config or for other members, as after an expand or a shrink: configure and restart), "
                                    "reconnect (observed `unknown`: the node's provider confirms it, bringing its ssh "
                                    "back where it can, then the service is started and checked)")
    after: list[str] = Field(default_factory=list, description="a failed service's runtime dependencies that are down "
                             "too: the repair starts it after them instead of reinstalling it (it may have failed for "
                             "that alone)")


class LayoutGroupCount(_Out):
    hardwaretype: str
    imagetype: str
    services: list[str]
    count: int


class ClusterDetail(_Out):
    id: str
    tenant: str
    name: str
    template: str
    provider: str
    status: str
    status_reason: str | None
    job_id: str | None
    version: int = Field(description="the cluster's count of events (`if_version`)")
    expires_at: str | None = Field(default=None, description="the lease's end; null: forever")
    stopped: list[str] = Field(default_factory=list, description="services meant to be stopped on every node that has them")
    stopped_on: dict[str, list[str]] = Field(default_factory=dict, description=(
        "services meant to be stopped on some of their nodes only: service -> nodes (a stop with `nodes`); each node's "
        "`desired` says it per node"))
    drift: list[DriftItem] = Field(default_factory=list, description="observed states that differ from the desired ones")
    layout: list[LayoutGroupCount]
    nodes: list[ClusterNode]
    created_at: str
    updated_at: str
    seq: int


class ClusterSummary(_Out):
    id: str
    name: str | None
    template: str | None
    status: str | None
    job_id: str | None
    nodes: int
    created_at: str | None
    expires_at: str | None = Field(default=None, description="the lease's end; null: forever")
    seq: int


class ClusterPage(_Out):
    items: list[ClusterSummary]
    next_after: int | None


class Health(_Out):
    """Whether NATS is connected and the location index loaded (503 when not)."""

    ok: bool
    nats: str
    index: str


class Grant(BaseModel):
    permission: str
    scope: str


class WhoAmI(BaseModel):
    """The principal of the request's token."""

    principal: str
    role: str
    tenant: str | None = None
    service: str | None = None
    grants: list[Grant] = Field(default_factory=list)




class PoolSummary(_Out):
    pool: str
    terms: dict[str, Any]
    hosts: int
    states: dict[str, int]
    free: int
    waiting: int
    granted: int


class PoolList(_Out):
    items: list[PoolSummary]


class PoolHolder(_Out):
    tenant: str | None
    cluster_id: str | None
    node_id: str | None
    request_id: str | None


class PoolHost(_Out):
    id: str
    address: str
    port: int
    user: str
    state: str
    kind: str
    ambiguous: bool
    properties: dict[str, Any]
    holder: PoolHolder | None
    error: str
    claims: list[dict[str, Any]]
    shares_address_with: list[str]
    host_keys: list[str]


class PoolQueueEntry(_Out):
    """A waiting request; another tenant's shows only its place, size and score."""

    position: int
    request_id: str | None
    tenant: str | None
    cluster_id: str | None
    job_id: str | None
    hosts: int
    urgency: int
    priority: int
    score: float
    deadline: str | None
    by: str | None


class PoolDetail(PoolSummary):
    queue: list[PoolQueueEntry]
    hosts_detail: list[PoolHost]
    seq: int


class GovernanceList(_Out):
    items: list[dict[str, Any]] = Field(description=(
        "the entities (kind, name, version, by, entity, created_at, updated_at; schedules: when, next_at, last run, "
        "operation: what it sends, as a command line would say it (its `text`, else written from its command), "
        "ended: why a schedule ended, its cluster deleted, empty while it runs; counts_from: when it was last resumed or "
        "given another time or operation, its ticks counted from then, null if never), or the denied requests, newest first"))
    warnings: list[str] | None = Field(default=None, description=(
        "schedules listed without `read` on the tenant: only those the requester owns or may run are listed, and this "
        "says so (absent otherwise)"))


class GovernanceEntry(_Out):
    """One rule, policy, subscription or schedule, as its list has it (a policy with its source)."""

    kind: str
    name: str
    version: int
    by: str
    entity: dict[str, Any] = Field(description="the entity as it was put (a policy: name, description, source)")
    created_at: str
    updated_at: str


MODELS: list[type[BaseModel]] = [Error, JobStatus, JobLocation, EventPage, JobPage, ClusterDetail, ClusterPage, Health,
                                 WhoAmI, PoolList, PoolDetail, GovernanceList, GovernanceEntry]


# -- routes and parameters -------------------------------------------------------------------


JOB_ID = _param("job_id", "path", {"type": "string", "pattern": UUID_PATTERN}, "A job id (UUID).", required=True)
CLUSTER_ID = _param("cluster_id", "path", {"type": "string", "pattern": UUID_PATTERN}, "A cluster id (UUID).", required=True)
LIMIT = _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
               "Page size.")
AFTER = _param("after", "query", {"type": "integer", "minimum": 0, "maximum": MAX_SEQ, "default": 0},
               "Cursor: return items after this log sequence (a page's `next_after`).")
CLUSTER_FILTER = _param("cluster", "query", {"type": "string", "pattern": UUID_PATTERN}, "Only jobs of this cluster.")
POOL = _param("pool", "path", {"type": "string", "pattern": subjects.TOKEN.pattern}, "A pool's name.", required=True)
HOSTS_FLAG = _param("hosts", "query", {"type": "boolean", "default": True}, "Include every host (false: summary and line).")
NAME_FILTER = _param("name", "query", {"type": "string"}, "Only clusters of this name (a deleted one keeps its name).")
STATE_FILTER = _param("state", "query", {"type": "string", "enum": list(JOB_STATES)}, "Only jobs in this state.")


GOVERNANCE_KIND = _param("what", "path", {"type": "string", "enum": ["rules", "policies", "subscriptions", "schedules"]},
                         "Which kind (docs/governance.md).", required=True)
GOVERNANCE_NAME = _param("name", "path", {"type": "string", "pattern": "^[A-Za-z0-9_\\-]{1,64}$"}, "The entity's name.",
                         required=True)
GOVERNANCE_LIST = _param("what", "path", {"type": "string", "enum": ["rules", "policies", "subscriptions", "schedules", "denied"]},
                         "Which list (docs/governance.md).", required=True)


ROUTES: tuple[Route, ...] = (
    Route("/v1/jobs", "list_jobs", "Jobs of the tenant, oldest first, paged; filter by cluster and state.", JobPage,
          (TENANT, CLUSTER_FILTER, STATE_FILTER, LIMIT, AFTER), errors=(400, 503)),
    Route("/v1/jobs/{job_id}", "get_job",
          "A job's status: state, operation, cluster, counts of tasks by state, current stage, times, error, "
          "and every task with its state and location. `source` says whether the job's owner answered or the "
          "status was folded from the log.", JobStatus, (TENANT, JOB_ID)),
    Route("/v1/jobs/{job_id}/location", "get_job_location",
          "Where the job is: the planner that owns it and where each task runs now.", JobLocation, (TENANT, JOB_ID)),
    Route("/v1/jobs/{job_id}/events", "get_job_events", "The job's events in log order, paged.", EventPage,
          (TENANT, JOB_ID, LIMIT, AFTER)),
    Route("/v1/jobs/{job_id}/stream", "stream_job",
          "Server-sent events: one `progress` event per event of the job (id = log sequence), then `end` when "
          "the job ends. Resumes after the `Last-Event-ID` header.", None, (TENANT, JOB_ID, LAST_EVENT_ID),
          content_type="text/event-stream"),
    Route("/v1/clusters", "list_clusters", "Clusters of the tenant, oldest first, paged; filter by name. Any other "
          "query parameter is a 400 naming it.", ClusterPage, (TENANT, NAME_FILTER, LIMIT, AFTER), errors=(400, 503)),
    Route("/v1/clusters/{cluster_id}", "get_cluster", "A cluster: status, layout, nodes and its current job.",
          ClusterDetail, (TENANT, CLUSTER_ID)),
    Route("/v1/clusters/{cluster_id}/jobs", "get_cluster_jobs", "The jobs of a cluster, oldest first, paged.", JobPage,
          (TENANT, CLUSTER_ID, LIMIT, AFTER)),
    Route("/v1/whoami", "whoami", "Who the token is: principal, role, tenant and grants (401 says why a token is refused).",
          WhoAmI, (), errors=(400,)),
    Route("/v1/governance/{what}", "governance",
          "The tenant's approval rules, policies, subscriptions (each with its last delivery: `delivery.state` queued, "
          "delivered, failing or undelivered, with the receiver's status and the error; `delivery.test`: it is a "
          "`muster notify test`'s, tried once), schedules (with their last and "
          "next runs), or the "
          "requests its policies denied. Approve or reject a job that waits: POST /v1/jobs/{job_id}/approve|reject "
          "with {\"comment\": \"...\"} (docs/governance.md).", GovernanceList, (TENANT, GOVERNANCE_LIST), errors=(400, 403, 404, 503)),
    Route("/v1/governance/{what}/{name}", "governance_entry",
          "One of the tenant's approval rules, policies (with its Rego source), subscriptions or schedules, as its list "
          "has it; 404 when the tenant has none of that name. Each is put and deleted with PUT and DELETE on the same "
          "path, with the rights `muster rule|policy|notify|schedule` need (docs/governance.md).", GovernanceEntry,
          (TENANT, GOVERNANCE_KIND, GOVERNANCE_NAME), errors=(400, 403, 404, 503)),
    Route("/v1/pools", "list_pools", "Every resource pool: hosts by state, free hosts, waiting and granted requests "
          "(docs/pools.md).", PoolList, (TENANT,), errors=(400, 503)),
    Route("/v1/pools/{pool}", "get_pool",
          "A pool: its terms (this tenant's quota), every host (state, properties; holders of other tenants are "
          "hidden) and the waiting line in policy order.", PoolDetail, (TENANT, POOL, HOSTS_FLAG)),
    Route("/v1/pools/{pool}/stream", "stream_pool",
          "Server-sent events: `pool` (the pool as `GET /v1/pools/{pool}` shows it), then one `change` per event "
          "of the pool (id = log sequence: the event's type, the hosts it touched, the new summary and line).",
          None, (TENANT, POOL), content_type="text/event-stream"),
    Route("/healthz", "healthz", "Whether the tracker is connected to NATS and its index is loaded.", Health,
          errors=(), extra={"503": Health}),
    Route("/metrics", "metrics", "Prometheus metrics (text format 0.0.4).", None, content_type="text/plain", errors=()),
    Route("/v1/openapi.json", "openapi", "This document.", None, errors=()),
)

ERROR_TEXT = {400: "A malformed parameter (named in `error.parameter`).", 404: "No such job, cluster or pool in this tenant.",
              503: "NATS is unreachable.",
              401: "No token, or one that is malformed, unknown, expired or revoked (the message says which).",
              403: "The token's principal may not read this (another tenant, or no read permission; the message says which).",
              414: "The request target (path and query string) is over 8192 bytes.",
              431: "A header (named in `error.parameter`) is over 8192 bytes."}
ANY_ROUTE_ERRORS = (414, 431)
"""Answered on every route, before it runs (the tracker's guard)."""
OPEN = frozenset({"healthz", "openapi"})
"""Routes that need no token (docs/tracker.md, "Access")."""
HEADERS = {"get_cluster": {"ETag": {"description": "The cluster's version, quoted (`\"7\"`): the writes' `If-Match`.",
                                    "required": True, "schema": {"type": "string"}}}}
"""Headers a route's answer carries, for the document."""
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer",
               "description": "A muster token (`muster token create`) or an identity provider's JWT, as for the bus."},
    "session": {"type": "apiKey", "in": "cookie", "name": "muster_session",
                "description": "The same token in the console's HttpOnly cookie (browsers cannot set headers on EventSource)."},
}


SSE_EVENT = {"type": "object", "description": "One server-sent event (OpenAPI 3.1: the schema of each event).",
             "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"},
                            "retry": {"type": "integer"}}}


def openapi() -> dict[str, Any]:
    _, defs = models_json_schema([(m, "serialization") for m in MODELS], ref_template="#/components/schemas/{model}")
    schemas = defs.get("$defs", {})
    paths: dict[str, Any] = {}
    for r in ROUTES:
        ok: dict[str, Any] = {"description": "OK"}
        if r.response is not None:
            ok["content"] = {r.content_type: {"schema": {"$ref": f"#/components/schemas/{r.response.__name__}"}}}
        elif r.content_type == "application/json":
            ok["content"] = {"application/json": {"schema": {"type": "object"}}}
        else:
            ok["content"] = {r.content_type: {"schema": SSE_EVENT if r.content_type == "text/event-stream" else {"type": "string"}}}
        if r.name in HEADERS:
            ok["headers"] = HEADERS[r.name]
        responses: dict[str, Any] = {"200": ok}
        for status in (*r.errors, *(() if r.name in OPEN else (401, 403)), *ANY_ROUTE_ERRORS):
            responses[str(status)] = {"description": ERROR_TEXT[status],
                                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for status_text, model in r.extra.items():
            responses[status_text] = {"description": model.__doc__ or model.__name__,
                                      "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
        operation: dict[str, Any] = {"operationId": r.name, "summary": r.summary, "parameters": list(r.params),
                                     "responses": responses}
        if r.name in OPEN:
            operation["security"] = []
        paths[r.path] = {"get": operation}
    return {
        "openapi": "3.1.0",
        "info": {"title": "muster tracker", "version": "1",
                 "description": "Where jobs are, what they are doing, what happened (docs/tracker.md). Every /v1 "
                                f"route needs a token (bearer or the `muster_session` cookie) and is scoped to its "
                                f"principal's tenant; super admins name the tenant with the `{TENANT_HEADER}` header."},
        "paths": paths,
        "security": [{"bearer": []}, {"session": []}],
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }


# People's reads (decision 0016) are declared in a module of their own, in the same vocabulary.
ROUTES = ROUTES + people_api.ROUTES
MODELS = MODELS + people_api.MODELS
