"""Writes: an HTTP request or a console form, sent as the bus request the CLI sends, as the
requester (docs/tracker.md "Writes", docs/decisions/0017-http-writes.md).

`submit` validates the body against the command's own model (a field at fault is named), asks
the same permission check the planner asks (so a refusal needs no round trip, and buttons can be
left out), derives the idempotency key, sends the request on the requester's own connection
(`acting.py`) and turns the answer into an HTTP status and a JSON body. The planner decides:
the tracker's checks only refuse earlier, never admit.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from pydantic import BaseModel, ValidationError

from contracts import subjects
from contracts.catalog_requests import ApplyCatalog, CatalogAnswer, DeleteCatalogEntity
from contracts.commands import COMMAND_ADAPTER, JOB_VERBS, VERB_OF, Accepted, DryRun, LeaseExtended, Rejected
from contracts.errors import problem_text, typed_strictly
from contracts.events import PlanSaved
from contracts.governance import GovernanceAnswer, Schedule
from contracts.identity import Permission, Scope
from muster.catalog.files import kind_of
from muster.catalog.problems import KIND_LABEL
from muster.catalog.requests import ask_planner
from muster.client import MusterClient, NoAnswer, RequestRejected
from services.auth.domain.authz import OPERATION_PERMISSIONS, operation_scope, plan_refusal
from services.governance.domain.approvals import not_to_decide
from services.planner.domain.operations import OPERATIONS

from . import plans
from .acting import ActingBus, TokenRefused
from .app import Tracker
from .auth import job_cluster, job_requester
from .people import cluster_name
from .write_api import GOVERNANCE_KINDS, IDEMPOTENCY_KEY, Preview, WriteRoute

REQUEST_TIMEOUT_S = 10.0
ATTEMPTS = 3
_UNION_MEMBER = re.compile(r"[-\[]")
"""pydantic names a union's member in an error's location (`constrained-int`, `function-after[...]`);
a body's own fields never have a hyphen or a bracket."""
STATUS_OF_CODE = {"invalid": 422, "forbidden": 403, "not_found": 404, "conflict": 409, "precondition": 412, "stale": 409,
                  "unavailable": 503}


@dataclass(frozen=True)
class Actor:
    """Who writes: the tenant, the principal, its token (None: auth off) and its grants."""

    tenant: str
    principal: str
    token: str | None = field(repr=False)
    may: Callable[[Permission, Scope], object] | None = field(default=None, compare=False, repr=False)
    """The principal's grants, asked as the planner asks them; None: anything (auth off)."""


