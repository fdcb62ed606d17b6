"""Governance over HTTP (docs/governance.md): approve or reject a job that waits for approval,
and read the tenant's approval rules, policies, subscriptions, schedules (with their last and
next runs) and the requests its policies denied.

An approval is the same bus request `muster job approve` sends, in the name of the principal
whose token the tracker checked; the planner checks its `approve` permission and records it as
`by`. Reads come from the log (the governance entities' subjects), for principals that may read
the tenant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from contracts import subjects
from contracts.commands import Accepted, ApproveJob, Rejected, RejectJob
from contracts.governance import Schedule
from contracts.identity import Scope
from muster.bus.connect import auth_required
from muster.client import MusterClient, NoAnswer
from services.governance.domain.schedules import describe, due
from services.governance.store import read_entries

from . import auth as auth_
from .params import TRACKER, UUID_RE, error, tenant_of

DECIDE_TIMEOUT_S = 10.0
KINDS = {"rules": "rule", "policies": "policy", "subscriptions": "subscription", "schedules": "schedule"}


async def decide(nc: Any, tenant: str, by: str, job_id: str, approve: bool, comment: str) -> tuple[bool, str]:
    """Send the decision as `by`; whether the planner took it, and its words."""
    acting = by if auth_required(nc) else None
    client = MusterClient(nc, tenant=tenant, requested_by=by, timeout=DECIDE_TIMEOUT_S, attempts=2, on_behalf_of=acting)
    command = (ApproveJob if approve else RejectJob)(job_id=job_id, comment=comment[:2000])
    try:
        reply = await client.request(command, tenant=tenant)
    except NoAnswer as err:
        return False, f"no answer: {err}"
    if isinstance(reply, Accepted):
        return True, "approved" if approve else "rejected"
    return False, reply.reason if isinstance(reply, Rejected) else f"unexpected answer: {reply.type}"


async def post_decision(request: web.Request) -> web.Response:
    """POST /v1/jobs/{job_id}/approve|reject, body `{"comment": "..."}`."""
    from .ui.session import same_origin  # (the console imports this module)

    tenant = tenant_of(request)
    if "Authorization" not in request.headers and not same_origin(request):
        # Signed in by the console's cookie, which a browser sends to any site's form post too.
        return error(403, "a decision with the console's cookie must come from the console's own page; "
                          "scripts send 'Authorization: Bearer <token>'", "Authorization")
    job_id = request.match_info["job_id"].lower()
    if not UUID_RE.fullmatch(job_id):
        return error(400, f"{job_id[:80]!r} is not a job id (a UUID)", "job_id")
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        return error(400, "the body must be JSON: {\"comment\": \"...\"}", "body")
    comment = body.get("comment", "") if isinstance(body, dict) else None
    if not isinstance(comment, str):
        return error(400, "comment must be a string", "comment")
    approve = request.match_info["verb"] == "approve"
    ok, said = await decide(request.app[TRACKER].store.nc, tenant, request[auth_.AUTHZ].principal.id, job_id, approve, comment)
    if not ok:
        return error(409, said, "job_id")
    return web.json_response({"job_id": job_id, "decision": said, "by": request[auth_.AUTHZ].principal.id}, status=202)


def schedule_runs(item: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A schedule's last run and next tick, for people."""
    try:
        schedule = Schedule.model_validate(item["entity"])
    except ValidationError:
        return {"when": "?", "next_at": None, "last": None}
    last_tick = datetime.fromisoformat(item["last_tick"]) if item.get("last_tick") else None
    upcoming = None if schedule.paused else due(schedule, last_tick, datetime.fromisoformat(item["created_at"]), now).next_at
    return {"when": describe(schedule), "next_at": upcoming.isoformat() if upcoming else None,
            "last": item["runs"][-1] if item.get("runs") else None}


async def listing(store: Any, tenant: str, kind: str) -> list[dict[str, Any]]:
    entries, _ = await read_entries(store, tenant, kind)
    items = [e.to_json() for (k, _), e in sorted(entries.items()) if k == kind]
    if kind == "schedule":
        now = datetime.now(UTC)
        items = [{**i, **schedule_runs(i, now)} for i in items]
    return items


async def denials(store: Any, tenant: str, limit: int = 50) -> list[dict[str, Any]]:
    records = await store.read(f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.denied.*")
    return [{**r.event.model_dump(mode="json"), "at": r.time.isoformat(), "seq": r.seq} for r in records[-limit:]][::-1]


async def get_governance(request: web.Request) -> web.Response:
    """GET /v1/governance/rules|policies|subscriptions|schedules|denied."""
    tenant = tenant_of(request)
    auth_.may_read(request, Scope(tenant=tenant))
    what = request.match_info["what"]
    store = request.app[TRACKER].store
    if what == "denied":
        return web.json_response({"items": await denials(store, tenant)})
    if what not in KINDS:
        return error(404, f"no governance list {what[:40]!r}: one of {', '.join([*KINDS, 'denied'])}", "what")
    return web.json_response({"items": await listing(store, tenant, KINDS[what])})


def add_routes(app: web.Application) -> None:
    """A named route: the tracker's auth middleware checks the bearer token of every named route
    (the reads are in `api.ROUTES`)."""
    app.router.add_post("/v1/jobs/{job_id}/{verb:approve|reject}", post_decision, name="job-decision")
