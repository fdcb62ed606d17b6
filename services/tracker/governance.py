"""Governance over HTTP (docs/governance.md): the tenant's approval rules, policies,
subscriptions, schedules (with their last and next runs) and the requests its policies denied,
read from the log for principals that may read the tenant.

Approving or rejecting a job is a write like the others (`write_api.DECISIONS`: `POST
/v1/jobs/{job_id}/approve|reject`), and so are a rule, policy, subscription or schedule put or
deleted (`write_api.GOVERNANCE_WRITES`: `PUT|DELETE
/v1/governance/rules|policies|subscriptions|schedules/{name}`, sent to the governance service in
the requester's name).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from contracts import subjects
from contracts.governance import Schedule
from contracts.identity import Scope
from services.auth.domain.authz import may_see_schedule
from services.governance.domain import stored
from services.governance.domain.operation_text import operation_text
from services.governance.domain.schedules import describe, listed_due
from services.governance.store import read_entries, with_deliveries, with_ends
from services.governance.writes import schedules_shown

from . import auth as auth_
from .params import TRACKER, error, tenant_of

KINDS = {"rules": "rule", "policies": "policy", "subscriptions": "subscription", "schedules": "schedule"}


def schedule_runs(item: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A schedule's last run and next tick, for people."""
    try:
        schedule = Schedule.model_validate(item["entity"])
    except ValidationError:
        return {"when": "?", "next_at": None, "last": None, "operation": "?"}
    upcoming = None if schedule.paused or item.get("ended") else listed_due(schedule, item, now).next_at
    return {"when": describe(schedule), "next_at": upcoming.isoformat() if upcoming else None,
            "operation": schedule.text or operation_text(schedule.verb, schedule.command),
            "last": item["runs"][-1] if item.get("runs") else None}


async def listing(store: Any, tenant: str, kind: str) -> list[dict[str, Any]]:
    entries, _ = await read_entries(store, tenant, kind)
    items = [e.to_json() for (k, _), e in sorted(entries.items()) if k == kind]
    if kind == "schedule":
        now = datetime.now(UTC)
        items = [{**i, **schedule_runs(i, now)} for i in await with_ends(store, tenant, items)]
    if kind == "subscription":
        items = await with_deliveries(store, tenant, items)
    return items


async def denials(store: Any, tenant: str, limit: int = 50) -> list[dict[str, Any]]:
    records = await store.read(f"{subjects.EVT}.{subjects.token(tenant, 'tenant')}.denied.*")
    return [{**r.event.model_dump(mode="json"), "at": r.time.isoformat(), "seq": r.seq} for r in records[-limit:]][::-1]


def _readable(request: web.Request, tenant: str, what: str) -> bool:
    """Whether the requester reads every entity of `what`: with `read` on the tenant, yes; without,
    the schedules it owns or may run are still its to list (as `muster schedule list` lists them,
    docs/governance.md), and anything else is a 403."""
    if what == "schedules" and not request[auth_.AUTHZ].may("read", Scope(tenant=tenant)):
        return False
    auth_.may_read(request, Scope(tenant=tenant))
    return True


def _seen(request: web.Request, tenant: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    authz = request[auth_.AUTHZ]
    return [i for i in items if may_see_schedule(authz.principal.id, authz.may, tenant, i["entity"])]


async def get_governance(request: web.Request) -> web.Response:
    """GET /v1/governance/rules|policies|subscriptions|schedules|denied."""
    tenant = tenant_of(request)
    what = request.match_info["what"]
    if what not in KINDS and what != "denied":  # before the grant: a mistyped list is not one the requester needs a grant for
        return error(404, f"no governance list {what[:40]!r}: one of {', '.join([*KINDS, 'denied'])}", "what")
    every = _readable(request, tenant, what)
    store = request.app[TRACKER].store
    if what == "denied":
        return web.json_response({"items": await denials(store, tenant)})
    items = await listing(store, tenant, KINDS[what])
    if every:
        # A policy stored before a check it fails denies every operation it judges (decision 49):
        # said here as `muster policy list --json` and the console say it.
        return web.json_response({"items": items, **({"warnings": warned} if (warned := _failing(what, items)) else {})})
    return web.json_response({"items": _seen(request, tenant, items),
                              "warnings": [schedules_shown(request[auth_.AUTHZ].principal.id, tenant)]})


def _failing(what: str, items: list[dict[str, Any]]) -> list[str]:
    return stored.listed_warnings(items) if what == "policies" else []


async def get_governance_entry(request: web.Request) -> web.Response:
    """GET /v1/governance/rules|policies|subscriptions|schedules/{name}."""
    tenant = tenant_of(request)
    what, name = request.match_info["what"], request.match_info["name"]
    if what not in KINDS:
        return error(404, f"no governance kind {what[:40]!r}: one of {', '.join(KINDS)}", "what")
    every = _readable(request, tenant, what)
    found = [i for i in await listing(request.app[TRACKER].store, tenant, KINDS[what]) if i["name"] == name]
    if not every:  # one it may not see is answered as one the tenant has not (no news of others' schedules)
        found = _seen(request, tenant, found)
    if not found:
        return error(404, f"no {KINDS[what]} {name[:64]!r} in tenant {tenant}", "name")
    return web.json_response(found[0])