@dataclass(frozen=True)
class Written:
    """What a write came to: the HTTP status, the JSON body, headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status < 400

    @property
    def message(self) -> str:
        return str(self.body.get("error", {}).get("message", ""))

    @property
    def field(self) -> str | None:
        return self.body.get("error", {}).get("parameter")

    @property
    def problems(self) -> list[tuple[str | None, str]]:
        """Each problem a refusal names, with its field: several when the request had several
        (a create), else the one."""
        error = self.body.get("error", {})
        listed = [(p.get("parameter"), str(p.get("message", ""))) for p in error.get("problems") or () if "parameter" in p]
        return listed or [(self.field, self.message)]


def refused(status: int, message: str, parameter: str | None = None, **extra: Any) -> Written:
    error = {"status": status, "message": message, "parameter": parameter, **{k: v for k, v in extra.items() if v is not None}}
    return Written(status, {"error": error}, {"Retry-After": "1"} if status == 503 else {})


def request_id_for(tenant: str, principal: str, key: str | None) -> str:
    """The bus request's idempotency key: derived from the requester's own `Idempotency-Key`
    (so a retry through any tracker maps to the same job, and two principals' keys never meet),
    or new for a request without one."""
    if key is None:
        return uuid.uuid4().hex
    return "http-" + hashlib.sha256(f"{tenant}\n{principal}\n{key}".encode()).hexdigest()[:40]


def validation_refusal(err: ValidationError, what: str = "body", takes: Iterable[str] = (), under: tuple[str, int] = ("", 0)) -> Written:
    """422 naming the first field at fault. A field that takes one of several types (a rolling
    batch: a count or a percentage) is named once, with what each type would have needed, not
    by pydantic's names of the types (`rolling.batch.constrained-int`). A field the body does
    not have is answered with those it has (`takes`): `{"add": "2h"}` to extend-lease was told
    "Extra inputs are not permitted", and not that the field is `add_s`. `under`: a field the
    model validated stands in (`command`), and how many of the location's first parts are not
    the body's (a union's tag)."""
    reasons: dict[str, list[str]] = {}
    for problem in err.errors():
        where = ".".join([*filter(None, [under[0]]), *(str(p) for p in problem["loc"][under[1]:] if not _UNION_MEMBER.search(str(p)))]) or what
        said = problem_text(problem)
        if problem.get("type") == "extra_forbidden" and len(problem["loc"]) == 1 and takes:
            said = f"this body has no field {where!r} (its fields: {', '.join(takes)})"
        reasons.setdefault(where, []).append(said)
    words = "; ".join(f"{where}: {', or '.join(msgs)}" for where, msgs in reasons.items())
    problems = [{"parameter": where, "message": ", or ".join(msgs)} for where, msgs in reasons.items()]
    return refused(422, f"invalid request: {words}", next(iter(reasons), what), problems=problems if len(problems) > 1 else None)


def body_fields(model: type[BaseModel], body: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON body's fields, each value of its field's JSON type: `"nodes": "3"` is refused, not
    read as 3, `"restart": "true"` is not true. A body is typed by its sender, so a string where
    a number belongs is a mistake to name, not to guess at; query parameters, strings by nature,
    are parsed (docs/tracker.md, "Writes"). What JSON can only say as a string is read as before
    (a time, a date for a time, a percentage)."""
    raw = json.dumps(body or {})
    return typed_strictly(lambda strict: model.model_validate_json(raw, strict=strict)).model_dump(exclude_unset=True)


_TYPE_OF = {verb: kind for kind, verb in VERB_OF.items()}


def command_types_refusal(fields: dict[str, Any]) -> Written | None:
    """A schedule's `command` is an object of the bus's (`dict` in the body's schema): it is held
    to JSON's types as the body is, `{"nodes": "9"}` a 422 at `command.nodes` (it was stored, and
    each tick read it as 9). Wrong in other ways too, it is left to the governance service, whose
    words name what a schedule's command must be."""
    command = fields.get("command")
    kind = command.get("type") or _TYPE_OF.get(str(fields.get("verb"))) if isinstance(command, dict) else None
    if not isinstance(command, dict) or kind is None:
        return None
    typed = json.dumps({**command, "type": kind})
    try:
        COMMAND_ADAPTER.validate_json(typed)
    except ValidationError:
        return None
    try:
        typed_strictly(lambda strict: COMMAND_ADAPTER.validate_json(typed, strict=strict))
    except ValidationError as strict:
        return validation_refusal(strict, under=("command", 1))
    return None


