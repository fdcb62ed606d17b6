"""The tracker's whole OpenAPI document: the read routes (`api.openapi`) and the writes
(`write_api`), checked in as docs/openapi.json (`make contracts`; a test fails when it is stale).

    python -m services.tracker.contract > docs/openapi.json
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from contracts import commands as c
from contracts.catalog_requests import CatalogAnswer
from contracts.governance import GovernanceAnswer

from . import api
from .write_api import (
    CATALOG_DELETE,
    GET_PLAN,
    GOVERNANCE_WRITES,
    IDEMPOTENCY_KEY,
    MAX_KEY_LENGTH,
    ROUTES,
    JobAccepted,
    LeaseOut,
    Preview,
    SavedPlan,
    WriteError,
    WriteRoute,
)

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
LOCATION = {"description": "The job's URL (`/v1/jobs/{job_id}`).", "required": True, "schema": {"type": "string"}}
RETRY_AFTER = {"description": "Seconds to wait before sending it again (a planner that did not answer).",
               "schema": {"type": "string"}}
PATH_PARAMS = {"cluster_id": api.CLUSTER_ID, "job_id": api.JOB_ID, "plan_id": PLAN_ID, "kind": KIND, "name": NAME}
ERRORS = {400: "A malformed parameter or header (`error.parameter` names it).",
          401: api.ERROR_TEXT[401], 403: "The principal may not do this (the message says which permission on what).",
          404: "No such cluster, job, plan or entity in this tenant.",
          409: "It collides: a busy or deleted cluster, a taken name, a stale saved plan, or an Idempotency-Key used for "
               "another request (`error.parameter`: Idempotency-Key; `error.job_id`: the job it made).",
          412: "If-Match: the cluster is at another version (`error.parameter`: If-Match).", 413: "The body is too big.",
          415: "The body is not `application/json`.",
          422: "The body is not a valid request, or the planner refused it (`error.parameter` names the field).",
          503: "NATS or every planner is unavailable; try again (the same Idempotency-Key is safe)."}


def _schemas() -> dict[str, Any]:
    answers: list[type[BaseModel]] = [JobAccepted, Preview, SavedPlan, LeaseOut, WriteError, CatalogAnswer, GovernanceAnswer]
    bodies = {r.body for r in (*ROUTES, CATALOG_DELETE, *GOVERNANCE_WRITES) if r.body is not None}
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
    if route.verb not in ("catalog-apply", "catalog-delete") and not route.verb.startswith("governance-"):
        params.append(KEY)
    if route.if_match:
        params.append(IF_MATCH)
    ok: dict[str, Any] = {"content": {"application/json": {"schema": _ref(route.answer)}}}
    if route.status == 202:
        ok["headers"] = {"Location": LOCATION}
    responses: dict[str, Any] = {str(route.status): {"description": route.answer.__doc__ or "OK", **ok}}
    if route.dry_run and route.status == 202:  # (a catalog's dry run answers as its apply does, `dry_run` true)
        responses["200"] = {"description": "The dry run's preview (`?dry_run=true`).",
                            "content": {"application/json": {"schema": _ref(Preview)}}}
    for status in (400, 401, 403, 404, 409, 412, 413, 415, 422, 503, *api.ANY_ROUTE_ERRORS):
        responses[str(status)] = {"description": ERRORS.get(status) or api.ERROR_TEXT[status],
                                  "content": {"application/json": {"schema": _ref(WriteError)}}}
    responses["503"]["headers"] = {"Retry-After": RETRY_AFTER}
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
    for route in (*ROUTES, CATALOG_DELETE, *GOVERNANCE_WRITES):
        paths.setdefault(route.path, {})[route.method] = _operation(route)
    paths[GET_PLAN.path] = {"get": {
        "operationId": GET_PLAN.name, "summary": GET_PLAN.summary, "parameters": [api.TENANT, PLAN_ID],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(SavedPlan)}}},
                      **{str(s): {"description": api.ERROR_TEXT[s], "content": {"application/json": {"schema": _ref("Error")}}}
                         for s in (400, 401, 403, 404, 503, *api.ANY_ROUTE_ERRORS)}}}}
    doc["info"]["description"] += (" Writes (POST, PUT, DELETE) become the bus requests the CLI sends, sent as the token's "
                                   "principal; they answer 202 with the job's URL, or 200 with a preview (`?dry_run=true`).")
    return doc


def query_parameters(doc: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each route's query parameters, by its name (`operationId`), as the document declares them:
    one any other is refused (a 400 naming it, docs/tracker.md). `POST ...?dryrun=true` ran
    the operation it was meant to preview, and `GET /v1/jobs?stat=failed` listed every job."""
    return {op["operationId"]: tuple(p["name"] for p in op.get("parameters", ()) if p["in"] == "query")
            for methods in doc["paths"].values() for op in methods.values()}


def render() -> str:
    return json.dumps(document(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
