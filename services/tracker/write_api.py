"""The tracker's write routes: one per bus request, their bodies, answers and OpenAPI document
(docs/tracker.md, "Writes"). A body is the command's own fields less what the route says
elsewhere: the ids in the path, `dry_run` in the query, the idempotency key and the cluster
version in the `Idempotency-Key` and `If-Match` headers, the requester in the token. So the
bodies cannot drift from the bus contracts: they are derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import models_json_schema

from contracts import commands as c
from contracts.catalog_requests import ApplyCatalog, CatalogAnswer, CatalogProblem, DeleteCatalogEntity
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
    plan_id: str
    plan_url: str
    cluster_version: int | None
    catalog_version: str | None
    layout: Layout | None
    plan: dict[str, Any] = Field(description="tasks, edges and stages, as `muster plan` prints them")
    summary: PlanSummary


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


class WriteErrorDetail(api.ErrorDetail):
    job_id: str | None = Field(default=None, description="409 for a reused Idempotency-Key: the job it made first")
    problems: list[CatalogProblem] | None = Field(default=None, description="a refused catalog: every problem")


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
    ("repair", c.RepairCluster, "Re-run what the last check says is missing."),
)
JOB_VERBS: tuple[tuple[str, type[c.Command], str], ...] = (
    ("pause", c.PauseJob, "Dispatch nothing new; tasks in flight finish."),
    ("resume", c.ResumeJob, "Resume a paused job."),
    ("cancel", c.CancelJob, "Stop the job and roll back what it did."),
    ("retry", c.RetryJob, "Run a failed job's remaining tasks again."),
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
    routes.append(WriteRoute("post", "/v1/plans/{plan_id}/apply", "apply_plan",
                             "Run a saved plan exactly as its preview showed it; 409 if the cluster or catalog changed since.",
                             "apply", c.ApplyPlan, None, ("plan_id",)))
    routes.append(WriteRoute("put", "/v1/catalog", "apply_catalog",
                             "Apply catalog entities (all or nothing); unchanged ones need no grant.", "catalog-apply",
                             ApplyCatalog, body_of(ApplyCatalog), answer=CatalogAnswer, status=200))
    return tuple(routes)


ROUTES = _routes()
BY_NAME = {r.name: r for r in ROUTES}
CATALOG_DELETE = WriteRoute("delete", "/v1/catalog/{kind}/{name}", "delete_catalog_entity",
                            "Delete one catalog entity (refused while clusters use it).", "catalog-delete", DeleteCatalogEntity, None,
                            ("kind", "name"), answer=CatalogAnswer, status=200)
GET_PLAN = api.Route("/v1/plans/{plan_id}", "get_plan", "A plan a dry run saved: what it would run, on which versions, and "
                     "whether it ran.", SavedPlan)
"""A read, documented here with the writes it belongs to."""


# -- the document ------------------------------------------------------------------------------------

PLAN_ID = api._param("plan_id", "path", {"type": "string", "pattern": c.ID}, "A saved plan's id (a dry run's `plan_id`).", True)
KIND = api._param("kind", "path", {"type": "string", "enum": ["providers", "hardwaretypes", "imagetypes", "services",
                                                            "clustertemplates", "partialtemplates"]}, "A catalog kind.", True)
NAME = api._param("name", "path", {"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,128}$"}, "An entity's name.", True)
DRY_RUN = api._param("dry_run", "query", {"type": "boolean", "default": False},
                     "Answer with the layout and the plan (saved, 200), execute nothing.")
KEY = api._param(IDEMPOTENCY_KEY, "header", {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": "^[\\x21-\\x7e]+$"},
                 "Retries with the same key (and body) get the same job; another body under it is a 409 naming that job. "
                 "Keys are the requester's own.")
IF_MATCH = api._param("If-Match", "header", {"type": "string", "pattern": '^("[1-9][0-9]{0,11}"|[1-9][0-9]{0,11}|\\*)$'},
                      "The cluster's version (`ETag` of `GET /v1/clusters/{cluster_id}`): refused with 412 if it moved.")
PATH_PARAMS = {"cluster_id": api.CLUSTER_ID, "job_id": api.JOB_ID, "plan_id": PLAN_ID, "kind": KIND, "name": NAME}
ERRORS = {400: "A malformed parameter or header (`error.parameter` names it).",
          401: api.ERROR_TEXT[401], 403: "The principal may not do this (the message says which permission on what).",
          404: "No such cluster, job, plan or entity in this tenant.",
          409: "It collides: a busy or deleted cluster, a taken name, a stale saved plan, or an Idempotency-Key used for "
               "another request (`error.job_id`).",
          412: "If-Match: the cluster is at another version.", 413: "The body is too big.",
          415: "The body is not `application/json`.",
          422: "The body is not a valid request, or the planner refused it (`error.parameter` names the field).",
          503: "NATS or every planner is unavailable; try again (the same Idempotency-Key is safe)."}


def _schemas() -> dict[str, Any]:
    answers: list[type[BaseModel]] = [JobAccepted, Preview, SavedPlan, LeaseOut, WriteError, CatalogAnswer]
    bodies = {r.body for r in (*ROUTES, CATALOG_DELETE) if r.body is not None}
    modes: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [(m, "serialization") for m in answers]
    modes += [(b, "validation") for b in sorted(bodies, key=str)]
    _, defs = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = defs.get("$defs", {})
    return schemas


def _ref(model: type[BaseModel] | str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{model if isinstance(model, str) else model.__name__}"}


def _operation(route: WriteRoute) -> dict[str, Any]:
    params: list[dict[str, Any]] = [api.TENANT, *(PATH_PARAMS[p] for p in _path_names(route.path))]
    if route.dry_run:
        params.append(DRY_RUN)
    if route.verb not in ("catalog-apply", "catalog-delete"):
        params.append(KEY)
    if route.if_match:
        params.append(IF_MATCH)
    ok = {"content": {"application/json": {"schema": _ref(route.answer)}}}
    responses: dict[str, Any] = {str(route.status): {"description": route.answer.__doc__ or "OK", **ok}}
    if route.dry_run:
        responses["200"] = {"description": "The dry run's preview (`?dry_run=true`).",
                            "content": {"application/json": {"schema": _ref(Preview)}}}
    for status in (400, 401, 403, 404, 409, 412, 413, 415, 422, 503, *api.ANY_ROUTE_ERRORS):
        responses[str(status)] = {"description": ERRORS.get(status) or api.ERROR_TEXT[status],
                                  "content": {"application/json": {"schema": _ref(WriteError)}}}
    operation: dict[str, Any] = {"operationId": route.name, "summary": route.summary, "parameters": params, "responses": responses}
    if route.body is not None:
        required = any(f.is_required() for f in route.body.model_fields.values())
        operation["requestBody"] = {"required": required, "content": {"application/json": {"schema": _ref(route.body)}}}
    return operation


def _path_names(path: str) -> list[str]:
    return [p.strip("{}") for p in path.split("/") if p.startswith("{")]


def document() -> dict[str, Any]:
    """The tracker's whole OpenAPI document: the read routes (`api.openapi`) and these."""
    doc = api.openapi()
    schemas = doc["components"]["schemas"]
    for name, schema in _schemas().items():
        if name in schemas and schemas[name] != schema:
            raise ValueError(f"two schemas named {name} differ between the read and the write routes")
        schemas[name] = schema
    paths = doc["paths"]
    for route in (*ROUTES, CATALOG_DELETE):
        paths.setdefault(route.path, {})[route.method] = _operation(route)
    paths[GET_PLAN.path] = {"get": {
        "operationId": GET_PLAN.name, "summary": GET_PLAN.summary, "parameters": [api.TENANT, PLAN_ID],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(SavedPlan)}}},
                      **{str(s): {"description": api.ERROR_TEXT[s], "content": {"application/json": {"schema": _ref("Error")}}}
                         for s in (400, 401, 403, 404, 503, *api.ANY_ROUTE_ERRORS)}}}}
    doc["info"]["description"] += (" Writes (POST, PUT, DELETE) become the bus requests the CLI sends, sent as the token's "
                                   "principal; they answer 202 with the job's URL, or 200 with a preview (`?dry_run=true`).")
    return doc


def render() -> str:
    import json

    return json.dumps(document(), indent=2) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