async def submit(tracker: Tracker, bus: ActingBus, actor: Actor, route: WriteRoute, ids: dict[str, str],
                 body: dict[str, Any] | None, *, dry_run: bool = False, key: str | None = None,
                 if_version: int | None = None) -> Written:
    """One write, as `actor`: validated, checked, sent, answered."""
    fields: dict[str, Any] = {}
    if route.body is not None:
        try:
            fields = body_fields(route.body, body)
        except ValidationError as err:
            return validation_refusal(err, takes=route.body.model_fields)
        loose = command_types_refusal(fields) if route.verb == "governance-put" and route.command is Schedule else None
        if loose is not None:
            return loose
    elif body:
        return refused(422, f"{route.method.upper()} {route.path} takes no body; got fields {', '.join(sorted(body))[:200]}", "body")
    denied = await _permission(tracker, actor, route, ids)
    if denied is not None:
        return denied
    if route.verb in ("catalog-apply", "catalog-delete"):
        return await _catalog(bus, actor, route, ids, fields, dry_run)
    if route.verb.startswith("governance-"):
        return await _governance(bus, actor, route, ids, fields)
    values: dict[str, Any] = {**fields, **ids, "request_id": request_id_for(actor.tenant, actor.principal, key),
                              "requested_by": actor.principal}
    if route.dry_run:
        values["dry_run"] = dry_run
    if if_version is not None:
        values["if_version"] = if_version
    try:
        command = route.command.model_validate(values)
    except ValidationError as err:
        return validation_refusal(err)
    try:
        nc = await bus.connection(actor.token) if actor.token else bus.own
        reply = await MusterClient(nc, tenant=actor.tenant, requested_by=actor.principal, timeout=REQUEST_TIMEOUT_S,
                                   attempts=ATTEMPTS).request(command)  # type: ignore[arg-type]
    except TokenRefused as err:
        return refused(401, str(err))
    except NoAnswer as err:
        return refused(503, f"{err}; send it again (with the same Idempotency-Key it maps to the same job)")
    for job_id in {ids.get("job_id"), getattr(reply, "job_id", None)} - {None, ""}:
        tracker.written(actor.tenant, str(job_id))
    written = answer(route, reply)
    cluster_id = ids.get("cluster_id")
    error = written.body.get("error")
    named = bool(cluster_id) and error is not None and str(cluster_id) in str(error.get("message", "")) \
        and _reads(actor, str(cluster_id))
    name = await cluster_name(tracker, actor.tenant, cluster_id) if cluster_id and named else ""
    return in_http_terms(written, values["request_id"], key, {cluster_id: name} if cluster_id and name else None)


def in_http_terms(written: Written, request_id: str | None, key: str | None, names: dict[str, str] | None = None) -> Written:
    """A refusal names the header the HTTP client sent, not the bus field it became: the
    derived `request_id` is the client's `Idempotency-Key`, `if_version` its `If-Match`. The
    planner names a cluster by id; with its name in `names` it is said as `cluster <name>
    (<id>)`, as the CLI says it (a 412 or a refused repair is read by someone who knows the
    cluster by its name)."""
    error = written.body.get("error")
    if error is None:
        return written
    message = str(error["message"])
    for ident, name in (names or {}).items():
        for said in (f"cluster {ident!r}", f"cluster {ident}"):
            message = message.replace(said, f"cluster {name} ({ident})")
    error = {**error, "message": message}
    if error.get("parameter") == "request_id" and key is not None:
        message = message.replace(f"request_id {request_id!r}", f"{IDEMPOTENCY_KEY} {key!r}").replace(
            "a new request_id", f"a new {IDEMPOTENCY_KEY}").replace("if_version", "If-Match")
        error = {**error, "parameter": IDEMPOTENCY_KEY, "message": message}
    elif error.get("parameter") == "if_version":
        error = {**error, "parameter": "If-Match", "message": message.replace("(if_version)", "(If-Match)")}
    return Written(written.status, {**written.body, "error": error}, written.headers)


def answer(route: WriteRoute, reply: Any) -> Written:
    if isinstance(reply, Accepted):
        job_url = f"/v1/jobs/{reply.job_id}"
        return Written(202, {"job_id": reply.job_id, "cluster_id": reply.cluster_id, "duplicate": reply.duplicate,
                             "warnings": list(reply.warnings), "job_url": job_url, "cluster_url": f"/v1/clusters/{reply.cluster_id}"},
                       {"Location": job_url})
    if isinstance(reply, DryRun):
        preview = Preview(operation=route.verb, plan_id=reply.plan_id or None,
                          plan_url=f"/v1/plans/{reply.plan_id}" if reply.plan_id else None,
                          cluster_version=reply.cluster_version, catalog_version=reply.catalog_version, layout=reply.layout,
                          plan=reply.plan, summary=plans.summary(reply.plan), cost=reply.cost, policy=reply.policy,  # type: ignore[arg-type]
                          warnings=list(reply.warnings))
        # An approval's look saves no plan: its plan_id and plan_url are left out (they were
        # empty strings, read as a plan to apply at "").
        return Written(200, preview.model_dump(mode="json", exclude={"plan_id", "plan_url"} if not reply.plan_id else None))
    if isinstance(reply, LeaseExtended):
        return Written(200, {"cluster_id": reply.cluster_id, "expires_at": reply.expires_at.isoformat(), "version": reply.version})
    assert isinstance(reply, Rejected)
    status = 503 if reply.retry else STATUS_OF_CODE.get(reply.code or "", 422)
    problems = [{"parameter": p.field, "message": p.reason} for p in reply.problems]
    return refused(status, reply.reason, reply.field, job_id=reply.job_id, problems=problems or None)


async def _permission(tracker: Tracker, actor: Actor, route: WriteRoute, ids: dict[str, str]) -> Written | None:
    """The planner's own check (`may_operate`), asked here first; catalog writes are checked per
    entity by the planner alone (unchanged entities need no grant)."""
    if actor.may is None or route.verb not in OPERATION_PERMISSIONS:
        return None
    verb, cluster_id, job_id = route.verb, ids.get("cluster_id"), ids.get("job_id")
    if verb in ("reject", "approve") and job_id and await job_requester(tracker, actor.tenant, job_id) == actor.principal:
        # A requester may always reject its own job (docs/governance.md), and is told by the planner
        # why it may not approve it (a missing `approve` named a grant that would not help).
        return None
    if verb in JOB_VERBS and job_id:
        cluster_id = await job_cluster(tracker, actor.tenant, job_id)
        if cluster_id is None:  # as a read of it answers, to anyone (a 403 named a grant on a job that is not there)
            return refused(404, f"no job {job_id} in tenant {actor.tenant}", "job_id")
    if verb == "apply":
        found = await saved_plan(tracker, actor.tenant, ids["plan_id"])
        if found is None:
            return refused(404, f"no plan {ids['plan_id']} in tenant {actor.tenant}: dry runs save plans", "plan_id")
        verb, cluster_id = OPERATIONS[found[0].operation].verb, found[0].cluster_id
        if verb == "create":
            cluster_id = None
    decision = actor.may(OPERATION_PERMISSIONS[verb], operation_scope(actor.tenant, verb, cluster_id, job_id))
    if decision:
        return None
    reason = getattr(decision, "reason", "") or "no permission"
    reads = cluster_id is not None and _reads(actor, cluster_id)
    if route.verb == "apply" and cluster_id and not reads:
        return refused(403, f"{verb} refused: {plan_refusal(actor.principal, verb, actor.tenant)}")
    # The auth rule names the cluster by id; its requester knows it by name (as the CLI says it),
    # if it may read it (a plan's cluster was said by name to anyone holding the plan's id).
    name = await cluster_name(tracker, actor.tenant, cluster_id) if cluster_id and reads and cluster_id in reason else ""
    # A decision refused is said as the planner says it, whoever asks (a requester's came from it).
    said = not_to_decide(actor.principal, verb, job_id, reason) if verb in ("approve", "reject") and job_id else f"{verb} refused: {reason}"
    return in_http_terms(refused(403, said), None, None, {cluster_id: name} if cluster_id and name else None)


def _reads(actor: Actor, cluster_id: str) -> bool:
    """May the writer read the cluster (and so be told its name)."""
    return actor.may is None or bool(actor.may("read", Scope(tenant=actor.tenant, kind="cluster", id=cluster_id)))


async def saved_plan(tracker: Tracker, tenant: str, plan_id: str) -> tuple[PlanSaved, int] | None:
    """The plan a dry run saved, and its log sequence."""
    found = await tracker.store.read(subjects.plan_events(tenant, plan_id))
    event = found[0].event if found else None
    return (event, found[0].seq) if isinstance(event, PlanSaved) else None


async def _catalog(bus: ActingBus, actor: Actor, route: WriteRoute, ids: dict[str, str], fields: dict[str, Any],
                   dry_run: bool = False) -> Written:
    request: ApplyCatalog | DeleteCatalogEntity
    if route.verb == "catalog-apply":
        request = ApplyCatalog(**fields, requested_by=actor.principal, dry_run=dry_run)
    else:
        try:
            request = DeleteCatalogEntity(kind=ids["kind"], name=ids["name"], requested_by=actor.principal)
        except ValidationError as err:  # (a kind or a name no entity has: each said, as the planner says them)
            return validation_refusal(err)
    try:
        nc = await bus.connection(actor.token) if actor.token else bus.own
        found = await ask_planner(nc, actor.tenant, request)
    except TokenRefused as err:
        return refused(401, str(err))
    except NoAnswer as err:
        return refused(503, str(err))
    except RequestRejected as err:
        return answer(route, err.reply)
    if found is None:
        return refused(503, "no planner is listening: catalog changes go through a planner")
    return catalog_written(found, (ids["kind"], ids["name"]) if isinstance(request, DeleteCatalogEntity) else None)


def catalog_written(found: CatalogAnswer, deleted: tuple[str, str] | None = None) -> Written:
    """A delete refused names the entity as `muster catalog delete` does (`provider 'sim' not deleted: ...`)."""
    if found.ok:
        return Written(200, found.model_dump(mode="json"))
    if found.reasons:
        what = f"{KIND_LABEL.get(kind_of(deleted[0]) or deleted[0], deleted[0])} {deleted[1]!r} " if deleted else ""
        return refused(409, what + "not deleted: " + "; ".join(found.reasons))
    errors = [p for p in found.problems if p.severity == "error"]
    first = errors[0] if errors else None
    where = ".".join(x for x in (first.kind, first.entity, first.field) if x) if first else None
    said = "catalog would not be applied (dry run): " if found.dry_run else "catalog not applied: "
    return refused(422, said + "; ".join(p.message for p in errors)[:2000], where and f"catalog.{where}",
                   problems=[p.model_dump(mode="json") for p in found.problems])


async def _governance(bus: ActingBus, actor: Actor, route: WriteRoute, ids: dict[str, str], fields: dict[str, Any]) -> Written:
    """A rule, policy, subscription or schedule put or deleted as `muster rule|policy|notify|schedule` does: a
    request to the governance service in the requester's name, which checks its rights and writes
    it with the requester as `by`."""
    kind = GOVERNANCE_KINDS[route.command][0]
    verb = route.verb.removeprefix("governance-")  # put, delete; a schedule's pause, resume
    request: dict[str, Any] = {"kind": kind, "requested_by": actor.principal}
    if verb == "put":
        if kind == "schedule" and not fields.get("verb"):  # the command's own (the governance service checks they agree)
            fields = {**fields, "verb": VERB_OF.get(str(fields.get("command", {}).get("type")), "")}
        request["entities"] = [{**fields, "name": ids["name"]}]
    else:
        request["name"] = ids["name"]
    try:
        nc = await bus.connection(actor.token) if actor.token else bus.own
        msg = await nc.request(subjects.governance_request(actor.tenant, actor.principal, verb), json.dumps(request).encode(),
                               timeout=REQUEST_TIMEOUT_S)
    except TokenRefused as err:
        return refused(401, str(err))
    except nats.errors.NoRespondersError:
        if verb == "notify-test":  # (the notifier answers a test, not the governance service)
            return refused(503, "no notifier answered: is `muster up` (or `muster notifier`) running?")
        return refused(503, "no governance service answered: is `muster up` (or `muster governance`) running?")
    except nats.errors.TimeoutError:
        if verb == "notify-test":
            return refused(503, f"no notifier answered within {REQUEST_TIMEOUT_S:g} s: send it again")
        return refused(503, f"the governance service did not answer within {REQUEST_TIMEOUT_S:g} s; send it again")
    answered = GovernanceAnswer.model_validate_json(msg.data)
    if answered.ok:
        return Written(200, answered.model_dump(mode="json"))
    # Each problem apart too (`error.problems`), as a create's: the console puts each at its field.
    return refused(STATUS_OF_CODE.get(answered.code or "", 422), "; ".join([answered.reason, *answered.problems])[:4000], "name"
                   if answered.code == "not_found" else None,
                   problems=[{"parameter": None, "message": p[:2000]} for p in answered.problems[:100]] or None)
